//! The distributed route: a scan run as one task of a distributed query
//! ([`crate::distributed`]) reads only its [`TaskShare`] of the row
//! groups, placed on their owners like any fleet scan
//! ([`super::fleet::place`]).
//!
//! The coordinator plans the scan on one layout and names each task's
//! share in the task's request scope ([`share_scope`]), so every task
//! reads its share of one listing. A task planned without one (a view, a
//! table whose server gave no layout) lists a layout of its own and keeps
//! its share of it; a table without row groups at all is read whole, by
//! task 0.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::error::Result;
use futures::StreamExt;
use futures::stream::BoxStream;
use silt_proto::SegmentScope;

use super::layout::{RowGroup, scope_of};
use super::{Scan, ScanRoute};
use crate::fleet::{Fleet, TaskShare, row_group_name};

/// Task `share.task`'s row groups of the scan, on their owners in `fleet`.
#[derive(Debug)]
pub struct DistributedRoute {
    pub fleet: Arc<Fleet>,
    pub share: Arc<TaskShare>,
}

#[async_trait]
impl ScanRoute for DistributedRoute {
    async fn open(&self, scan: Scan) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let (fleet, share, request) = (&self.fleet, &self.share, &scan.request);
        let groups = match &request.scope {
            // The row groups the scope names, all from the one layout the
            // coordinator planned with.
            Some(scope) => Some(RowGroup::of_scope(scope)),
            // Else a layout of its own (a task planned without one: its share).
            None => fleet
                .layout(&request.table, request.query.clone())
                .await?
                .map(|mut groups| {
                    let mine = reads(fleet, share);
                    groups.retain(|g| mine(g));
                    groups
                }),
        };
        if groups.is_none() && share.task != 0 {
            return Ok(futures::stream::empty().boxed());
        }
        super::fleet::place(fleet.members(), groups, scan.request, scan.out).await
    }
}

/// The scope of task `share.task`'s row groups of `planned`, the layout
/// the coordinator planned the scan with (object versions and row groups):
/// what the task's request names.
pub(crate) fn share_scope(planned: &[RowGroup], fleet: &Fleet, share: &TaskShare) -> SegmentScope {
    let mine = reads(fleet, share);
    scope_of(planned.iter().filter(|g| mine(g)))
}

/// Whether task `share.task` reads a row group ([`TaskShare::task_of`]
/// among `fleet`'s members).
fn reads<'a>(fleet: &'a Fleet, share: &'a TaskShare) -> impl Fn(&RowGroup) -> bool + 'a {
    let members: Vec<String> = fleet.clients().iter().map(|c| c.url().to_string()).collect();
    move |g| share.task_of(&members, &row_group_name(&g.object, g.index)) == share.task
}
