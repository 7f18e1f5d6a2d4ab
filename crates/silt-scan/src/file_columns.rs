//! Which top-level column of a Parquet file is which column of the table.
//!
//! By name (a column's [`PHYSICAL_NAME`] when it has one: Delta column
//! mapping), except for tables whose schema says to match by field id
//! ([`MATCH_BY_FIELD_ID`]: Iceberg tables, Delta's `id` mapping mode). There a column keeps its id
//! across renames, and a dropped column's name may be reused by a new one,
//! so an old file's column of that name is another column: matched by name,
//! a renamed column would read as nulls and a reused name would read the
//! old column's values. A file that carries no field ids at all (written
//! before it joined the table) is matched by name, as Iceberg readers do
//! without a name mapping.
//!
//! Every place that maps a table column to a file column goes through
//! [`file_columns`]: the scan's column loader, the statistics and page
//! pruning, bloom filters, scan sets and the footer statistics the planner
//! gets ([`named_as_in_file`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use datafusion::parquet::file::metadata::ParquetMetaData;

/// Schema metadata key: present on a table schema whose columns are matched
/// to its files' columns by `PARQUET:field_id` (each table field carries
/// its id under that field metadata key, as the Parquet reader labels the
/// file's own fields).
pub const MATCH_BY_FIELD_ID: &str = "silt.match_by_field_id";

/// Field metadata key: the name a table column has in data files when it
/// differs from the table's (Delta column mapping, mode `name`): files are
/// matched by it, not by the column's name.
pub const PHYSICAL_NAME: &str = "silt.physical_name";

/// The name data files (and Delta's log statistics) give `field`: its
/// [`PHYSICAL_NAME`] under Delta column mapping, else its name.
pub(crate) fn physical_name(field: &Field) -> &str {
    field.metadata().get(PHYSICAL_NAME).unwrap_or(field.name())
}

/// For each field of `table`, the root column of the file whose footer is
/// `metadata` that holds it, or `None` when the file lacks it (see the
/// module docs for how columns are matched).
pub fn file_columns(table: &Schema, metadata: &ParquetMetaData) -> Vec<Option<usize>> {
    let roots = metadata.file_metadata().schema_descr().root_schema().get_fields();
    let file_ids: Vec<Option<i32>> = roots
        .iter()
        .map(|r| {
            let info = r.get_basic_info();
            info.has_id().then(|| info.id())
        })
        .collect();
    let by_id = table.metadata().contains_key(MATCH_BY_FIELD_ID) && file_ids.iter().any(Option::is_some);
    table
        .fields()
        .iter()
        .map(|field| match field_id(field).filter(|_| by_id) {
            Some(id) => file_ids.iter().position(|&f| f == Some(id)),
            None => {
                let name = physical_name(field);
                roots.iter().position(|r| r.name() == name)
            }
        })
        .collect()
}

/// Whether `columns` (as [`file_columns`] gives them for `table`) maps the
/// table's columns onto a file's `roots` root columns one to one, in order:
/// then the file can be read and pruned as if it had the table's schema.
pub fn in_table_order(columns: &[Option<usize>], roots: usize) -> bool {
    columns.len() == roots && columns.iter().enumerate().all(|(i, &c)| c == Some(i))
}

/// `table` with each column named as the file whose footer is `metadata`
/// names it ([`file_columns`]), and a column the file lacks named so that
/// no file column matches: for readers that find a file's columns by name
/// (DataFusion's footer statistics). `table` itself when every name
/// already matches.
pub fn named_as_in_file(table: &SchemaRef, metadata: &ParquetMetaData) -> SchemaRef {
    let roots = metadata.file_metadata().schema_descr().root_schema().get_fields();
    let columns = file_columns(table, metadata);
    let same = table
        .fields()
        .iter()
        .zip(&columns)
        .all(|(f, c)| found_by_its_name(f.name(), *c, roots));
    if same {
        return table.clone();
    }
    let fields: Vec<Field> = table
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| match c {
            Some(root) => f.as_ref().clone().with_name(roots[*root].name()),
            None => f.as_ref().clone().with_name(format!("{} (not in the file)", f.name())),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, table.metadata().clone()))
}

