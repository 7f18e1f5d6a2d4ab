//! Partition values kept outside the data files: a Delta table's partition
//! columns are not written into its Parquet files, their values are in the
//! log (`add.partitionValues`, as strings). The scan gives each such column
//! of a file its constant value ([`crate::column_loader::FileContext`]),
//! where a column a file lacks would otherwise read as nulls.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use object_store::path::Path;

/// One file's partition columns' values as the table's metadata spells
/// them, by column name (`None`: null).
pub type FileValues = Vec<(String, Option<String>)>;

/// Per data file (namespaced path), its [`FileValues`]. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PartitionValues(Arc<HashMap<Path, FileValues>>);

impl PartitionValues {
    pub fn new(per_file: HashMap<Path, FileValues>) -> Self {
        PartitionValues(Arc::new(per_file.into_iter().filter(|(_, v)| !v.is_empty()).collect()))
    }

    /// Whether no file has partition values outside it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names of the columns some file has a value for.
    pub fn columns(&self) -> std::collections::HashSet<&str> {
        self.0.values().flatten().map(|(name, _)| name.as_str()).collect()
    }

    /// For each column of `schema`, the constant value it has throughout
    /// `file` (`None`: not a partition column of the file), parsed as the
    /// column's type. An empty string is null, as Delta writes nulls.
    pub fn constants(&self, file: &Path, schema: &Schema) -> Result<Vec<Option<ScalarValue>>> {
        let Some(values) = self.0.get(file) else {
            return Ok(Vec::new());
        };
        schema
            .fields()
            .iter()
            .map(|field| {
                let Some((_, value)) = values.iter().find(|(name, _)| name == field.name()) else {
                    return Ok(None);
                };
                let value = match value.as_deref() {
                    None | Some("") => ScalarValue::try_from(field.data_type())?,
                    Some(text) => ScalarValue::try_from_string(text.to_string(), field.data_type()).map_err(|e| {
                        DataFusionError::Execution(format!(
                            "{file}: partition value {text:?} of column {} is not a {}: {e}",
                            field.name(),
                            field.data_type()
                        ))
                    })?,
                };
                Ok(Some(value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};

    #[test]
    fn values_are_parsed_as_their_columns_types() {
        let file = Path::from("t/day=2026-11-27/part-0.parquet");
        let values = PartitionValues::new(HashMap::from([(
            file.clone(),
            vec![
                ("day".to_string(), Some("2026-11-27".to_string())),
                ("n".to_string(), Some("42".to_string())),
                ("cat".to_string(), None),
                ("at".to_string(), Some("2026-11-27 10:00:00.5".to_string())),
            ],
        )]));
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("day", DataType::Date32, true),
            Field::new("n", DataType::Int32, true),
            Field::new("cat", DataType::Utf8View, true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]);
        let constants = values.constants(&file, &schema).unwrap();
        assert_eq!(constants[0], None);
        assert_eq!(constants[1], Some(ScalarValue::Date32(Some(20784))));
        assert_eq!(constants[2], Some(ScalarValue::Int32(Some(42))));
        assert_eq!(constants[3], Some(ScalarValue::Utf8View(None)));
        assert_eq!(
            constants[4],
            Some(ScalarValue::TimestampMicrosecond(
                Some(1_795_773_600_500_000),
                Some("UTC".into())
            ))
        );
        assert!(values.constants(&Path::from("other"), &schema).unwrap().is_empty());
        let bad = PartitionValues::new(HashMap::from([(file.clone(), vec![("n".into(), Some("x".into()))])]));
        assert!(bad.constants(&file, &schema).is_err());
    }
}
