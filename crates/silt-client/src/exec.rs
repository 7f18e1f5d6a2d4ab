//! `SiltScanExec`: the physical operator of a scan of a Silt table. It
//! holds what defines the scan (request, schema, the compute-side cache's
//! plan, fleet, task share) and, when executed, only dispatches: it picks
//! one route of [`crate::scan`] and opens the scan on it.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, exec_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use silt_proto::{QueryContext, ScanRequest};

use crate::client::SiltClient;
use crate::fleet::{Fleet, TaskShare};
use crate::join_filter;
use crate::scan::distributed::{DistributedRoute, share_scope};
use crate::scan::fleet::FleetRoute;
use crate::scan::hybrid::HybridRoute;
use crate::scan::layout::RowGroup;
use crate::scan::local_plan::LocalPlan;
use crate::scan::metrics::{PathCounters, PathMetrics};
use crate::scan::pushdown::PushdownRoute;
use crate::scan::query_id::execution_id;
use crate::scan::servers::Servers;
use crate::scan::{SCAN_NODE, Scan, ScanRoute};

/// Streams the result of a pushed-down scan from a Silt server. In `EXPLAIN`
/// it shows exactly what ran remotely: table, columns, filters and limit.
#[derive(Debug)]
pub struct SiltScanExec {
    client: SiltClient,
    request: ScanRequest,
    schema: SchemaRef,
    filter_text: Vec<String>,
    /// What the pushed partial aggregate computes, for `EXPLAIN`.
    aggregate_text: Option<String>,
    /// Hash joins' dynamic filters on this (probe-side) scan, sent to the
    /// server when the scan starts ([`crate::join_filter`]).
    dynamic_filters: Vec<Arc<dyn PhysicalExpr>>,
    num_rows: Option<usize>,
    /// When the session has a compute-side cache: how row groups run
    /// locally ([`crate::scan::hybrid`]).
    local: Option<Arc<LocalPlan>>,
    /// When the table is served by a fleet: its row groups go to their
    /// owners ([`crate::scan::fleet`]), and `client` only planned.
    fleet: Option<Arc<Fleet>>,
    /// When this scan is one task of a distributed query: the row groups
    /// it reads ([`crate::fleet::TaskShare`]).
    share: Option<Arc<TaskShare>>,
    /// In a distributed query: the layout the coordinator planned with
    /// (`None` for a table without one, a view), so every task reads its
    /// share of one listing ([`crate::distributed`]).
    planned: Option<Arc<[RowGroup]>>,
    /// Every Silt table of the plan this scan is part of
    /// ([`crate::query_context`]); empty until the plan is final.
    query_tables: Arc<[String]>,
    /// The scanned table's whole schema and row count, when the table
    /// planned the scan: what a worker of a distributed query builds the
    /// scan's [`LocalPlan`] from ([`crate::distributed`]).
    table: Option<(SchemaRef, Option<usize>)>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl SiltScanExec {
    pub fn new(
        client: SiltClient,
        request: ScanRequest,
        schema: SchemaRef,
        filter_text: Vec<String>,
        num_rows: Option<usize>,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        SiltScanExec {
            client,
            request,
            schema,
            filter_text,
            aggregate_text: None,
            dynamic_filters: Vec::new(),
            num_rows,
            local: None,
            fleet: None,
            share: None,
            planned: None,
            query_tables: Arc::from(Vec::new()),
            table: None,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// This scan with its row groups answered from `local` when they can
    /// be ([`crate::scan::hybrid`]).
    pub(crate) fn with_local(mut self, local: Option<Arc<LocalPlan>>) -> Self {
        self.local = local;
        self
    }

    /// This scan with its row groups sent to the members of `fleet`.
    pub(crate) fn with_fleet(mut self, fleet: Option<Arc<Fleet>>) -> Self {
        self.fleet = fleet;
        self
    }

    /// The fleet this scan's row groups go to, if any.
    pub(crate) fn fleet(&self) -> Option<&Arc<Fleet>> {
        self.fleet.as_ref()
    }

    /// This scan of a table of schema `schema` and about `rows` rows.
    pub(crate) fn with_table(mut self, schema: SchemaRef, rows: Option<usize>) -> Self {
        self.table = Some((schema, rows));
        self
    }

    /// This scan with the layout a distributed query planned it with.
    pub(crate) fn with_planned_layout(mut self, planned: Option<Arc<[RowGroup]>>) -> Self {
        self.planned = planned;
        self
    }

    /// This scan as task `share.task` of a distributed query: only its
    /// share of the row groups, through the fleet. With a planned layout,
    /// the share is named in the request's scope (object versions and row
    /// groups), so the task reads exactly those.
    pub(crate) fn with_share(&self, share: TaskShare) -> Self {
        let mut scan = self.copy();
        if let (Some(planned), Some(fleet)) = (&self.planned, &self.fleet) {
            scan.request.scope = Some(share_scope(planned, fleet, &share));
        }
        scan.share = Some(Arc::new(share));
        scan
    }

    /// What the codec of a distributed plan carries: everything that
    /// defines the scan, but not its client-side state (a compute-side
    /// cache, hash joins' dynamic filters, which stay on the coordinator).
    pub(crate) fn parts(&self) -> ScanParts<'_> {
        ScanParts {
            request: &self.request,
            schema: &self.schema,
            filter_text: &self.filter_text,
            aggregate_text: self.aggregate_text.as_deref(),
            num_rows: self.num_rows,
            share: self.share.as_deref(),
            query_tables: &self.query_tables,
            table: self.table.as_ref(),
        }
    }

    /// A scan rebuilt from its [`ScanParts`] on a worker, over `fleet`,
    /// its row groups run over `local` when it has one.
    pub(crate) fn from_parts(fleet: Arc<Fleet>, parts: ScanParts<'_>, local: Option<Arc<LocalPlan>>) -> Result<Self> {
        let Some(client) = fleet.clients().into_iter().next() else {
            return exec_err!("a distributed scan needs at least one server");
        };
        let mut scan = SiltScanExec::new(
            client,
            parts.request.clone(),
            parts.schema.clone(),
            parts.filter_text.to_vec(),
            parts.num_rows,
        )
        .with_fleet(Some(fleet))
        .with_local(local);
        scan.aggregate_text = parts.aggregate_text.map(str::to_string);
        scan.share = parts.share.cloned().map(Arc::new);
        scan.query_tables = parts.query_tables.clone();
        scan.table = parts.table.cloned();
        Ok(scan)
    }

    /// This scan with a partial aggregate pushed into it (see
    /// [`crate::partial_aggregate`]): the server runs `fragment` (encoded
    /// `plan`, whose leaf is this scan) on the scan's rows and returns its
    /// output, of `plan`'s schema. Row groups the client holds run `plan`
    /// locally.
    pub fn with_partial_aggregate(&self, fragment: Vec<u8>, plan: Arc<dyn ExecutionPlan>, description: String) -> Self {
        let mut request = self.request.clone();
        request.partial_aggregate = Some(fragment);
        let local = self.local.as_ref().map(|l| {
            Arc::new(LocalPlan {
                fragment: Some(plan.clone()),
                // States per row read, not rows: another selectivity.
                filters_key: format!("{} | {description}", l.filters_key),
                ..(**l).clone()
            })
        });
        let mut pushed = SiltScanExec::new(
            self.client.clone(),
            request,
            plan.schema(),
            self.filter_text.clone(),
            None,
        )
        .with_local(local)
        .with_fleet(self.fleet.clone());
        pushed.aggregate_text = Some(description);
        pushed.planned = self.planned.clone();
        pushed
    }

    /// Whether a partial aggregate runs on the server as part of this scan.
    pub fn has_partial_aggregate(&self) -> bool {
        self.request.partial_aggregate.is_some()
    }

    /// The same scan as a new plan node (its own metrics).
    fn copy(&self) -> Self {
        SiltScanExec {
            client: self.client.clone(),
            request: self.request.clone(),
            schema: self.schema.clone(),
            filter_text: self.filter_text.clone(),
            aggregate_text: self.aggregate_text.clone(),
            dynamic_filters: self.dynamic_filters.clone(),
            num_rows: self.num_rows,
            local: self.local.clone(),
            fleet: self.fleet.clone(),
            share: self.share.clone(),
            planned: self.planned.clone(),
            query_tables: self.query_tables.clone(),
            table: self.table.clone(),
            properties: self.properties.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// This scan with `filters` (hash joins' dynamic filters) added.
    fn with_dynamic_filters(&self, filters: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        let mut scan = self.copy();
        scan.dynamic_filters.extend(filters);
        scan
    }

    /// This scan, part of a plan that scans `tables` ([`crate::query_context`]).
    pub(crate) fn with_query_tables(&self, tables: Arc<[String]>) -> Self {
        let mut scan = self.copy();
        scan.query_tables = tables;
        scan
    }

    /// The route this scan's rows take ([`crate::scan`]): a task of a
    /// distributed query reads its share through the fleet; a scan with a
    /// compute-side cache and no limit chooses per row group (with a fleet
    /// of more than one server, each row group's requests on its owner);
    /// a fleet table without one goes to the owners of its row groups;
    /// anything else is pushed down whole.
    fn route(&self) -> Box<dyn ScanRoute> {
        let fleet = self
            .fleet
            .clone()
            .filter(|f| f.len() > 1 || f.is_dynamic() || self.share.is_some());
        let local = self.local.clone().filter(|_| self.request.limit.is_none());
        let client = self.client.clone();
        match (fleet, self.share.clone(), local) {
            // A worker's task with a compute-side cache: its share (the
            // request's scope) per row group.
            (Some(fleet), Some(_), Some(plan)) if self.request.scope.is_some() => Box::new(HybridRoute {
                servers: Servers::fleet(fleet),
                plan,
            }),
            (Some(fleet), Some(share), _) => Box::new(DistributedRoute { fleet, share }),
            (Some(fleet), None, Some(plan)) => Box::new(HybridRoute {
                servers: Servers::fleet(fleet),
                plan,
            }),
            (Some(fleet), None, None) => Box::new(FleetRoute { fleet }),
            (None, _, Some(plan)) => Box::new(HybridRoute {
                servers: Servers::One(client),
                plan,
            }),
            (None, _, None) => Box::new(PushdownRoute { client }),
        }
    }

    /// The paths' `EXPLAIN ANALYZE` metrics of partition `partition`.
    fn counters(&self, partition: usize) -> PathCounters {
        let cost = |path: &str| PathMetrics {
            bytes: MetricBuilder::new(&self.metrics).counter(format!("{path}_bytes"), partition),
            estimated: MetricBuilder::new(&self.metrics).subset_time(format!("{path}_estimated_time"), partition),
            elapsed: MetricBuilder::new(&self.metrics).subset_time(format!("{path}_elapsed_time"), partition),
            server_scanned: MetricBuilder::new(&self.metrics)
                .counter(format!("{path}_server_scanned_bytes"), partition),
        };
        PathCounters {
            local: MetricBuilder::new(&self.metrics).counter("row_groups_local", partition),
            fetched: MetricBuilder::new(&self.metrics).counter("row_groups_fetched", partition),
            hybrid: MetricBuilder::new(&self.metrics).counter("row_groups_hybrid", partition),
            pushed: MetricBuilder::new(&self.metrics).counter("row_groups_pushed", partition),
            pushed_whole: MetricBuilder::new(&self.metrics).counter("scans_pushed_whole", partition),
            fetched_compressed: MetricBuilder::new(&self.metrics).counter("row_groups_fetched_compressed", partition),
            bytes_fetched_compressed: MetricBuilder::new(&self.metrics).counter("bytes_fetched_compressed", partition),
            local_cost: cost("local"),
            fetched_cost: cost("fetched"),
            hybrid_cost: cost("hybrid"),
            pushdown_cost: cost("pushdown"),
        }
    }

    /// The scan as it is sent to the server.
    pub fn request(&self) -> &ScanRequest {
        &self.request
    }
}

/// The parts of a [`SiltScanExec`] that define it, borrowed for encoding
/// or decoding ([`crate::distributed`]).
pub(crate) struct ScanParts<'a> {
    pub request: &'a ScanRequest,
    pub schema: &'a SchemaRef,
    pub filter_text: &'a [String],
    pub aggregate_text: Option<&'a str>,
    pub num_rows: Option<usize>,
    pub share: Option<&'a TaskShare>,
    pub query_tables: &'a Arc<[String]>,
    pub table: Option<&'a (SchemaRef, Option<usize>)>,
}

impl DisplayAs for SiltScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let columns = match &self.request.projection {
            None => "*".to_string(),
            Some(p) if p.columns.is_empty() => "<row count only>".to_string(),
            Some(p) => p.columns.join(", "),
        };
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(
                    f,
                    "SiltScanExec: pushed down to {} table={} projection=[{}]",
                    self.client.url(),
                    self.request.table,
                    columns
                )?;
                if !self.filter_text.is_empty() {
                    write!(f, " filters=[{}]", self.filter_text.join(", "))?;
                }
                if let Some(l) = self.request.limit {
                    write!(f, " limit={l}")?;
                }
                if let Some(aggregate) = &self.aggregate_text {
                    write!(f, " partial_aggregate=[{aggregate}]")?;
                }
                if !self.dynamic_filters.is_empty() {
                    let shown: Vec<String> = self.dynamic_filters.iter().map(|d| d.to_string()).collect();
                    write!(f, " join_filters=[{}]", shown.join(", "))?;
                }
                if let Some(share) = &self.share {
                    write!(f, " task={}/{}", share.task, share.homes.len())?;
                }
                if let Some(local) = self.local.as_ref().filter(|_| self.request.limit.is_none()) {
                    write!(
                        f,
                        " local_cache=[{:?}, {:?}, {} bytes]",
                        local.cache.policy(),
                        local.cache.form(),
                        local.cache.budget()
                    )?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => write!(f, "table={}", self.request.table),
        }
    }
}

impl ExecutionPlan for SiltScanExec {
    fn name(&self) -> &'static str {
        SCAN_NODE
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // The dynamic filters are this scan's: a join computes its filter
        // only when a node below it reports using it.
        for filter in &self.dynamic_filters {
            if f(filter)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let offered: Vec<Arc<dyn PhysicalExpr>> = child_pushdown_result
            .parent_filters
            .into_iter()
            .map(|f| f.filter)
            .collect();
        // Every filter stays with its parent too: the server applies what it
        // can of a dynamic filter, the join still checks every key.
        let filters = vec![PushedDown::No; offered.len()];
        let dynamic: Vec<_> = offered.into_iter().filter(join_filter::is_dynamic).collect();
        let accept = phase == FilterPushdownPhase::Post && !dynamic.is_empty() && !self.has_partial_aggregate();
        let updated_node = accept.then(|| Arc::new(self.with_dynamic_filters(dynamic)) as Arc<dyn ExecutionPlan>);
        Ok(FilterPushdownPropagation { filters, updated_node })
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            exec_err!("SiltScanExec has no children")
        }
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return exec_err!("SiltScanExec has one partition, asked for {partition}");
        }
        let mut request = self.request.clone();
        if !self.query_tables.is_empty() {
            request.query = Some(QueryContext {
                id: execution_id(&context),
                tables: self.query_tables.to_vec(),
            });
        }
        let dynamic_filters = self.dynamic_filters.clone();
        let pushed_join_filters = MetricBuilder::new(&self.metrics).counter("pushed_join_filters", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let scan = Scan::new(request, self.schema.clone(), context, self.counters(partition));
        let route = self.route();
        let stream = futures::stream::once(async move {
            // Runs on the first poll: a join's dynamic filter is final here.
            let scan = scan.with_join_filters(&dynamic_filters, &pushed_join_filters);
            let batches = route.open(scan).await?;
            Ok::<_, DataFusionError>(batches.inspect_ok(move |b| output_rows.add(b.num_rows())).boxed())
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = self.num_rows.map_or(Precision::Absent, Precision::Inexact);
        Ok(Arc::new(stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local_cache::{CachePolicy, LocalCache};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn scan(limit: Option<u64>) -> SiltScanExec {
        let client = SiltClient::connect_lazy("http://127.0.0.1:1").unwrap();
        let request = ScanRequest {
            table: "t".into(),
            limit,
            ..Default::default()
        };
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        SiltScanExec::new(client, request, schema, Vec::new(), None)
    }

    fn local() -> Option<Arc<LocalPlan>> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        Some(Arc::new(LocalPlan {
            cache: Arc::new(LocalCache::new(1 << 20, CachePolicy::default())),
            needed: vec!["a".into()],
            columns: vec![0],
            projected: 1,
            wide_schema: schema,
            filter: None,
            filters_key: "t: ".into(),
            fragment: None,
            table_rows: None,
        }))
    }

    fn fleet(members: usize) -> Option<Arc<Fleet>> {
        let urls: Vec<String> = (0..members).map(|i| format!("http://127.0.0.1:{}", i + 1)).collect();
        Some(Arc::new(Fleet::connect(&urls, None).unwrap()))
    }

    fn route(scan: &SiltScanExec) -> String {
        let route = format!("{:?}", scan.route());
        route.split([' ', '{']).next().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn a_scan_takes_the_route_its_table_has() {
        assert_eq!(route(&scan(None)), "PushdownRoute");
        assert_eq!(route(&scan(None).with_local(local())), "HybridRoute");
        assert_eq!(route(&scan(Some(10)).with_local(local())), "PushdownRoute", "a limit");
        assert_eq!(route(&scan(None).with_fleet(fleet(2))), "FleetRoute");
        assert_eq!(
            route(&scan(None).with_local(local()).with_fleet(fleet(2))),
            "HybridRoute",
            "a fleet client with a compute-side cache chooses per row group"
        );
        assert_eq!(
            route(&scan(Some(10)).with_local(local()).with_fleet(fleet(2))),
            "FleetRoute",
            "a limit"
        );
        // One server is no fleet to place on: the session's own choice.
        assert_eq!(
            route(&scan(None).with_local(local()).with_fleet(fleet(1))),
            "HybridRoute"
        );
        let share = TaskShare {
            task: 0,
            homes: vec!["http://127.0.0.1:1".into()],
        };
        let task = scan(None).with_fleet(fleet(1)).with_share(share);
        assert_eq!(route(&task), "DistributedRoute");
    }
}
