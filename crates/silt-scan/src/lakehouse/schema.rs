//! Iceberg schemas as Arrow schemas: the types Silt's scans read Parquet
//! into, each field carrying its Iceberg field id (`PARQUET:field_id`, as
//! the Parquet reader labels the file's own fields), and the schema marked to
//! match its files' columns by those ids ([`MATCH_BY_FIELD_ID`]).

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use silt_lakehouse::iceberg::{IcebergSchema, IcebergType};

use crate::file_columns::MATCH_BY_FIELD_ID;

/// `schema` in Arrow; `view_types`: strings and binaries as views. Nested
/// fields are refused: the scans do not read them from lakehouse tables yet.
pub fn arrow_schema(schema: &IcebergSchema, view_types: bool) -> Result<Schema> {
    let fields = schema
        .fields
        .iter()
        .map(|f| {
            let data_type = arrow_type(&f.field_type, view_types).ok_or_else(|| {
                DataFusionError::NotImplemented(format!(
                    "column {} is a nested Iceberg type ({:?}); Silt reads primitive columns of lakehouse tables only",
                    f.name, f.field_type
                ))
            })?;
            let metadata = HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_string(), f.id.to_string())]);
            Ok(Field::new(&f.name, data_type, !f.required).with_metadata(metadata))
        })
        .collect::<Result<Vec<_>>>()?;
    let by_id = HashMap::from([(MATCH_BY_FIELD_ID.to_string(), "true".to_string())]);
    Ok(Schema::new_with_metadata(fields, by_id))
}

fn arrow_type(t: &IcebergType, view_types: bool) -> Option<DataType> {
    Some(match t {
        IcebergType::Boolean => DataType::Boolean,
        IcebergType::Int => DataType::Int32,
        IcebergType::Long => DataType::Int64,
        IcebergType::Float => DataType::Float32,
        IcebergType::Double => DataType::Float64,
        IcebergType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale),
        IcebergType::Date => DataType::Date32,
        IcebergType::Time => DataType::Time64(TimeUnit::Microsecond),
        IcebergType::Timestamp { utc } => DataType::Timestamp(TimeUnit::Microsecond, utc.then(|| "+00:00".into())),
        IcebergType::TimestampNs { utc } => DataType::Timestamp(TimeUnit::Nanosecond, utc.then(|| "+00:00".into())),
        IcebergType::String if view_types => DataType::Utf8View,
        IcebergType::String => DataType::Utf8,
        IcebergType::Binary if view_types => DataType::BinaryView,
        IcebergType::Binary => DataType::Binary,
        IcebergType::Uuid => DataType::FixedSizeBinary(16),
        IcebergType::Fixed(n) => DataType::FixedSizeBinary(i32::try_from(*n).ok()?),
        IcebergType::Nested(_) => return None,
    })
}
