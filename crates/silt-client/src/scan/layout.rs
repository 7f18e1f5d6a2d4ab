//! A table's row-group layout as the server lists it ([`ScanRequest::layout_only`]):
//! its object versions, their row groups, the sizes of the needed columns
//! and where each column chunk is stored. A leaf: every route reads it,
//! and it imports none of them.
//!
//! [`ScanRequest::layout_only`]: silt_proto::ScanRequest::layout_only

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{UInt32Type, UInt64Type};
use datafusion::common::{exec_datafusion_err, exec_err};
use datafusion::error::Result;
use silt_proto::{ObjectSegments, SegmentScope, layout};

/// One row group of the layout.
#[derive(Debug, Clone)]
pub(crate) struct RowGroup {
    pub(crate) object: Arc<str>,
    pub(crate) version: Arc<str>,
    pub(crate) index: u32,
    pub(crate) rows: usize,
    /// Uncompressed size per needed column the object has.
    pub(crate) bytes: HashMap<String, usize>,
    /// Where each needed column's chunk is in the object, as stored (when
    /// the server's layout says).
    pub(crate) chunks: HashMap<String, ChunkSpan>,
    /// Only the server's scan reads it right (the query's lakehouse
    /// snapshot deletes rows of it): never answered from the client's own
    /// cache or decode ([`silt_proto::layout::SERVER_ONLY`]).
    pub(crate) server_only: bool,
}

impl RowGroup {
    /// The row groups a scope names (their sizes unknown): what a task of a
    /// distributed query reads ([`super::distributed`]).
    pub(crate) fn of_scope(scope: &SegmentScope) -> Vec<RowGroup> {
        scope
            .objects
            .iter()
            .flat_map(|o| {
                let (object, version): (Arc<str>, Arc<str>) =
                    (Arc::from(o.path.as_str()), Arc::from(o.version.as_str()));
                o.row_groups.iter().map(move |&index| RowGroup {
                    object: object.clone(),
                    version: version.clone(),
                    index,
                    rows: 0,
                    bytes: HashMap::new(),
                    chunks: HashMap::new(),
                    server_only: false,
                })
            })
            .collect()
    }
}

/// A scope of `groups`, grouped by object version.
pub(crate) fn scope_of<'a>(groups: impl Iterator<Item = &'a RowGroup>) -> SegmentScope {
    let mut objects: Vec<ObjectSegments> = Vec::new();
    for g in groups {
        match objects.iter_mut().find(|o| *o.path == *g.object) {
            Some(o) => o.row_groups.push(g.index),
            None => objects.push(ObjectSegments {
                path: g.object.to_string(),
                version: g.version.to_string(),
                row_groups: vec![g.index],
                selections: Vec::new(),
            }),
        }
    }
    SegmentScope { objects }
}

/// The row groups of `scope` (a task's share of a distributed query,
/// named on the coordinator's layout) as `layout` (this scan's own) lists
/// them: the listed ones the scope names, with their sizes, and the
/// scope's row groups of object versions `layout` does not list at all
/// (an object changed or gone since, or all of its row groups left out by
/// statistics), with none: those go to the server as named, which answers
/// them at their version or refuses. A row group of a listed version the
/// layout lacks was left out by statistics: nothing to read.
pub(crate) fn within_scope(layout: Vec<RowGroup>, scope: &SegmentScope) -> (Vec<RowGroup>, Vec<RowGroup>) {
    let named = |g: &RowGroup| {
        scope
            .objects
            .iter()
            .any(|o| *o.path == *g.object && *o.version == *g.version && o.row_groups.contains(&g.index))
    };
    let unlisted: Vec<RowGroup> = RowGroup::of_scope(scope)
        .into_iter()
        .filter(|g| !layout.iter().any(|l| l.object == g.object && l.version == g.version))
        .collect();
    let listed = layout.into_iter().filter(|g| named(g)).collect();
    (listed, unlisted)
}

