//! A fleet of cache servers behind one client: rendezvous placement per
//! row group and failover (Alluxio's client-side consistent hashing, with no
//! master on the read path).
//!
//! Every server registers the same tables over the same store. A scan asks
//! any server for the table's layout (the validated object versions and
//! their row groups), then sends each row group, in scans scoped to runs
//! of at most [`ROW_GROUPS_PER_SCAN`] row groups ([`ScanRequest::scope`]),
//! to its *owner*: the member with the highest [`weight`] for the row group's
//! name `object#row_group` ([`row_group_name`]) (rendezvous, or highest-random-weight, hashing). Every client computes the same owners
//! without talking to the others, and a member joining or leaving moves
//! only the row groups it wins or held, ~1/N of them.
//!
//! **Failover.** A member that cannot be reached or fails in transport
//! (connect errors, streams broken in HTTP/2, `UNAVAILABLE`, `UNKNOWN`,
//! `CANCELLED`: see
//! [`ClientError::is_unavailable`]) is skipped for [`BACKOFF`];
//! its row groups go to the next member in their rendezvous order, which
//! reads them from the store and caches them. A run's rows are emitted
//! only once its scan completed, so a member dying mid-scan costs a retry
//! of its run's row groups elsewhere, never a duplicate or missing row.
//! After the back-off the member is tried again and, if it answers, gets
//! its row groups back. Errors of the query itself (a bad filter, an object
//! that changed) fail the query as on one server; unlike the hybrid path,
//! an object overwritten between the layout and a run is not retried with
//! a new layout (runs stream as they complete, so some rows may be out):
//! the query fails with the server's "changed" error, never wrong rows.
//!
//! Servers are named by their URL as given (`http://` for `grpc://`):
//! clients must spell a fleet's URLs the same way to agree on owners.
//! Tables without a layout (views, nested columns) are scanned whole by the
//! owner of the table's name, with the same failover, and collected before
//! they are emitted. A fleet client keeps no compute-side cache (yet).

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use silt_core::Backoff;
use silt_proto::ScanRequest;

use crate::client::{ClientError, SiltClient};
use crate::hybrid::RowGroup;

/// How long a member that failed is skipped: longer than a connection
/// attempt may take (10 s), so a member that drops packets costs at most
/// one wait per back-off.
pub const BACKOFF: Duration = silt_core::backoff::BACKOFF;

/// Scans in flight per member.
const SCANS_PER_MEMBER: usize = 2;

/// Row groups of one owner sent in one scan. A request costs the server a
/// plan and a pass over its listing, so a scan per row group would cost
/// ~4x the CPU of one unscoped scan (`silt bench fleet`, TPC-H SF 1); a
/// run is also the unit of retry, held whole until it completes.
const ROW_GROUPS_PER_SCAN: usize = 8;

#[derive(Debug)]
struct Member {
    client: SiltClient,
    /// Skipped for a while after a failure.
    backoff: Backoff,
}

/// The servers of a fleet (see the module docs).
#[derive(Debug)]
pub struct Fleet {
    members: Vec<Member>,
    backoff: Duration,
    /// Tables scanned whole, without a layout: views, and tables whose
    /// server refused a layout (nested columns).
    whole: Mutex<HashSet<String>>,
}

impl Fleet {
    /// A fleet of `urls` (at least one). Connections are made on first
    /// use, so a fleet starts even while some of its servers are down.
    pub fn connect(urls: &[String], token: Option<String>) -> std::result::Result<Self, ClientError> {
        if urls.is_empty() {
            return Err(ClientError::Url("a fleet needs at least one server".into()));
        }
        let members = urls
            .iter()
            .map(|url| {
                Ok(Member {
                    client: SiltClient::connect_lazy(url)?.with_token(token.clone()),
                    backoff: Backoff::default(),
                })
            })
            .collect::<std::result::Result<_, ClientError>>()?;
        Ok(Fleet {
            members,
            backoff: BACKOFF,
            whole: Mutex::new(HashSet::new()),
        })
    }

