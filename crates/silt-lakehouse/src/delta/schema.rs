//! A Delta table's schema: the `schemaString` of its `metaData` action, a
//! Spark-style JSON struct (Delta protocol, "Schema Serialization Format").

use serde::Deserialize;
use serde_json::Value;

use crate::{LakehouseError, Result};

/// The top-level columns of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaSchema {
    pub fields: Vec<DeltaField>,
}

/// One column.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaField {
    pub name: String,
    pub data_type: DeltaType,
    pub nullable: bool,
    /// Column mapping (`delta.columnMapping.id`): the field id data files
    /// carry for it (mode `id` matches columns by it).
    pub id: Option<i32>,
    /// Column mapping (`delta.columnMapping.physicalName`): the column's
    /// name in data files, statistics and partition values (mode `name`
    /// and `id`), which a rename does not change.
    pub physical_name: Option<String>,
}

/// A column's type; nested types are kept by their JSON, unread.
#[derive(Debug, Clone, PartialEq)]
pub enum DeltaType {
    String,
    Long,
    Integer,
    Short,
    Byte,
    Float,
    Double,
    Boolean,
    Binary,
    Date,
    /// Microseconds, adjusted to UTC.
    Timestamp,
    /// Microseconds, no time zone.
    TimestampNtz,
    Decimal {
        precision: u8,
        scale: i8,
    },
    /// A struct, array, map or variant (its JSON, for messages).
    Nested(String),
}

#[derive(Deserialize)]
struct RawStruct {
    fields: Vec<RawField>,
}

#[derive(Deserialize)]
struct RawField {
    name: String,
    #[serde(rename = "type")]
    data_type: Value,
    #[serde(default = "yes")]
    nullable: bool,
    #[serde(default)]
    metadata: serde_json::Map<String, Value>,
}

fn yes() -> bool {
    true
}

impl DeltaSchema {
    /// Parses a `schemaString`.
    pub fn parse(text: &str) -> Result<DeltaSchema> {
        let invalid = |reason: String| LakehouseError::Invalid {
            path: "metaData.schemaString".into(),
            what: "Delta schema",
            reason,
        };
        let raw: RawStruct = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let fields = raw
            .fields
            .into_iter()
            .map(|f| {
                let data_type = match &f.data_type {
                    Value::String(name) => primitive(name).ok_or_else(|| invalid(format!("type {name:?}")))?,
                    other => DeltaType::Nested(other.to_string()),
                };
                Ok(DeltaField {
                    id: f
                        .metadata
                        .get("delta.columnMapping.id")
                        .and_then(Value::as_i64)
                        .and_then(|id| i32::try_from(id).ok()),
                    physical_name: f
                        .metadata
                        .get("delta.columnMapping.physicalName")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    name: f.name,
                    data_type,
                    nullable: f.nullable,
                })
            })
            .collect::<Result<_>>()?;
        Ok(DeltaSchema { fields })
    }
}

fn primitive(name: &str) -> Option<DeltaType> {
    Some(match name {
        "string" => DeltaType::String,
        "long" => DeltaType::Long,
        "integer" => DeltaType::Integer,
        "short" => DeltaType::Short,
        "byte" => DeltaType::Byte,
        "float" => DeltaType::Float,
        "double" => DeltaType::Double,
        "boolean" => DeltaType::Boolean,
        "binary" => DeltaType::Binary,
        "date" => DeltaType::Date,
        "timestamp" => DeltaType::Timestamp,
        "timestamp_ntz" => DeltaType::TimestampNtz,
        "variant" => DeltaType::Nested(name.to_string()),
        decimal => {
            let inner = decimal.strip_prefix("decimal(")?.strip_suffix(')')?;
            let (p, s) = inner.split_once(',')?;
            DeltaType::Decimal {
                precision: p.trim().parse().ok()?,
                scale: s.trim().parse().ok()?,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_struct_json_becomes_columns() {
        let text = r#"{"type":"struct","fields":[
            {"name":"id","type":"long","nullable":false,"metadata":{}},
            {"name":"price","type":"decimal(12, 2)","nullable":true,"metadata":{}},
            {"name":"tags","type":{"type":"array","elementType":"string","containsNull":true},"nullable":true,"metadata":{}}]}"#;
        let schema = DeltaSchema::parse(text).unwrap();
        assert_eq!(schema.fields[0].data_type, DeltaType::Long);
        assert!(!schema.fields[0].nullable);
        assert_eq!(
            schema.fields[1].data_type,
            DeltaType::Decimal {
                precision: 12,
                scale: 2
            }
        );
        assert!(matches!(schema.fields[2].data_type, DeltaType::Nested(_)));
        assert!(DeltaSchema::parse(r#"{"fields":[{"name":"x","type":"uint128"}]}"#).is_err());
        let mapped = r#"{"type":"struct","fields":[{"name":"amount","type":"double","nullable":true,
            "metadata":{"delta.columnMapping.id":3,"delta.columnMapping.physicalName":"col-9f"}}]}"#;
        let field = &DeltaSchema::parse(mapped).unwrap().fields[0];
        assert_eq!((field.id, field.physical_name.as_deref()), (Some(3), Some("col-9f")));
        assert_eq!(
            (schema.fields[0].id, schema.fields[0].physical_name.as_deref()),
            (None, None)
        );
    }
}