/// Whether a reader that finds `columns` of `table` in the file whose
/// footer is `metadata` by their names (a client decoding a row group
/// itself) finds each as the table means it: the file's column of that
/// name is the table's column ([`file_columns`]), or the file has no column
/// of that name and lacks the table's. Not so for a renamed column (found
/// under its old name only) or a reused name (the file's column of that
/// name is another column). Names not in `table` are ignored.
pub fn found_by_name(table: &Schema, metadata: &ParquetMetaData, columns: &[String]) -> bool {
    let roots = metadata.file_metadata().schema_descr().root_schema().get_fields();
    let matched = file_columns(table, metadata);
    columns.iter().all(|name| {
        table
            .index_of(name)
            .ok()
            .is_none_or(|i| found_by_its_name(name, matched[i], roots))
    })
}

/// Whether the table column `name`, held by the file's root column
/// `matched` (or by none), is found in the file by its name alone.
fn found_by_its_name(
    name: &str,
    matched: Option<usize>,
    roots: &[datafusion::parquet::schema::types::TypePtr],
) -> bool {
    match matched {
        Some(root) => roots[root].name() == name,
        None => roots.iter().all(|r| r.name() != name),
    }
}

/// The Iceberg field id `field` carries, if any.
pub(crate) fn field_id(field: &Field) -> Option<i32> {
    field.metadata().get(PARQUET_FIELD_ID_META_KEY)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::DataType;
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    fn with_id(name: &str, data_type: DataType, id: i32) -> Field {
        Field::new(name, data_type, true)
            .with_metadata(HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]))
    }

    /// The footer of a one-row file of `fields`.
    fn footer(fields: Vec<Field>) -> ParquetMetaData {
        let schema = Arc::new(Schema::new(fields));
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int64 => Arc::new(Int64Array::from(vec![1])) as ArrayRef,
                DataType::Float64 => Arc::new(Float64Array::from(vec![1.0])),
                _ => Arc::new(StringArray::from(vec!["x"])),
            })
            .collect();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, schema.clone(), None).unwrap();
        writer.write(&RecordBatch::try_new(schema, columns).unwrap()).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        reader.metadata().clone()
    }

    /// The table renamed `v` (id 3) to `amount` and added a new `v` (id 4).
    fn evolved_table(by_id: bool) -> Schema {
        let fields = vec![
            with_id("id", DataType::Int64, 1),
            with_id("amount", DataType::Float64, 3),
            with_id("v", DataType::Utf8, 4),
        ];
        let metadata = if by_id {
            HashMap::from([(MATCH_BY_FIELD_ID.to_string(), "true".to_string())])
        } else {
            HashMap::new()
        };
        Schema::new_with_metadata(fields, metadata)
    }

    #[test]
    fn renamed_and_reused_columns_are_matched_by_field_id() {
        let old_file = footer(vec![
            with_id("id", DataType::Int64, 1),
            with_id("cat", DataType::Utf8, 2),
            with_id("v", DataType::Float64, 3),
        ]);
        assert_eq!(
            file_columns(&evolved_table(true), &old_file),
            vec![Some(0), Some(2), None],
            "`amount` is the file's `v`; the table's new `v` is not in the file"
        );
        assert_eq!(
            file_columns(&evolved_table(false), &old_file),
            vec![Some(0), None, Some(2)],
            "without the marker, by name"
        );
        let named = named_as_in_file(&Arc::new(evolved_table(true)), &old_file);
        let names: Vec<&str> = named.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, vec!["id", "v", "v (not in the file)"]);
    }

    #[test]
    fn physical_names_match_file_columns() {
        let file = footer(vec![
            Field::new("col-a", DataType::Int64, true),
            Field::new("col-b", DataType::Float64, true),
        ]);
        let physical = |name: &str, file_name: &str| {
            Field::new(name, DataType::Int64, true)
                .with_metadata(HashMap::from([(PHYSICAL_NAME.to_string(), file_name.to_string())]))
        };
        let table = Schema::new(vec![
            physical("amount", "col-b"),
            physical("id", "col-a"),
            physical("v", "col-c"),
        ]);
        assert_eq!(file_columns(&table, &file), vec![Some(1), Some(0), None]);
    }

    #[test]
    fn files_without_field_ids_are_matched_by_name() {
        let plain = footer(vec![
            Field::new("v", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
        ]);
        let columns = file_columns(&evolved_table(true), &plain);
        assert_eq!(columns, vec![Some(1), None, Some(0)]);
        assert!(!in_table_order(&columns, 2));
        assert!(in_table_order(&[Some(0), Some(1)], 2));
        assert!(
            !in_table_order(&[Some(0), Some(1)], 3),
            "the file has a column the table lacks"
        );
    }
}
