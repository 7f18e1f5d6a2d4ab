//! Table schemas (Iceberg spec, "Schemas and Data Types"): fields with ids,
//! which is how a column is known across renames and reorders.

use std::collections::HashMap;

use serde_json::Value;

use super::metadata::{Snapshot, TableMetadata};
use crate::{LakehouseError, Result};

/// A schema's top-level fields, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergSchema {
    pub schema_id: i32,
    pub fields: Vec<IcebergField>,
}

/// One top-level field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergField {
    /// The field id: Parquet files carry it as their columns' `field_id`.
    pub id: i32,
    pub name: String,
    pub required: bool,
    pub field_type: IcebergType,
}

/// A field's type. Nested types (struct, list, map) are kept as one kind:
/// Silt's scans do not read them yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IcebergType {
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Decimal {
        precision: u8,
        scale: i8,
    },
    Date,
    /// Microseconds of the day.
    Time,
    /// Microseconds since the epoch; `utc`: `timestamptz`.
    Timestamp {
        utc: bool,
    },
    /// Nanoseconds since the epoch (v3 types, read where a writer uses them).
    TimestampNs {
        utc: bool,
    },
    String,
    Uuid,
    Fixed(u32),
    Binary,
    Nested(String),
}

impl TableMetadata {
    /// The schema of `snapshot` (its own schema id where it records one),
    /// else the table's current schema.
    pub fn schema_of(&self, snapshot: Option<&Snapshot>) -> Result<IcebergSchema> {
        let id = snapshot.and_then(|s| s.schema_id).or(self.current_schema_id);
        let json = match id {
            Some(id) => self
                .schemas
                .iter()
                .find(|s| s.get("schema-id").and_then(Value::as_i64) == Some(i64::from(id))),
            None => None,
        }
        .or(self.schema.as_ref())
        .or(self.schemas.last())
        .ok_or_else(|| self.invalid("no schema"))?;
        IcebergSchema::parse(json).map_err(|reason| self.invalid(&reason))
    }

    /// Whether some column's name or type differs between the table's
    /// schemas: a rename, a type promotion, or a dropped column's name
    /// given to a new one. Then older data files name or type a column
    /// otherwise than the table does, and only a reader that matches
    /// columns by field id and casts reads them right. Columns only added
    /// or dropped do not count. Schemas that do not parse count as changed.
    pub fn columns_changed(&self) -> bool {
        let mut by_id: HashMap<i32, (&str, &IcebergType)> = HashMap::new();
        let mut by_name: HashMap<&str, i32> = HashMap::new();
        let schemas: Vec<IcebergSchema> = match self
            .schemas
            .iter()
            .chain(&self.schema)
            .map(IcebergSchema::parse)
            .collect()
        {
            Ok(schemas) => schemas,
            Err(_) => return true,
        };
        for field in schemas.iter().flat_map(|s| &s.fields) {
            let same_id = by_id.entry(field.id).or_insert((&field.name, &field.field_type));
            let same_name = by_name.entry(&field.name).or_insert(field.id);
            if *same_id != (field.name.as_str(), &field.field_type) || *same_name != field.id {
                return true;
            }
        }
        false
    }

    fn invalid(&self, reason: &str) -> LakehouseError {
        LakehouseError::Invalid {
            path: self.location.clone(),
            what: "Iceberg table schema",
            reason: reason.to_string(),
        }
    }
}

impl IcebergSchema {
    /// Parses a schema's JSON (a `struct` with `fields`).
    pub fn parse(json: &Value) -> std::result::Result<IcebergSchema, String> {
        let fields = json
            .get("fields")
            .and_then(Value::as_array)
            .ok_or("a schema without fields")?;
        let fields = fields
            .iter()
            .map(|f| {
                let id = f.get("id").and_then(Value::as_i64).ok_or("a field without id")?;
                let name = f.get("name").and_then(Value::as_str).ok_or("a field without name")?;
                let field_type = f.get("type").ok_or_else(|| format!("field {name} has no type"))?;
                Ok(IcebergField {
                    id: i32::try_from(id).map_err(|_| format!("field id {id}"))?,
                    name: name.to_string(),
                    required: f.get("required").and_then(Value::as_bool).unwrap_or(false),
                    field_type: IcebergType::parse(field_type)?,
                })
            })
            .collect::<std::result::Result<_, String>>()?;
        Ok(IcebergSchema {
            schema_id: json
                .get("schema-id")
                .and_then(Value::as_i64)
                .and_then(|i| i32::try_from(i).ok())
                .unwrap_or(0),
            fields,
        })
    }
}

