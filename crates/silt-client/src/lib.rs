//! DataFusion integration for Silt.
//!
//! Register a Silt server's tables in a `SessionContext` and query them as
//! usual. Each scan's projection, filters and limit can run on the cache
//! server, so only matching rows of the needed columns come back; by
//! default the client also keeps a compute-side cache ([`local_cache`]) and
//! chooses per row group where it runs ([`scan::hybrid`]): here from the cache,
//! here on rows filtered here, or on the server. An aggregate over one table runs its partial half on the server
//! too ([`partial_aggregate`]), so only per-group states come back. Joins,
//! final aggregates and sorts run locally.
//!
//! ```no_run
//! # async fn example() -> datafusion::error::Result<()> {
//! use datafusion::prelude::SessionContext;
//!
//! let ctx = SessionContext::new();
//! // Before: ctx.register_parquet("lineitem", "s3://bucket/lineitem/", Default::default()).await?;
//! silt_client::register_tables(&ctx, "http://127.0.0.1:50051").await?;
//! let df = ctx.sql("SELECT count(*) FROM lineitem WHERE l_quantity < 10").await?;
//! df.show().await?;
//! # Ok(())
//! # }
//! ```

pub mod aggregate_placement;
mod client;
pub mod distributed;
mod exec;
pub mod fleet;
pub mod join_filter;
pub mod local_cache;
/// Where a fleet's members come from (shared with the server).
pub use silt_proto::membership;
pub mod partial_aggregate;
pub mod path_cost;
pub mod pushable;
pub mod query_context;
pub mod scan;
pub mod script;
mod table;
pub mod tls;
pub mod views;

pub use client::{ClientError, SiltClient};
pub use exec::SiltScanExec;
pub use local_cache::{CachePolicy, LocalCache};
/// The column forms the compute-side cache keeps chunks in (the server's).
pub use silt_core::{CachedColumn, MemoryForm};
pub use table::SiltTable;

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::SessionContext;

/// Appends `rule` to `ctx`'s physical optimizer rules unless a rule of its
/// name is there already.
pub(crate) fn install_rule_last(ctx: &SessionContext, rule: Arc<dyn PhysicalOptimizerRule + Send + Sync>) {
    let state = ctx.state_ref();
    let mut state = state.write();
    if state.physical_optimizers().iter().any(|r| r.name() == rule.name()) {
        return;
    }
    *state = SessionStateBuilder::new_from_existing(state.clone())
        .with_physical_optimizer_rule(rule)
        .build();
}

/// Register every table and view of the Silt server at `url` in `ctx`,
/// under the server's names. Returns the names registered.
pub async fn register_tables(ctx: &SessionContext, url: &str) -> Result<Vec<String>> {
    let client = SiltClient::connect(url).await?;
    register_tables_with(ctx, &client).await
}

/// Like [`register_tables`], with a client built by the caller (for a token).
///
/// Also installs [`partial_aggregate::PushPartialAggregate`] in `ctx`, so
/// aggregates over one Silt table run their partial half on the server, and
/// lets joins publish build sides of up to
/// [`join_filter::INLIST_MAX_DISTINCT_KEYS`] keys as `IN` lists the server
/// can apply ([`join_filter::tune`]).
pub async fn register_tables_with(ctx: &SessionContext, client: &SiltClient) -> Result<Vec<String>> {
    register_tables_with_options(ctx, client, &SiltTableOptions::default()).await
}

/// How the client side of Silt runs: its compute-side cache and the link
/// to the server. The default decides per row group: a compute-side cache
/// of [`default_local_cache_bytes`], so scans choose between local,
/// hybrid, fetch and pushdown ([`scan::hybrid`]).
#[derive(Debug, Clone)]
pub struct SiltTableOptions {
    /// Bytes of decoded column chunks the client keeps next to its
    /// DataFusion ([`local_cache`]); 0 keeps none and pushes every scan
    /// down whole. Default: [`default_local_cache_bytes`].
    pub local_cache_bytes: u64,
    /// Which column chunks a full local cache gives up first.
    pub local_cache_policy: CachePolicy,
    /// The form column chunks are kept in: liquid (default) or Arrow.
    pub local_cache_form: MemoryForm,
    /// Bytes per second between this client and the server: the prior of
    /// the link's estimate, which the client still learns from its
    /// transfers ([`path_cost`]); `None`: [`path_cost::DEFAULT_LINK_BYTES_PER_SECOND`].
    pub link_bytes_per_second: Option<f64>,
    /// Never push a scan down: fetch every row group the cache lacks (and
    /// admit it if the policy keeps it), then filter and aggregate here.
    /// FlexPushdownDB's *caching-only* baseline; a benchmark knob. Row
    /// groups only the server reads right (a lakehouse snapshot's deletes,
    /// a column the file lacks) are still pushed down.
    pub caching_only: bool,
}

impl Default for SiltTableOptions {
    fn default() -> Self {
        SiltTableOptions {
            local_cache_bytes: default_local_cache_bytes(),
            local_cache_policy: CachePolicy::default(),
            local_cache_form: MemoryForm::default(),
            link_bytes_per_second: None,
            caching_only: false,
        }
    }
}

