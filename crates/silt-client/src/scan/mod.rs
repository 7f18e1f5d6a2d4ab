//! The client's scan routes behind one seam.
//!
//! A [`crate::SiltScanExec`] only dispatches: on its stream's first poll
//! (a hash join's dynamic filter is final then) it prepares the [`Scan`]
//! (the request, with the query's id and the join filters the server can
//! apply, [`Scan::with_join_filters`]) and opens it on one [`ScanRoute`],
//! picked by what the table has:
//!
//! | route | file | when |
//! |---|---|---|
//! | [`distributed::DistributedRoute`] | `distributed.rs` | a task of a distributed query: its [`crate::fleet::TaskShare`] of the row groups, through the fleet |
//! | [`hybrid::HybridRoute`] | `hybrid.rs` | a session with a compute-side cache and no limit: per row group local, fetch (as Arrow or as stored bytes), hybrid or pushdown; with a fleet, each row group's requests on its owner ([`servers`]) |
//! | [`fleet::FleetRoute`] | `fleet.rs` | a table served by a fleet of more than one server, with no compute-side cache (or a limit): each row group pushed to its owner |
//! | [`pushdown::PushdownRoute`] | `pushdown.rs` | everything else: the whole scan on the server |
//!
//! **Bytes** ([`bytes`]) is not a route of its own: fetching a row group's
//! column chunks as stored and decoding them here is one way the hybrid
//! route's *fetch* choice moves a row group, decided per row group by the
//! link model, and falls back to the Arrow fetch of the same row group. A
//! whole scan never goes "as bytes", so it sits under the hybrid route as
//! its helper.
//!
//! The leaves every route uses and that import no route: [`layout`] (the
//! table's row groups as the server lists them, the scopes that name
//! them), [`servers`] (the one server or the fleet member a row group's
//! requests go to), [`local_plan`] (what running a row group here needs),
//! [`metrics`] (the `EXPLAIN ANALYZE` counters) and [`query_id`]. Routes
//! never import `exec.rs`; `exec.rs` imports the routes. A route that
//! falls back to another calls its helpers (hybrid to pushdown's, or the
//! fleet's placement over a fleet, for a table without a layout;
//! distributed to the fleet's placement).
//!
//! An object overwritten under a scan restarts it from a new layout once,
//! by the one restart policy ([`silt_core::restart`]) the server's queries
//! use too.

pub mod bytes;
pub mod distributed;
pub mod fleet;
pub mod hybrid;
pub mod layout;
pub mod local_plan;
pub mod metrics;
pub mod pushdown;
pub mod query_id;
pub mod servers;

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::exec_err;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::Count;
use futures::stream::BoxStream;
use silt_proto::ScanRequest;

use crate::join_filter;
use crate::pushable::serialize_filter;
use metrics::PathCounters;

/// The name of the plan node whose scans the routes run
/// ([`crate::SiltScanExec`]): a partial-aggregate fragment's leaf, found
/// by name so no route imports the node.
pub(crate) const SCAN_NODE: &str = "SiltScanExec";

/// One scan as a route opens it.
pub struct Scan {
    /// The request, with the query's id and the join filters it carries.
    pub request: ScanRequest,
    /// The filters the layout request carries (encoded like
    /// `request.filters`): the scan's own and a join's key bounds, not its
    /// key set, for the server to leave out row groups their statistics
    /// rule out.
    pub layout_filters: Vec<Vec<u8>>,
    /// The schema the client planned the scan's output with.
    pub out: SchemaRef,
    pub context: Arc<TaskContext>,
    /// Which path each row group took, and its costs.
    pub counters: PathCounters,
}

impl Scan {
    /// `request` as planned, before any join filter.
    pub fn new(request: ScanRequest, out: SchemaRef, context: Arc<TaskContext>, counters: PathCounters) -> Self {
        Scan {
            layout_filters: request.filters.clone(),
            request,
            out,
            context,
            counters,
        }
    }

    /// This scan with what the server can apply of hash joins' `dynamic`
    /// filters added to its request, each counted in `pushed`. Called on
    /// the first poll: a join polls its probe side once its build side is
    /// complete, so its dynamic filter is final there. The layout request
    /// prunes row groups by statistics: the scan's filters and a join's
    /// key bounds serve, its key set (up to 16k values) would only cost
    /// the round trip.
    pub fn with_join_filters(mut self, dynamic: &[Arc<dyn PhysicalExpr>], pushed: &Count) -> Self {
        for conjunct in join_filter::server_conjuncts(dynamic) {
            if let Some(encoded) = serialize_filter(&conjunct) {
                if !join_filter::is_key_set(&conjunct) {
                    self.layout_filters.push(encoded.clone());
                }
                self.request.filters.push(encoded);
                pushed.add(1);
            }
        }
        self
    }
}

/// One way a scan's rows come to the client (module docs).
#[async_trait]
pub trait ScanRoute: Debug + Send + Sync {
    /// Starts `scan` and streams its batches, in `scan.out`'s schema.
    async fn open(&self, scan: Scan) -> Result<BoxStream<'static, Result<RecordBatch>>>;
}

/// Give a batch from the server the schema the client planned with. A scan
/// with no columns comes back as one boolean marker column: keep only the
/// row count.
pub(crate) fn adapt(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if schema.fields().is_empty() {
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        return Ok(RecordBatch::try_new_with_options(schema.clone(), vec![], &options)?);
    }
    if batch.num_columns() != schema.fields().len() {
        return exec_err!(
            "server returned {} columns, expected {}",
            batch.num_columns(),
            schema.fields().len()
        );
    }
    Ok(RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?)
}
