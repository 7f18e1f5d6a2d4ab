//! The fleet route: a table served by a fleet of servers
//! ([`crate::fleet`]) has its row groups scanned by their owners, in runs,
//! failing over to the next owner of each (the fleet's module docs say
//! how). The distributed route places its task's share the same way
//! ([`place`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use silt_proto::ScanRequest;

use super::layout::{RowGroup, scope_of};
use super::{Scan, ScanRoute, adapt};
use crate::client::SiltClient;
use crate::fleet::{Fleet, Members, row_group_name};

/// Every row group of the scan on its owner in `fleet`, from a layout the
/// fleet lists.
#[derive(Debug)]
pub struct FleetRoute {
    pub fleet: Arc<Fleet>,
}

#[async_trait]
impl ScanRoute for FleetRoute {
    async fn open(&self, scan: Scan) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let groups = self
            .fleet
            .layout(&scan.request.table, scan.request.query.clone())
            .await?;
        place(self.fleet.members(), groups, scan.request, scan.out).await
    }
}

/// Scans in flight per member.
const SCANS_PER_MEMBER: usize = 2;

/// Row groups of one owner sent in one scan. A request costs the server a
/// plan and a pass over its listing, so a scan per row group would cost
/// ~4x the CPU of one unscoped scan (`silt bench fleet`, TPC-H SF 1); a
/// run is also the unit of retry, held whole until it completes.
pub const ROW_GROUPS_PER_SCAN: usize = 8;

/// Runs `request` across `members` (a fleet's list at one moment: one
/// list for the whole scan, whatever joins or leaves meanwhile), each of
/// `groups` on its owner (module docs of [`crate::fleet`]); `None`: a
/// table without row groups to place (a view), scanned whole by the owner
/// of its name. `out` is the scan's output schema.
pub(crate) async fn place(
    members: Arc<Members>,
    groups: Option<Vec<RowGroup>>,
    request: ScanRequest,
    out: SchemaRef,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let Some(groups) = groups else {
        // No row groups to place: the table's owner scans it whole.
        let batches = scan_on_owner(&members, &request.table, &request, &out).await?;
        return Ok(futures::stream::iter(batches.into_iter().map(Ok)).boxed());
    };
    // Row groups by their first live owner, in runs of at most
    // ROW_GROUPS_PER_SCAN: one request per run, not per row group.
    let mut runs: Vec<(usize, Vec<RowGroup>)> = Vec::new();
    for group in groups {
        let name = row_group_name(&group.object, group.index);
        let owner = members.live_owner(&name);
        match runs
            .iter_mut()
            .rev()
            .find(|(o, run)| *o == owner && run.len() < ROW_GROUPS_PER_SCAN)
        {
            Some((_, run)) => run.push(group),
            None => runs.push((owner, vec![group])),
        }
    }
    let parallel = SCANS_PER_MEMBER * members.len();
    let scans = runs.into_iter().map(move |(owner, run)| {
        let (members, request, out) = (members.clone(), request.clone(), out.clone());
        async move { scan_run(&members, owner, &run, &request, &out).await }
    });
    Ok(futures::stream::iter(scans)
        .buffer_unordered(parallel)
        .map_ok(|batches| futures::stream::iter(batches.into_iter().map(Ok)))
        .try_flatten()
        .boxed())
}

/// The rows of row groups `run` (all owned by member `owner`), in one
/// scan on it; if it fails in transport, each row group of the run on its
/// next live owner instead.
async fn scan_run(
    members: &Members,
    owner: usize,
    run: &[RowGroup],
    request: &ScanRequest,
    out: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let scoped = ScanRequest {
        scope: Some(scope_of(run.iter())),
        ..request.clone()
    };
    let answer = members
        .on_member(owner, &|c: SiltClient| {
            let scoped = scoped.clone();
            async move { c.scan_all(&scoped).await }
        })
        .await;
    match answer {
        Ok(batches) => return rows_of(batches, out),
        Err(e) if e.is_unavailable() => {} // its row groups go to their next owners
        Err(e) => return Err(e.into()),
    }
    let mut rows = Vec::new();
    for group in run {
        let scoped = ScanRequest {
            scope: Some(scope_of(std::iter::once(group))),
            ..request.clone()
        };
        let name = row_group_name(&group.object, group.index);
        rows.extend(scan_on_owner(members, &name, &scoped, out).await?);
    }
    Ok(rows)
}

/// `batches`' rows (empty batches dropped) in `out`'s schema.
fn rows_of(batches: Vec<RecordBatch>, out: &SchemaRef) -> Result<Vec<RecordBatch>> {
    batches
        .into_iter()
        .filter(|b| b.num_rows() > 0)
        .map(|b| adapt(b, out))
        .collect()
}

/// All of `request`'s batches (rows only, in `out`'s schema) from the
/// owner of `name`, failing over.
async fn scan_on_owner(
    members: &Members,
    name: &str,
    request: &ScanRequest,
    out: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let batches = members
        .with_failover(name, |c| {
            let request = request.clone();
            async move { c.scan_all(&request).await }
        })
        .await?;
    rows_of(batches, out)
}
