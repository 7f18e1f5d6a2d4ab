//! The catalog: the names tables are visible under, what a catalog entry is
//! (a table or a view, available or not), and the [`Catalog`] itself. A
//! leaf: the engine holds the catalog, the registry fills it, planning, the
//! guard and the `silt_system` tables read it, and none of them needs the
//! others for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use parking_lot::RwLock;
use silt_cache::CachedStore;

use crate::config::TableConfig;
use crate::error::UnavailableCause;

/// Catalog name under which tables are visible (`silt.public.<table>`).
pub const CATALOG: &str = "silt";
/// Schema name under which tables are visible.
pub const SCHEMA: &str = "public";

/// Whether a name is a table or a view, and whether it is usable now.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub kind: EntryKind,
    /// `Some(cause)` while the table or view could not be registered: the
    /// error itself, so queries naming it keep its kind.
    pub unavailable: Option<UnavailableCause>,
    /// Tables (for a view: the tables it reads) this entry depends on.
    pub tables: Vec<String>,
}

/// What a catalog name stands for.
// A table's config (its per-store settings) outweighs a view's SQL; there is
// one entry per configured name, so the size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum EntryKind {
    Table { index: usize, config: TableConfig },
    View { sql: String },
}

impl CatalogEntry {
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            EntryKind::Table { .. } => "TABLE",
            EntryKind::View { .. } => "VIEW",
        }
    }
}

/// The store and path of a table whose URL names one object.
pub type SingleObject = (Arc<dyn ObjectStore>, ObjectPath);

/// Every name the server serves and what is behind it. Shared (`Arc`) by
/// the engine and the `silt_system` schema, which reads it without holding
/// the engine; written only by the registry.
#[derive(Default)]
pub struct Catalog {
    pub(crate) entries: RwLock<BTreeMap<String, CatalogEntry>>,
    /// Each registered table's cached store (for preload and per-table stats).
    pub(crate) stores: RwLock<BTreeMap<String, Arc<CachedStore>>>,
    /// Tables whose URL names one object: checked with a HEAD before each
    /// query so a deleted object is an error, not an empty table.
    pub(crate) single_files: RwLock<BTreeMap<String, SingleObject>>,
    /// Lakehouse tables' providers, for the snapshot each last resolved.
    pub(crate) lakehouse: RwLock<BTreeMap<String, Arc<dyn datafusion::catalog::TableProvider>>>,
}

impl Catalog {
    /// A catalog of `entries`, nothing registered yet.
    pub fn new(entries: BTreeMap<String, CatalogEntry>) -> Self {
        Catalog {
            entries: RwLock::new(entries),
            ..Default::default()
        }
    }

    /// A snapshot of the entries (tables and views, available or not).
    pub fn entries(&self) -> BTreeMap<String, CatalogEntry> {
        self.entries.read().clone()
    }

    /// The cached store of each registered table.
    pub fn table_stores(&self) -> BTreeMap<String, Arc<CachedStore>> {
        self.stores.read().clone()
    }

    /// The snapshot lakehouse table `name` last resolved (what a query
    /// starting now without a change reads).
    pub fn snapshot_id(&self, name: &str) -> Option<i64> {
        let provider = self.lakehouse.read().get(name).cloned()?;
        provider
            .downcast_ref::<silt_scan::CachedParquetTable>()
            .and_then(|t| t.snapshot_id())
    }
}

/// The DataFusion reference of the registered name `name`: bare, or for a
/// REST catalog's table (`catalog.namespace.table`: the only registered
/// names with dots, since plain names are identifiers) the full reference.
pub fn table_reference(name: &str) -> datafusion::common::TableReference {
    use datafusion::common::TableReference;
    match name.split('.').collect::<Vec<_>>()[..] {
        [catalog, namespace, table] => TableReference::full(catalog, namespace, table),
        _ => TableReference::bare(name),
    }
}
