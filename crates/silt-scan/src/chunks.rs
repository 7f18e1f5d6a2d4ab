//! Where a column's bytes are: the one mapping from (row group, root
//! column) to the byte ranges of its column chunks, used by the scan's
//! prefetch and by preload.

use std::ops::Range;

use datafusion::parquet::file::metadata::ParquetMetaData;

/// The byte ranges of the column chunks of `row_groups` whose root column
/// (a top-level field: a nested field spans several leaf chunks) is one of
/// `roots`, or of every column when `roots` is `None`.
pub fn column_chunk_ranges(
    metadata: &ParquetMetaData,
    row_groups: impl IntoIterator<Item = usize>,
    roots: Option<&[usize]>,
) -> Vec<Range<u64>> {
    let descr = metadata.file_metadata().schema_descr();
    let mut ranges = Vec::new();
    for rg in row_groups {
        for (leaf, chunk) in metadata.row_group(rg).columns().iter().enumerate() {
            if roots.is_none_or(|r| r.contains(&descr.get_column_root_idx(leaf))) {
                let (start, len) = chunk.byte_range();
                ranges.push(start..start + len);
            }
        }
    }
    ranges
}

/// The root column indices of the top-level fields named `names` (names
/// the file lacks are left out).
pub fn root_indices(metadata: &ParquetMetaData, names: &[String]) -> Vec<usize> {
    let fields = metadata.file_metadata().schema_descr().root_schema().get_fields();
    names
        .iter()
        .filter_map(|n| fields.iter().position(|f| f.name() == n))
        .collect()
}
