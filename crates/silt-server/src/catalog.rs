//! The catalog's words: the names tables are visible under and what a
//! catalog entry is (a table or a view, available or not). A leaf: the
//! engine holds the catalog, the registry fills it, planning and the guard
//! read it, and none of them needs the others for these.

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
