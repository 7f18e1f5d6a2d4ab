//! Scans limited to some row groups of some object versions, and the layout
//! a client plans them from.
//!
//! Silt's client keeps decoded row groups in its own cache. Before a scan it
//! asks for the table's *layout* (objects, their validated versions, row
//! groups, the sizes of the needed column chunks), answers the row groups it
//! holds itself, and sends the rest as a scan *scoped* to them
//! ([`ScanScope`], carried in the query's session config). A scoped object
//! that is no longer at the version the client planned with fails the scan
//! as changed, so rows of two versions never meet in one answer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{BooleanBuilder, RecordBatch, StringBuilder, UInt32Builder, UInt64Builder};
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::file::metadata::ParquetMetaData;
use object_store::ObjectMeta;
use object_store::path::Path;
use silt_cache::{CacheError, ObjectVersion};
use silt_store::location::path_from_raw;

/// The row groups of object versions a scan is limited to, and within a
/// row group, optionally, the rows to return.
#[derive(Debug, Default, Clone)]
pub struct ScanScope {
    objects: HashMap<String, (String, ScopedGroups)>,
}

/// The rows of a scoped row group to return: a bitmap packed as Arrow packs
/// booleans (row `i` is bit `i % 8` of byte `i / 8`), checked against the
/// row group's row count when the scan opens the file.
pub type RowBitmap = Arc<Vec<u8>>;

/// Per row group of one object: `None` for every row, else the rows.
pub type ScopedGroups = BTreeMap<usize, Option<RowBitmap>>;

/// Per scoped object, the row groups to read.
pub type ScopedRowGroups = HashMap<Path, ScopedGroups>;

impl ScanScope {
    /// A scope of `(path, version token, row groups)`.
    pub fn new(objects: impl IntoIterator<Item = (String, String, Vec<usize>)>) -> Self {
        let mut scope = ScanScope::default();
        for (path, version, groups) in objects {
            let entry = scope.objects.entry(path).or_insert_with(|| (version, BTreeMap::new()));
            entry.1.extend(groups.into_iter().map(|g| (g, None)));
        }
        scope
    }

    /// Limits row group `row_group` of `path` (already in the scope) to the
    /// rows of `bitmap`. Returns whether the row group is in the scope.
    pub fn select(&mut self, path: &str, row_group: usize, bitmap: Vec<u8>) -> bool {
        match self.objects.get_mut(path).and_then(|(_, g)| g.get_mut(&row_group)) {
            Some(rows) => {
                *rows = Some(Arc::new(bitmap));
                true
            }
            None => false,
        }
    }

    /// The listed `files` this scope keeps, and their row groups. A scoped
    /// object missing from the listing or at another version fails with
    /// [`CacheError::Changed`].
    pub fn restrict(&self, files: Vec<ObjectMeta>) -> Result<(Vec<ObjectMeta>, ScopedRowGroups)> {
        let by_path: HashMap<&str, &ObjectMeta> = files.iter().map(|m| (m.location.as_ref(), m)).collect();
        for (path, (version, _)) in &self.objects {
            let current = by_path.get(path.as_str()).map(|m| ObjectVersion::wire_token_of(m));
            if current.as_deref() != Some(version.as_str()) {
                return Err(DataFusionError::External(Box::new(CacheError::changed(path, version))));
            }
        }
        let groups: ScopedRowGroups = self
            .objects
            .iter()
            .map(|(path, (_, groups))| (path_from_raw(path), groups.clone()))
            .collect();
        let kept = files
            .into_iter()
            .filter(|m| self.objects.contains_key(m.location.as_ref()))
            .collect();
        Ok((kept, groups))
    }
}

/// The column name of the layout row of a row group whose file holds none
/// of the requested columns: no table column is named so.
pub const NO_COLUMN: &str = "";

/// Appends the layout rows of one object version to a [`LayoutBuilder`].
#[derive(Default)]
pub struct LayoutBuilder {
    object: StringBuilder,
    version: StringBuilder,
    row_group: UInt32Builder,
    rows: UInt64Builder,
    column: StringBuilder,
    bytes: UInt64Builder,
    compressed: UInt64Builder,
    chunk_offset: UInt64Builder,
    chunk_length: UInt64Builder,
    server_only: BooleanBuilder,
}

