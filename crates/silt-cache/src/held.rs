//! What the tiers hold, one row per unit, for introspection
//! (`silt_system.cache_segments` on the server). Walks every entry: for an
//! operator's question, never for a query path.
//!
//! A leaf of the crate: each tier (memory, page buffer, disk) builds its
//! rows from the keys it holds, and nothing here knows a tier.

use std::sync::Arc;

use crate::{ChunkKey, ObjectKey, PageKey};

/// The unit a row describes: a column chunk of the memory tier (its
/// batches summed), or a page of the page buffer or the disk tier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Held {
    /// A column chunk (memory tier, squeeze tier).
    Chunk(ChunkKey),
    /// A page of object bytes (page buffer, disk tier).
    Page(PageKey),
}

/// One unit a tier holds.
#[derive(Debug, Clone)]
pub struct HeldUnit {
    /// `"memory"`, `"pages"`, `"disk"` or `"squeezed"`.
    pub tier: &'static str,
    /// The chunk or page held.
    pub held: Held,
    /// Memory tier: the column's name, once a scan has named it.
    pub column_name: Option<Arc<str>>,
    /// `"arrow"`, `"liquid"` or `"bytes"` (object bytes).
    pub form: &'static str,
    /// Memory tier: column batches held of this chunk (1 for a page).
    pub batches: u64,
    /// Bytes the tier charges for it.
    pub bytes: u64,
    /// Memory tier: the bytes the same batches take as Arrow.
    pub arrow_bytes: u64,
}

impl HeldUnit {
    /// A page of object bytes held by `tier`.
    pub(crate) fn page(tier: &'static str, key: &PageKey, bytes: u64) -> Self {
        HeldUnit {
            tier,
            held: Held::Page(key.clone()),
            column_name: None,
            form: "bytes",
            batches: 1,
            bytes,
            arrow_bytes: 0,
        }
    }

    /// The object version the bytes are of.
    pub fn object(&self) -> &ObjectKey {
        match &self.held {
            Held::Chunk(c) => &c.object,
            Held::Page(p) => &p.object,
        }
    }

    /// Memory tier: the row group.
    pub fn row_group(&self) -> Option<u32> {
        match &self.held {
            Held::Chunk(c) => Some(c.row_group),
            Held::Page(_) => None,
        }
    }

    /// Memory tier: the column index in the table.
    pub fn column(&self) -> Option<u32> {
        match &self.held {
            Held::Chunk(c) => Some(c.column),
            Held::Page(_) => None,
        }
    }

    /// Page buffer and disk tier: the page number.
    pub fn page_number(&self) -> Option<u64> {
        match &self.held {
            Held::Chunk(_) => None,
            Held::Page(p) => Some(p.page),
        }
    }
}
