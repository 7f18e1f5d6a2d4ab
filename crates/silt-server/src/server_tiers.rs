//! The server's cache tiers, built from its configuration: the page buffer,
//! the disk tier (under `cache_dir`, which it locks), the memory tier of
//! decoded columns (with the liquid transcoder when configured) and the
//! metadata tier, joined in one [`CacheTiers`] so an object's invalidation
//! reaches all of them.
//!
//! The engine is built from a [`ServerTiers`]; nothing here knows about
//! queries, tables or DataFusion sessions.

use std::path::Path;
use std::sync::Arc;

use silt_cache::transcoder::LiquidTranscoder;
use silt_cache::{
    CacheTiers, ColumnCache, DiskConfig, DiskMetrics, DiskTier, MemoryForm, PageCache, PageCacheConfig, PageStore,
    PageTier, ScanSets, SqueezeConfig, Squeezed,
};
use silt_scan::MetadataTier;
use tracing::warn;

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::metrics::ServerMetrics;

/// Every cache tier of one server, and the lock on its cache dir.
pub struct ServerTiers {
    /// The page and memory tiers, and the versioned tiers joined to them.
    pub tiers: Arc<CacheTiers>,
    /// The disk tier, unless disabled (`disk_budget = 0`).
    pub disk: Option<Arc<DiskTier>>,
    /// Parquet footers and page indexes (DataFusion's file metadata cache).
    pub metadata: Arc<MetadataTier>,
    /// The exclusive lock on `cache_dir`, held while the tiers live.
    pub(crate) cache_dir_lock: std::fs::File,
}

impl ServerTiers {
    /// Opens the tiers `config` describes. The cache dir is locked first: a
    /// second server on the same dir (whatever its page size) fails here,
    /// leaving the first one's pages alone.
    pub fn open(config: &ServerConfig, metrics: &ServerMetrics) -> Result<Self, ServerError> {
        create_dir(&config.cache_dir)?;
        let cache_dir_lock =
            silt_cache::disk::lock_dir(&config.cache_dir).map_err(|e| io_error(&config.cache_dir, e))?;
        let page_cache = PageCache::new(
            PageCacheConfig {
                page_size: config.page_size,
                capacity_bytes: config.page_memory_budget,
            },
            metrics.pages.clone(),
        );
        // What planned queries will read: consulted by both tiers' eviction.
        let scan_sets = ScanSets::with_horizon(config.plan_horizon);
        // Squeezed liquid chunks on disk (reached through the memory tier:
        // `ColumnCache::squeezed`).
        let squeezed = open_squeeze_tier(config)?;
        let disk = open_disk_tier(config, metrics, &scan_sets)?;
        let mut pages = PageStore::builder(page_cache).merge_gap(config.page_size);
        if let Some(disk) = &disk {
            pages = pages.disk(disk.clone() as Arc<dyn PageTier>);
        }
        let mut columns = ColumnCache::builder(config.memory_budget, metrics.memory.clone())
            .eviction(config.memory_policy)
            .scan_sets(scan_sets)
            .plan_aware(config.plan_aware);
        if let Some(squeezed) = &squeezed {
            columns = columns.squeeze(squeezed.clone()).squeeze_ahead(config.squeeze_ahead);
        }
        if config.memory_form == MemoryForm::Liquid {
            let inline_after = usize::try_from(config.transcode_inline_after).unwrap_or(usize::MAX);
            columns = columns.transcode(LiquidTranscoder::start_with_inline_after(inline_after));
        }
        let tiers = CacheTiers::new(pages.build(), columns.build());
        let metadata = Arc::new(MetadataTier::new(
            usize::try_from(config.metadata_budget).unwrap_or(usize::MAX),
            tiers.versions().clone(),
            metrics.metadata.clone(),
        ));
        tiers.add_versioned_tier(metadata.clone());
        Ok(ServerTiers {
            tiers,
            disk,
            metadata,
            cache_dir_lock,
        })
    }
}