impl LayoutBuilder {
    /// One row per (row group of `groups`, column of `columns`) of
    /// `meta`'s version: its uncompressed and compressed sizes and where its
    /// chunk is in the object. A column the file lacks has no row (the
    /// client then never finds that row group complete in its cache, and
    /// scans it on the server); a file lacking all of them has one row per
    /// row group under [`NO_COLUMN`].
    ///
    /// `server_only(rg)`: whether only the server's scan reads row group
    /// `rg` right ([`silt_proto::layout::SERVER_ONLY`]).
    pub fn add(
        &mut self,
        meta: &ObjectMeta,
        metadata: &ParquetMetaData,
        columns: &[String],
        groups: &[usize],
        server_only: impl Fn(usize) -> bool,
    ) {
        let version = ObjectVersion::wire_token_of(meta);
        let schema = metadata.file_metadata().schema_descr();
        let leaves: Vec<(&String, Vec<usize>)> = columns
            .iter()
            .map(|name| {
                let leaves = (0..schema.num_columns())
                    .filter(|&i| schema.column(i).path().parts().first() == Some(name))
                    .collect();
                (name, leaves)
            })
            .collect();
        // A file holding none of the columns (a partition column kept in
        // the log, a column added after it was written) still lists its
        // row groups: under a column no table has, marked server-only, so
        // every client scans them on the server (a layout without them
        // would lose their rows).
        let holds_none = !columns.is_empty() && leaves.iter().all(|(_, l)| l.is_empty());
        for &rg in groups {
            let Some(group) = metadata.row_groups().get(rg) else {
                continue;
            };
            if holds_none {
                self.object.append_value(meta.location.as_ref());
                self.version.append_value(&version);
                self.row_group.append_value(rg as u32);
                self.rows.append_value(group.num_rows().max(0) as u64);
                self.column.append_value(NO_COLUMN);
                self.bytes.append_value(0);
                self.compressed.append_null();
                self.chunk_offset.append_null();
                self.chunk_length.append_null();
                self.server_only.append_value(true);
                continue;
            }
            let server_only = server_only(rg);
            for (name, leaves) in &leaves {
                if leaves.is_empty() {
                    continue;
                }
                let bytes: i64 = leaves.iter().map(|&l| group.column(l).uncompressed_size()).sum();
                let compressed: i64 = leaves.iter().map(|&l| group.column(l).compressed_size()).sum();
                // The span of the column's chunks (one, for a flat column).
                // (`ColumnChunkMetaData::byte_range` without its panic on a
                // corrupt footer's negative offsets.)
                let spans = leaves.iter().map(|&l| {
                    let chunk = group.column(l);
                    let start = chunk
                        .dictionary_page_offset()
                        .unwrap_or(chunk.data_page_offset())
                        .max(0) as u64;
                    (start, start.saturating_add(chunk.compressed_size().max(0) as u64))
                });
                let (start, end) = spans.fold((u64::MAX, 0), |(s, e), (a, b)| (s.min(a), e.max(b)));
                self.object.append_value(meta.location.as_ref());
                self.version.append_value(&version);
                self.row_group.append_value(rg as u32);
                self.rows.append_value(group.num_rows().max(0) as u64);
                self.column.append_value(name.as_str());
                self.bytes.append_value(bytes.max(0) as u64);
                self.compressed.append_value(compressed.max(0) as u64);
                self.chunk_offset.append_value(start);
                self.chunk_length.append_value(end.saturating_sub(start));
                self.server_only.append_value(server_only);
            }
        }
    }

    /// The layout as one batch of [`silt_proto::layout_schema`].
    pub fn finish(mut self) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(
            silt_proto::layout_schema(),
            vec![
                Arc::new(self.object.finish()),
                Arc::new(self.version.finish()),
                Arc::new(self.row_group.finish()),
                Arc::new(self.rows.finish()),
                Arc::new(self.column.finish()),
                Arc::new(self.bytes.finish()),
                Arc::new(self.compressed.finish()),
                Arc::new(self.chunk_offset.finish()),
                Arc::new(self.chunk_length.finish()),
                Arc::new(self.server_only.finish()),
            ],
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &str, size: u64) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(path),
            last_modified: "2023-11-14T22:13:20.000000005Z".parse().unwrap(),
            size,
            e_tag: Some("\"e\"".into()),
            version: None,
        }
    }

    #[test]
    fn scope_keeps_its_objects_and_refuses_other_versions() {
        let files = vec![meta("t/a.parquet", 10), meta("t/b.parquet", 20)];
        let scope = ScanScope::new([(
            "t/b.parquet".to_string(),
            ObjectVersion::wire_token_of(&files[1]),
            vec![2, 0],
        )]);
        let (kept, groups) = scope.restrict(files.clone()).unwrap();
        assert_eq!(kept, vec![files[1].clone()]);
        assert_eq!(
            groups[&Path::from("t/b.parquet")],
            BTreeMap::from([(0, None), (2, None)])
        );
        let mut selected = scope.clone();
        assert!(selected.select("t/b.parquet", 2, vec![0b101]));
        assert!(!selected.select("t/b.parquet", 1, vec![1]), "not in the scope");
        let (_, groups) = selected.restrict(files.clone()).unwrap();
        assert_eq!(groups[&Path::from("t/b.parquet")][&2].as_deref(), Some(&vec![0b101]));

        let stale = ScanScope::new([(
            "t/b.parquet".to_string(),
            ObjectVersion::wire_token_of(&meta("t/b.parquet", 21)),
            vec![0],
        )]);
        let err = stale.restrict(files.clone()).unwrap_err();
        assert!(CacheError::find(&err).is_some_and(CacheError::is_changed), "{err}");
        let gone = ScanScope::new([("t/c.parquet".to_string(), "x".to_string(), vec![0])]);
        assert!(gone.restrict(files).is_err());
    }
}
