//! The answers of the Flight SQL metadata calls that do not read the
//! catalog: table types, SQL types (`GetXdbcTypeInfo`), and keys.
//!
//! JDBC and ODBC drivers make these calls to fill `DatabaseMetaData`
//! (`getTableTypes`, `getTypeInfo`, `getPrimaryKeys`, ...) and a BI tool
//! browsing a connection fails when one is unimplemented. Silt's tables
//! have no keys, so the key calls answer empty batches of the schemas the
//! Flight SQL specification gives.

use std::sync::{Arc, LazyLock};

use arrow_flight::sql::metadata::{XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::{Nullable, Searchable, XdbcDataType};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// The kinds of entry `GetTables` lists (`CatalogEntry::type_name`).
pub(crate) const TABLE_TYPES: [&str; 2] = ["TABLE", "VIEW"];

/// The SQL types a query can name (in a `CAST`, a literal), as
/// `GetXdbcTypeInfo` describes them.
pub(crate) static XDBC_TYPES: LazyLock<XdbcTypeInfoData> = LazyLock::new(|| {
    use XdbcDataType::*;
    let mut b = XdbcTypeInfoDataBuilder::new();
    for (name, kind, size) in [
        ("BOOLEAN", XdbcBit, 1),
        ("TINYINT", XdbcTinyint, 3),
        ("SMALLINT", XdbcSmallint, 5),
        ("INTEGER", XdbcInteger, 10),
        ("BIGINT", XdbcBigint, 19),
        ("REAL", XdbcReal, 7),
        ("DOUBLE", XdbcDouble, 15),
    ] {
        b.append(XdbcTypeInfo {
            num_prec_radix: Some(10),
            unsigned_attribute: Some(false),
            ..type_info(name, kind, size)
        });
    }
    b.append(XdbcTypeInfo {
        create_params: Some(vec!["precision".into(), "scale".into()]),
        fixed_prec_scale: true,
        minimum_scale: Some(0),
        maximum_scale: Some(38),
        num_prec_radix: Some(10),
        unsigned_attribute: Some(false),
        ..type_info("DECIMAL", XdbcDecimal, 38)
    });
    for (name, kind, size) in [
        ("VARCHAR", XdbcVarchar, i32::MAX),
        ("VARBINARY", XdbcVarbinary, i32::MAX),
    ] {
        b.append(XdbcTypeInfo {
            literal_prefix: Some("'".into()),
            literal_suffix: Some("'".into()),
            case_sensitive: kind == XdbcVarchar,
            ..type_info(name, kind, size)
        });
    }
    for (name, kind, size) in [
        ("DATE", XdbcDate, 10),
        ("TIME", XdbcTime, 18),
        ("TIMESTAMP", XdbcTimestamp, 29),
    ] {
        b.append(XdbcTypeInfo {
            literal_prefix: Some(format!("{name} '")),
            literal_suffix: Some("'".into()),
            ..type_info(name, kind, size)
        });
    }
    b.build().expect("static XDBC type info is valid")
});

/// A nullable, searchable type `name` of `kind`, `size` digits or bytes.
fn type_info(name: &str, kind: XdbcDataType, size: i32) -> XdbcTypeInfo {
    XdbcTypeInfo {
        type_name: name.into(),
        data_type: kind,
        column_size: Some(size),
        nullable: Nullable::NullabilityNullable,
        searchable: Searchable::Full,
        local_type_name: Some(name.into()),
        sql_data_type: kind,
        ..Default::default()
    }
}

/// `GetPrimaryKeys`' schema (Flight SQL's `CommandGetPrimaryKeys`).
pub(crate) static PRIMARY_KEYS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
});

/// The schema `GetExportedKeys`, `GetImportedKeys` and `GetCrossReference`
/// share (Flight SQL's `CommandGetExportedKeys`).
pub(crate) static FOREIGN_KEYS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
});

/// No keys, as a batch of `schema`.
pub(crate) fn no_keys(schema: &SchemaRef) -> RecordBatch {
    RecordBatch::new_empty(schema.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    #[test]
    fn type_info_names_every_type_once() {
        let batch = XDBC_TYPES.record_batch(None).unwrap();
        let names: Vec<&str> = batch.column(0).as_string::<i32>().iter().flatten().collect();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for expected in ["BIGINT", "VARCHAR", "DECIMAL", "DATE", "TIMESTAMP"] {
            assert!(names.contains(&expected), "{expected} missing from {names:?}");
        }
        // Filtered by type, as `getTypeInfo` for one type asks.
        let one = XDBC_TYPES.record_batch(XdbcDataType::XdbcVarchar as i32).unwrap();
        assert_eq!(one.num_rows(), 1);
    }
}