/// Creates `dir` (and its parents) if missing.
pub(crate) fn create_dir(dir: &Path) -> Result<(), ServerError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))
}

fn io_error(path: &Path, source: std::io::Error) -> ServerError {
    ServerError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Disk bytes of the squeeze tier: `squeeze_share` of the disk budget with
/// the liquid form, else none.
fn squeeze_budget(config: &ServerConfig) -> u64 {
    if config.memory_form != MemoryForm::Liquid {
        return 0;
    }
    (config.disk_budget as f64 * config.squeeze_share.clamp(0.0, 1.0)) as u64
}

/// Bytes of evicted batches that may wait to be squeezed: an eighth of the
/// memory budget, between 4 and 256 MiB (outside the memory tier's budget).
fn squeeze_pending(config: &ServerConfig) -> u64 {
    (config.memory_budget / 8).clamp(4 << 20, 256 << 20)
}

/// Opens the squeeze tier under `cache_dir/squeezed` (recovering what an
/// earlier run squeezed), or removes it when squeezing is off.
fn open_squeeze_tier(config: &ServerConfig) -> Result<Option<Arc<Squeezed>>, ServerError> {
    let dir = config.cache_dir.join("squeezed");
    let budget = squeeze_budget(config);
    if budget < 2 * silt_cache::squeeze::PIECE_BYTES {
        if dir.exists() {
            warn!(dir = %dir.display(), "squeezing is off: removing squeezed chunks of an earlier run");
            let _ = std::fs::remove_dir_all(&dir);
        }
        return Ok(None);
    }
    let squeezed = Squeezed::open(SqueezeConfig {
        dir: dir.clone(),
        budget_bytes: budget,
        direct_io: config.direct_io,
        policy: config.disk_policy,
        max_pending: squeeze_pending(config),
        // Writing a liquid chunk costs less than decoding and transcoding
        // it again ([`Squeezed::offer_evicted`]).
        write_when_behind: true,
    })
    .map_err(|e| io_error(&dir, e))?;
    Ok(Some(squeezed))
}

/// Opens the disk tier under `cache_dir/disk/p<page size>`: pages of another
/// page size (from an earlier configuration) are keyed differently and are
/// deleted rather than left to fill the disk outside the budget.
fn open_disk_tier(
    config: &ServerConfig,
    metrics: &ServerMetrics,
    scan_sets: &Arc<ScanSets>,
) -> Result<Option<Arc<DiskTier>>, ServerError> {
    if config.disk_budget == 0 {
        return Ok(None);
    }
    let root = config.cache_dir.join("disk");
    let name = format!("p{}", config.page_size);
    create_dir(&root)?;
    for entry in std::fs::read_dir(&root).map_err(|e| io_error(&root, e))?.flatten() {
        let stale = entry.file_name().to_string_lossy().starts_with('p') && entry.file_name() != name.as_str();
        if stale {
            warn!(dir = %entry.path().display(), "removing disk-tier pages of another page size");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = root.join(name);
    match silt_cache::disk::Medium::of(&root) {
        Ok(medium) => {
            if let Some(warning) = medium.warning(config.direct_io) {
                warn!("{warning}");
            }
        }
        Err(e) => warn!(dir = %root.display(), error = %e, "cannot tell what the disk tier's directory is on"),
    }
    let disk = DiskTier::open(
        DiskConfig {
            dir: dir.clone(),
            budget_bytes: config.disk_budget - squeeze_budget(config),
            page_bytes: config.page_size,
            direct_io: config.direct_io,
            policy: config.disk_policy,
            reservations: config
                .plan_aware
                .then(|| scan_sets.clone() as Arc<dyn silt_cache::policy::Reservations<silt_cache::PageKey>>),
        },
        DiskMetrics::register(metrics.recorder()),
    )
    .map_err(|e| io_error(&dir, e))?;
    Ok(Some(disk))
}