    /// This fleet with failed members skipped for `backoff`.
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The members' clients, in the order given.
    pub fn clients(&self) -> impl Iterator<Item = &SiltClient> {
        self.members.iter().map(|m| &m.client)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members in rendezvous order for the placement name `name` (highest weight first).
    pub fn rendezvous(&self, name: &str) -> Vec<usize> {
        let urls: Vec<&str> = self.clients().map(SiltClient::url).collect();
        rendezvous_order(&urls, name)
    }

    /// Scans of `table` go whole to the owner of its name (a view: its
    /// rows are computed, it has no row groups to place).
    pub fn scan_whole(&self, table: &str) {
        self.whole
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(table.to_string());
    }

    fn scans_whole(&self, table: &str) -> bool {
        self.whole.lock().unwrap_or_else(|p| p.into_inner()).contains(table)
    }

    /// Whether member `i` is being skipped after a failure.
    pub fn is_down(&self, i: usize) -> bool {
        self.members[i].backoff.is_down()
    }

    /// Runs `call` on the members in `name`'s rendezvous order, members
    /// in back-off last, until one answers or fails with an error of the
    /// request itself (returned as is). Members that fail in transport are
    /// put in back-off.
    pub async fn with_failover<T, F, Fut>(&self, name: &str, call: F) -> std::result::Result<T, ClientError>
    where
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, ClientError>>,
    {
        let order = self.rendezvous(name);
        let (up, down): (Vec<usize>, Vec<usize>) = order.into_iter().partition(|&i| !self.is_down(i));
        let mut last = None;
        for i in up.into_iter().chain(down) {
            match self.on_member(i, &call).await {
                Err(e) if e.is_unavailable() => last = Some(e),
                answer => return answer,
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Url("a fleet needs at least one server".into())))
    }

    /// Runs `call` on member `i`, keeping its health: back in service when
    /// it answers, in back-off when it fails in transport.
    async fn on_member<T, F, Fut>(&self, i: usize, call: &F) -> std::result::Result<T, ClientError>
    where
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, ClientError>>,
    {
        let answer = call(self.members[i].client.clone()).await;
        match &answer {
            Ok(_) => self.members[i].backoff.recover(),
            Err(e) if e.is_unavailable() => {
                tracing::warn!(server = self.members[i].client.url(), error = %e, "fleet member failed; its work goes to the next one");
                self.members[i].backoff.fail_for(self.backoff);
            }
            Err(_) => {}
        }
        answer
    }

    /// The row groups of `table` (a layout from its name's owner, failing
    /// over), or `None` when it has none to place (a view, nested columns):
    /// its scans then go whole to that owner.
    pub(crate) async fn layout(
        &self,
        table: &str,
        query: Option<silt_proto::QueryContext>,
    ) -> std::result::Result<Option<Vec<RowGroup>>, ClientError> {
        if self.scans_whole(table) {
            return Ok(None);
        }
        let request = ScanRequest {
            table: table.to_string(),
            // Every column: a row group is listed under each column its
            // file has, so none is missed whatever columns a file lacks.
            projection: None,
            layout_only: true,
            query,
            ..Default::default()
        };
        let layout = self
            .with_failover(table, |c| {
                let request = request.clone();
                async move { c.scan_all(&request).await }
            })
            .await;
        match layout {
            Ok(batches) => crate::hybrid::parse_layout(&batches)
                .map(Some)
                .map_err(|e| ClientError::Protocol {
                    url: table.to_string(),
                    message: e.to_string(),
                }),
            Err(ClientError::Server {
                code: tonic::Code::InvalidArgument,
                ..
            }) => {
                self.scan_whole(table);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl Fleet {
    /// Per member (in the order given), how many row groups of the fleet's
    /// tables it owns by rendezvous hashing, whatever its health: what
    /// `silt stats` shows across a fleet. Views and tables without a layout
    /// have no row groups to own.
    pub async fn owned_row_groups(&self) -> std::result::Result<Vec<usize>, ClientError> {
        let entries = self
            .with_failover("", |c| async move { c.list_entries().await })
            .await?;
        let mut owned = vec![0; self.len()];
        for (table, kind) in entries {
            if kind == "VIEW" {
                continue;
            }
            for g in self.layout(&table, None).await?.unwrap_or_default() {
                owned[self.rendezvous(&row_group_name(&g.object, g.index))[0]] += 1;
            }
        }
        Ok(owned)
    }
}

pub use silt_proto::placement::{rendezvous_order, row_group_name, weight};

/// The share of a scan's row groups that one task of a distributed query
/// reads ([`crate::distributed`]): the tasks are placed beside fleet
/// members (their *homes*), and a row group goes to a task whose home is
/// the first member in the row group's rendezvous order that is any task's
/// home; among several tasks with that home, to the one with the highest
/// [`weight`] of `task-N`. Every task computes this alone from the same
/// inputs, so the shares are disjoint and cover every row group, and a
/// task's row groups are (when its home has no tasks beside other members
/// to lose them to) the ones its home member owns: its scans stay local.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskShare {
    /// This task's index.
    pub task: usize,
    /// Per task (in task order), the fleet member beside its worker, as the
    /// fleet names it ([`SiltClient::url`]).
    pub homes: Vec<String>,
}

impl TaskShare {
    /// The task that reads `name` among `members` (the fleet's URLs).
    pub fn task_of(&self, members: &[&str], name: &str) -> usize {
        // No task beside any member (homes outside the fleet): every task
        // is a candidate, spread by task alone.
        let home = rendezvous_order(members, name)
            .into_iter()
            .map(|i| members[i])
            .find(|m| self.homes.iter().any(|h| h == m));
        (0..self.homes.len())
            .filter(|&t| home.is_none_or(|home| self.homes[t] == home))
            .max_by_key(|t| weight(&format!("task-{t}"), name))
            .unwrap_or(0)
    }
}

/// Runs `request` across `fleet`: each row group on its owner (module
/// docs); `out` is the scan's output schema. With a `share`, only the row
/// groups of that task of a distributed query ([`TaskShare`]); a table
/// without row groups (a view) is then read whole by task 0.
pub async fn run(
    fleet: Arc<Fleet>,
    request: ScanRequest,
    out: SchemaRef,
    share: Option<Arc<TaskShare>>,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let groups = match (&share, &request.scope) {
        // A task of a distributed query reads the row groups its scope
        // names, all from the one layout the coordinator planned with.
        (Some(_), Some(scope)) => Some(RowGroup::of_scope(scope)),
        // Else a layout of its own (a task planned without one: its share).
        _ => fleet
            .layout(&request.table, request.query.clone())
            .await?
            .map(|mut groups| {
                if let Some(share) = &share {
                    let members: Vec<&str> = fleet.clients().map(SiltClient::url).collect();
                    groups.retain(|g| share.task_of(&members, &row_group_name(&g.object, g.index)) == share.task);
                }
                groups
            }),
    };
    let Some(groups) = groups else {
        if share.as_ref().is_some_and(|s| s.task != 0) {
            return Ok(futures::stream::empty().boxed());
        }
        // No row groups to place: the table's owner scans it whole.
        let batches = scan_on_owner(&fleet, &request.table, &request, &out).await?;
        return Ok(futures::stream::iter(batches.into_iter().map(Ok)).boxed());
    };
    // Row groups by their first live owner, in runs of at most
    // ROW_GROUPS_PER_SCAN: one request per run, not per row group.
    let mut runs: Vec<(usize, Vec<RowGroup>)> = Vec::new();
    for group in groups {
        let name = row_group_name(&group.object, group.index);
        let order = fleet.rendezvous(&name);
        let owner = order.iter().copied().find(|&i| !fleet.is_down(i)).unwrap_or(order[0]);
        match runs
            .iter_mut()
            .rev()
            .find(|(o, run)| *o == owner && run.len() < ROW_GROUPS_PER_SCAN)
        {
            Some((_, run)) => run.push(group),
            None => runs.push((owner, vec![group])),
        }
    }
    let parallel = SCANS_PER_MEMBER * fleet.len();
    let scans = runs.into_iter().map(move |(owner, run)| {
        let (fleet, request, out) = (fleet.clone(), request.clone(), out.clone());
        async move { scan_run(&fleet, owner, &run, &request, &out).await }
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
    fleet: &Fleet,
    owner: usize,
    run: &[RowGroup],
    request: &ScanRequest,
    out: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let scoped = ScanRequest {
        scope: Some(crate::hybrid::scope_of(run.iter())),
        ..request.clone()
    };
    let answer = fleet
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
            scope: Some(crate::hybrid::scope_of(std::iter::once(group))),
            ..request.clone()
        };
        let name = row_group_name(&group.object, group.index);
        rows.extend(scan_on_owner(fleet, &name, &scoped, out).await?);
    }
    Ok(rows)
}

/// `batches`' rows (empty batches dropped) in `out`'s schema.
fn rows_of(batches: Vec<RecordBatch>, out: &SchemaRef) -> Result<Vec<RecordBatch>> {
    batches
        .into_iter()
        .filter(|b| b.num_rows() > 0)
        .map(|b| crate::exec::adapt(b, out))
        .collect()
}

/// All of `request`'s batches (rows only, in `out`'s schema) from the
/// owner of `name`, failing over.
async fn scan_on_owner(fleet: &Fleet, name: &str, request: &ScanRequest, out: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let batches = fleet
        .with_failover(name, |c| {
            let request = request.clone();
            async move { c.scan_all(&request).await }
        })
        .await?;
    rows_of(batches, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://10.0.0.{i}:50051")).collect()
    }

    #[test]
    fn a_joining_server_takes_about_its_share_and_only_from_others() {
        let three = servers(3);
        let four = servers(4);
        let three: Vec<&str> = three.iter().map(String::as_str).collect();
        let four: Vec<&str> = four.iter().map(String::as_str).collect();
        let segments = 20_000;
        let mut moved = 0;
        let mut owned = [0usize; 3];
        for s in 0..segments {
            let name = row_group_name(&format!("t/part-{}.parquet", s / 16), (s % 16) as u32);
            let before = rendezvous_order(&three, &name)[0];
            let after = rendezvous_order(&four, &name)[0];
            owned[before] += 1;
            if before != after {
                moved += 1;
                assert_eq!(after, 3, "a segment moves only to the new server");
            }
        }
        let fraction = moved as f64 / segments as f64;
        assert!((fraction - 0.25).abs() < 0.15, "{fraction}");
        assert!(
            (fraction - 0.25).abs() < 0.02,
            "well within, at this many segments: {fraction}"
        );
        for o in owned {
            assert!((o as f64 / segments as f64 - 1.0 / 3.0).abs() < 0.02, "{owned:?}");
        }
    }

    #[test]
    fn task_shares_follow_their_home_members_and_cover_every_segment_once() {
        let members = servers(3);
        let m: Vec<&str> = members.iter().map(String::as_str).collect();
        // Two workers beside members 0 and 1; member 2 has none.
        let share = TaskShare {
            task: 0,
            homes: vec![members[0].clone(), members[1].clone()],
        };
        let mut per_task = [0usize; 2];
        for s in 0..3000 {
            let name = row_group_name(&format!("t/part-{}.parquet", s / 16), (s % 16) as u32);
            let task = share.task_of(&m, &name);
            let owner = rendezvous_order(&m, &name)[0];
            if owner < 2 {
                assert_eq!(task, owner, "a segment its home owns stays beside it");
            } else {
                // Member 2's segments go to the next home in their order.
                let next = rendezvous_order(&m, &name)[1];
                assert_eq!(task, next);
            }
            per_task[task] += 1;
        }
        for n in per_task {
            assert!((n as f64 / 3000.0 - 0.5).abs() < 0.05, "{per_task:?}");
        }
        // Two tasks beside one member split its segments between them.
        let doubled = TaskShare {
            task: 0,
            homes: vec![members[0].clone(), members[0].clone()],
        };
        let first = (0..3000)
            .filter(|s| doubled.task_of(&m, &row_group_name("t/a.parquet", *s)) == 0)
            .count();
        assert!((first as f64 / 3000.0 - 0.5).abs() < 0.05, "{first}");
    }

    #[test]
    fn the_order_is_a_permutation_and_stable() {
        let s = servers(5);
        let s: Vec<&str> = s.iter().map(String::as_str).collect();
        let order = rendezvous_order(&s, "t/a.parquet#3");
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
        assert_eq!(order, rendezvous_order(&s, "t/a.parquet#3"));
        // Fixed values: other clients (Python) must compute the same.
        assert_eq!(weight("http://a:1", "x#0"), weight("http://a:1", "x#0"));
        assert_ne!(weight("http://a:1", "x#0"), weight("http://a:1", "x#1"));
    }
}
