//! What the tiers hold, one row per unit, for introspection
//! (`silt_system.cache_segments` on the server). Walks every entry: for an
//! operator's question, never for a query path.

use std::sync::Arc;

use crate::key::ObjectKey;

/// One unit a tier holds: in the memory tier, one column chunk of one row
/// group (its batches summed); in the page buffer and the disk tier, one page.
#[derive(Debug, Clone)]
pub struct Segment {
    /// `"memory"`, `"pages"` or `"disk"`.
    pub tier: &'static str,
    /// The object version the bytes are of.
    pub object: ObjectKey,
    /// Memory tier: the row group.
    pub row_group: Option<u32>,
    /// Memory tier: the column index in the table.
    pub column: Option<u32>,
    /// Memory tier: the column's name, once a scan has named it.
    pub column_name: Option<Arc<str>>,
    /// Page buffer and disk tier: the page number.
    pub page: Option<u64>,
    /// `"arrow"`, `"liquid"` or `"bytes"` (object bytes).
    pub form: &'static str,
    /// Memory tier: column batches held of this chunk (1 for a page).
    pub batches: u64,
    /// Bytes the tier charges for it.
    pub bytes: u64,
    /// Memory tier: the bytes the same batches take as Arrow.
    pub arrow_bytes: u64,
}

impl Segment {
    /// A page of object bytes held by `tier`.
    pub(crate) fn page(tier: &'static str, key: &crate::page_cache::PageKey, bytes: u64) -> Self {
        Segment {
            tier,
            object: key.object.clone(),
            row_group: None,
            column: None,
            column_name: None,
            page: Some(key.page),
            form: "bytes",
            batches: 1,
            bytes,
            arrow_bytes: 0,
        }
    }
}