impl IcebergType {
    fn parse(json: &Value) -> std::result::Result<IcebergType, String> {
        let name = match json {
            Value::String(s) => s.as_str(),
            Value::Object(o) => {
                let kind = o.get("type").and_then(Value::as_str).unwrap_or("nested");
                return Ok(IcebergType::Nested(kind.to_string()));
            }
            other => return Err(format!("type {other}")),
        };
        Ok(match name {
            "boolean" => IcebergType::Boolean,
            "int" => IcebergType::Int,
            "long" => IcebergType::Long,
            "float" => IcebergType::Float,
            "double" => IcebergType::Double,
            "date" => IcebergType::Date,
            "time" => IcebergType::Time,
            "timestamp" => IcebergType::Timestamp { utc: false },
            "timestamptz" => IcebergType::Timestamp { utc: true },
            "timestamp_ns" => IcebergType::TimestampNs { utc: false },
            "timestamptz_ns" => IcebergType::TimestampNs { utc: true },
            "string" => IcebergType::String,
            "uuid" => IcebergType::Uuid,
            "binary" => IcebergType::Binary,
            other => {
                if let Some(args) = other.strip_prefix("decimal(").and_then(|r| r.strip_suffix(')')) {
                    let (p, s) = args.split_once(',').ok_or_else(|| format!("type {other}"))?;
                    IcebergType::Decimal {
                        precision: p.trim().parse().map_err(|_| format!("type {other}"))?,
                        scale: s.trim().parse().map_err(|_| format!("type {other}"))?,
                    }
                } else if let Some(n) = other.strip_prefix("fixed[").and_then(|r| r.strip_suffix(']')) {
                    IcebergType::Fixed(n.trim().parse().map_err(|_| format!("type {other}"))?)
                } else {
                    return Err(format!("unknown type {other}"));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_parse_with_their_field_ids() {
        let json: Value = serde_json::from_str(
            r#"{"type": "struct", "schema-id": 3, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 4, "name": "price", "required": false, "type": "decimal(15, 2)"},
                {"id": 5, "name": "h", "required": false, "type": "fixed[16]"},
                {"id": 6, "name": "at", "required": false, "type": "timestamptz"},
                {"id": 7, "name": "tags", "required": false,
                 "type": {"type": "list", "element-id": 8, "element": "string", "element-required": false}}
            ]}"#,
        )
        .unwrap();
        let schema = IcebergSchema::parse(&json).unwrap();
        assert_eq!(schema.schema_id, 3);
        let types: Vec<_> = schema.fields.iter().map(|f| (f.id, f.field_type.clone())).collect();
        assert_eq!(
            types,
            vec![
                (1, IcebergType::Long),
                (
                    4,
                    IcebergType::Decimal {
                        precision: 15,
                        scale: 2
                    }
                ),
                (5, IcebergType::Fixed(16)),
                (6, IcebergType::Timestamp { utc: true }),
                (7, IcebergType::Nested("list".into())),
            ]
        );
        assert!(schema.fields[0].required);

        let schemas = |evolved: &str| -> TableMetadata {
            serde_json::from_value(serde_json::json!({
                "format-version": 2, "location": "file:///t", "last-updated-ms": 0,
                "schemas": [
                    {"type": "struct", "schema-id": 0, "fields": [
                        {"id": 1, "name": "id", "required": true, "type": "long"},
                        {"id": 2, "name": "v", "required": false, "type": "int"}]},
                    serde_json::from_str::<Value>(evolved).unwrap()
                ]
            }))
            .unwrap()
        };
        for (evolved, changed) in [
            (
                r#"{"fields": [{"id": 1, "name": "id", "type": "long"}, {"id": 3, "name": "w", "type": "int"}]}"#,
                false,
            ),
            (
                r#"{"fields": [{"id": 1, "name": "id", "type": "long"}, {"id": 2, "name": "amount", "type": "int"}]}"#,
                true,
            ),
            (
                r#"{"fields": [{"id": 1, "name": "id", "type": "long"}, {"id": 2, "name": "v", "type": "long"}]}"#,
                true,
            ),
            (
                r#"{"fields": [{"id": 1, "name": "id", "type": "long"}, {"id": 3, "name": "v", "type": "string"}]}"#,
                true,
            ),
        ] {
            assert_eq!(schemas(evolved).columns_changed(), changed, "{evolved}");
        }
        let bad: Value = serde_json::from_str(r#"{"fields": [{"id": 1, "name": "x", "type": "varchar"}]}"#).unwrap();
        assert!(IcebergSchema::parse(&bad).unwrap_err().contains("varchar"));
    }
}
