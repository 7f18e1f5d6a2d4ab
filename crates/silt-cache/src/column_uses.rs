//! How scans read each column of each cached file: filtered on (and taken
//! only where their filter kept rows) or projected. The liquid transcoder
//! builds a column's shared-dictionary segments for it
//! ([`silt_liquid::ValueUse`]): zstd blocks are smaller but cost a block's
//! decompression per take of other rows, so only columns no scan projects
//! on its own take them.
//!
//! `Taken` is sticky: once a scan projects a column without filtering on it,
//! or its filter keeps many rows (more than one in
//! [`silt_liquid::segment_memo::MATCHED_FRACTION`] of a row group's), its
//! later batches stay value by value. Callers that never say (lookups, scans
//! of other shapes) leave the default, `Taken`: the old behaviour.

use std::collections::HashMap;

use parking_lot::Mutex;
use silt_liquid::ValueUse;

use crate::ObjectKey;

/// Columns remembered at most; beyond, the map starts over (every column
/// back to the default, `Taken`: larger segments, still correct).
const COLUMNS: usize = 1 << 16;

/// The observed use of each (object version, table column).
#[derive(Debug, Default)]
pub struct ColumnUses {
    uses: Mutex<HashMap<(ObjectKey, u32), ValueUse>>,
}

impl ColumnUses {
    /// A scan read `column` of `object` as `value_use`.
    pub fn note(&self, object: &ObjectKey, column: u32, value_use: ValueUse) {
        let mut uses = self.uses.lock();
        if let Some(known) = uses.get_mut(&(object.clone(), column)) {
            if value_use == ValueUse::Taken {
                *known = ValueUse::Taken;
            }
            return;
        }
        if uses.len() >= COLUMNS {
            uses.clear();
        }
        uses.insert((object.clone(), column), value_use);
    }

    /// How scans read `column` of `object` so far (`Taken` if none said).
    pub fn get(&self, object: &ObjectKey, column: u32) -> ValueUse {
        self.uses
            .lock()
            .get(&(object.clone(), column))
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_is_filtered_until_some_scan_only_takes_it() {
        let uses = ColumnUses::default();
        let a = ObjectKey::new("s", "t/a.parquet", "v1");
        let a2 = ObjectKey::new("s", "t/a.parquet", "v2");
        assert_eq!(uses.get(&a, 0), ValueUse::Taken, "unknown: the default");
        uses.note(&a, 0, ValueUse::Filtered);
        uses.note(&a, 1, ValueUse::Taken);
        assert_eq!(uses.get(&a, 0), ValueUse::Filtered);
        assert_eq!(uses.get(&a, 1), ValueUse::Taken);
        assert_eq!(uses.get(&a2, 0), ValueUse::Taken, "another version is another file");
        uses.note(&a, 0, ValueUse::Taken);
        uses.note(&a, 0, ValueUse::Filtered);
        assert_eq!(uses.get(&a, 0), ValueUse::Taken, "taken is sticky");
        uses.note(&a, 1, ValueUse::Filtered);
        assert_eq!(uses.get(&a, 1), ValueUse::Taken);
    }
}