/// The most a default compute-side cache takes: 4 GiB.
pub const DEFAULT_LOCAL_CACHE_CAP: u64 = 4 << 30;

/// The compute-side cache a client keeps unless told otherwise: a quarter
/// of the machine's memory (its cgroup's limit if smaller), at most
/// [`DEFAULT_LOCAL_CACHE_CAP`]; 1 GiB where the memory is unknown. A
/// quarter leaves the query's own operators (joins, sorts, aggregates) the
/// rest; the cap keeps a client on a big machine from holding more than a
/// cache server's memory tier would.
pub fn default_local_cache_bytes() -> u64 {
    silt_core::machine::share_of_memory(4, DEFAULT_LOCAL_CACHE_CAP, 1 << 30)
}

/// Like [`register_tables_with`], with `options`. The tables registered
/// share one compute-side cache of `options.local_cache_bytes`. With a
/// cache, a view of the server is planned here over the tables under it
/// ([`views`]), so its scans get the same per-row-group choice.
pub async fn register_tables_with_options(
    ctx: &SessionContext,
    client: &SiltClient,
    options: &SiltTableOptions,
) -> Result<Vec<String>> {
    partial_aggregate::install(ctx);
    query_context::install(ctx);
    join_filter::tune(ctx);
    if let Some(link) = options.link_bytes_per_second {
        client.calibration().set_link_prior(link);
    }
    let cache = local_cache_of(options);
    let entries = client.list_entries().await?;
    let mut server_views = Vec::new();
    for (name, kind) in &entries {
        let table = SiltTable::try_new(client.clone(), name).await?;
        if kind == "VIEW" {
            server_views.push(table);
            continue;
        }
        ctx.register_table(name.as_str(), Arc::new(table.with_local_cache(cache.clone())))?;
    }
    // Views after every table they may read.
    let definitions = match &cache {
        Some(_) if !server_views.is_empty() => views::definitions(client).await,
        _ => Default::default(),
    };
    for view in server_views {
        let name = view.name().to_string();
        match views::plan_here(ctx, &view, definitions.get(&name)).await {
            Some(local) => ctx.register_table(name.as_str(), local)?,
            None => ctx.register_table(name.as_str(), Arc::new(view))?,
        };
    }
    Ok(entries.into_iter().map(|(name, _)| name).collect())
}

/// The compute-side cache `options` ask for, if any: shared by the
/// tables one registration makes.
pub(crate) fn local_cache_of(options: &SiltTableOptions) -> Option<Arc<LocalCache>> {
    (options.local_cache_bytes > 0).then(|| {
        let budget = usize::try_from(options.local_cache_bytes).unwrap_or(usize::MAX);
        let link = options
            .link_bytes_per_second
            .unwrap_or(path_cost::DEFAULT_LINK_BYTES_PER_SECOND);
        Arc::new(
            LocalCache::new(budget, options.local_cache_policy)
                .with_form(options.local_cache_form)
                .with_link(link)
                .caching_only(options.caching_only),
        )
    })
}

/// Registers the tables of a fleet of servers that all serve the same
/// tables ([`fleet`]) with the default options: the schema comes from any
/// member, and every scan's row groups go to their owners, failing over
/// to the next, choosing per row group with the default compute-side
/// cache ([`register_fleet_tables_with_options`]).
pub async fn register_fleet_tables(ctx: &SessionContext, fleet: Arc<fleet::Fleet>) -> Result<Vec<String>> {
    register_fleet_tables_with_options(ctx, fleet, &SiltTableOptions::default()).await
}

/// Like [`register_fleet_tables`], with `options`. With a compute-side
/// cache (the default) each row group of a scan is answered here, fetched,
/// filtered here or pushed down as on one server, every request for it on
/// its owner ([`scan::servers`]); with none (`local_cache_bytes = 0`)
/// every row group is pushed to its owner. The fleet's views are scanned
/// whole by the owner of their name, with no compute-side cache.
pub async fn register_fleet_tables_with_options(
    ctx: &SessionContext,
    fleet: Arc<fleet::Fleet>,
    options: &SiltTableOptions,
) -> Result<Vec<String>> {
    partial_aggregate::install(ctx);
    query_context::install(ctx);
    join_filter::tune(ctx);
    if let Some(link) = options.link_bytes_per_second {
        for client in fleet.clients() {
            client.calibration().set_link_prior(link);
        }
    }
    let cache = local_cache_of(options);
    let (client, entries) = fleet
        .with_failover("", |c| async move {
            let entries = c.list_entries().await?;
            Ok::<_, client::ClientError>((c, entries))
        })
        .await?;
    for (name, kind) in &entries {
        let mut table = SiltTable::try_new(client.clone(), name)
            .await?
            .with_fleet(Some(fleet.clone()));
        if kind == "VIEW" {
            fleet.scan_whole(name);
        } else {
            table = table.with_local_cache(cache.clone());
        }
        ctx.register_table(name.as_str(), Arc::new(table))?;
    }
    Ok(entries.into_iter().map(|(name, _)| name).collect())
}