/// The layout answer as row groups, in the server's order.
pub(crate) fn parse_layout(batches: &[RecordBatch]) -> Result<Vec<RowGroup>> {
    let mut groups: Vec<RowGroup> = Vec::new();
    for batch in batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| exec_datafusion_err!("the server's layout lacks column '{name}'"))
        };
        let (object, version, row_group, rows, col, bytes) = (
            column(layout::OBJECT)?.as_string_opt::<i32>(),
            column(layout::VERSION)?.as_string_opt::<i32>(),
            column(layout::ROW_GROUP)?.as_primitive_opt::<UInt32Type>(),
            column(layout::ROWS)?.as_primitive_opt::<UInt64Type>(),
            column(layout::COLUMN)?.as_string_opt::<i32>(),
            column(layout::BYTES)?.as_primitive_opt::<UInt64Type>(),
        );
        let (Some(object), Some(version), Some(row_group), Some(rows), Some(col), Some(bytes)) =
            (object, version, row_group, rows, col, bytes)
        else {
            return exec_err!("the server's layout has unexpected column types");
        };
        let spans = LayoutSpans::of(batch);
        let server_only = batch
            .column_by_name(layout::SERVER_ONLY)
            .and_then(|c| c.as_boolean_opt());
        for i in 0..batch.num_rows() {
            let same = groups.last().is_some_and(|g| {
                *g.object == *object.value(i) && *g.version == *version.value(i) && g.index == row_group.value(i)
            });
            if !same {
                groups.push(RowGroup {
                    object: Arc::from(object.value(i)),
                    version: Arc::from(version.value(i)),
                    index: row_group.value(i),
                    rows: rows.value(i) as usize,
                    bytes: HashMap::new(),
                    chunks: HashMap::new(),
                    server_only: false,
                });
            }
            if let Some(g) = groups.last_mut() {
                g.server_only |= server_only.is_some_and(|s| s.is_valid(i) && s.value(i));
                g.bytes.insert(col.value(i).to_string(), bytes.value(i) as usize);
                if let Some(span) = spans.get(i) {
                    g.chunks.insert(col.value(i).to_string(), span);
                }
            }
        }
    }
    Ok(groups)
}

/// Where one column chunk is in its object, as stored (from the layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    pub offset: u64,
    pub length: u64,
    /// The chunk's compressed size (its length, for a flat column).
    pub compressed: u64,
}

/// The chunk columns of one layout batch (all null or absent from a server
/// that predates them).
pub(crate) struct LayoutSpans<'a> {
    columns: Option<[&'a datafusion::arrow::array::UInt64Array; 3]>,
}

impl<'a> LayoutSpans<'a> {
    pub(crate) fn of(batch: &'a RecordBatch) -> Self {
        let column = |name: &str| batch.column_by_name(name)?.as_primitive_opt::<UInt64Type>();
        let columns = match (
            column(layout::CHUNK_OFFSET),
            column(layout::CHUNK_LENGTH),
            column(layout::COMPRESSED_BYTES),
        ) {
            (Some(o), Some(l), Some(c)) => Some([o, l, c]),
            _ => None,
        };
        LayoutSpans { columns }
    }

    /// The span of row `i`, if the server gave it.
    pub(crate) fn get(&self, i: usize) -> Option<ChunkSpan> {
        let [offset, length, compressed] = self.columns?;
        if offset.is_null(i) || length.is_null(i) || compressed.is_null(i) {
            return None;
        }
        Some(ChunkSpan {
            offset: offset.value(i),
            length: length.value(i),
            compressed: compressed.value(i),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(object: &str, version: &str, index: u32) -> RowGroup {
        RowGroup {
            object: Arc::from(object),
            version: Arc::from(version),
            index,
            rows: 100,
            bytes: HashMap::from([("a".to_string(), 800)]),
            chunks: HashMap::new(),
            server_only: false,
        }
    }

    fn names(groups: &[RowGroup]) -> Vec<(String, String, u32)> {
        groups
            .iter()
            .map(|g| (g.object.to_string(), g.version.to_string(), g.index))
            .collect()
    }

    #[test]
    fn a_scope_keeps_its_listed_row_groups_and_sends_unlisted_versions_to_the_server() {
        // The coordinator planned on: a.parquet@v1 row groups 0 and 2,
        // b.parquet@v1 row group 1, c.parquet@v1 row group 0.
        let planned = [
            group("a.parquet", "v1", 0),
            group("a.parquet", "v1", 2),
            group("b.parquet", "v1", 1),
            group("c.parquet", "v1", 0),
        ];
        let scope = scope_of(planned.iter());
        // This scan's layout: a@v1 with every row group but 2 (statistics
        // left it out), b overwritten (v2), c gone, d new.
        let layout = vec![
            group("a.parquet", "v1", 0),
            group("a.parquet", "v1", 1),
            group("a.parquet", "v1", 3),
            group("b.parquet", "v2", 1),
            group("d.parquet", "v1", 0),
        ];
        let (listed, unlisted) = within_scope(layout, &scope);
        assert_eq!(names(&listed), vec![("a.parquet".into(), "v1".into(), 0)]);
        assert_eq!(listed[0].bytes["a"], 800, "listed row groups keep their sizes");
        assert_eq!(
            names(&unlisted),
            vec![
                ("b.parquet".into(), "v1".into(), 1),
                ("c.parquet".into(), "v1".into(), 0)
            ],
            "versions the layout does not list go to the server as named (which refuses a changed one)"
        );
    }
}
