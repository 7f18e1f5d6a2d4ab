//! The Arrow types a Flight SQL answer is sent in.
//!
//! DataFusion reads Parquet strings and binaries as view types (`Utf8View`,
//! `BinaryView`), and Silt keeps them end to end: a view column crosses the
//! wire and lands in Silt's client without a copy. Most Flight SQL clients
//! cannot read them: Apache Arrow's JDBC driver fails with `Unsupported
//! ArrowType Utf8View`, ODBC drivers and older Arrow libraries likewise. So
//! SQL answers and table schemas go out in the plain types (`Utf8`,
//! `Binary`, `List`) unless the call carries
//! [`silt_proto::VIEW_TYPES_HEADER`]` : true`, as Silt's own clients' calls
//! do. Silt's scan, lookup and byte-range tickets are Silt's clients' alone
//! and always answer in the engine's types.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Fields, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use tonic::metadata::MetadataMap;

/// Which Arrow types one call's answer is sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum WireTypes {
    /// As the engine makes them, view types included (Silt's own tickets).
    #[default]
    Engine,
    /// View types replaced by their plain forms.
    Plain,
}

impl WireTypes {
    /// The types the call with `metadata` asked for: the engine's when it
    /// sent [`silt_proto::VIEW_TYPES_HEADER`] `true`, else plain.
    pub(crate) fn asked(metadata: &MetadataMap) -> Self {
        let views = metadata
            .get(silt_proto::VIEW_TYPES_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if views { WireTypes::Engine } else { WireTypes::Plain }
    }

    /// `schema` as it is sent.
    pub(crate) fn schema(self, schema: &SchemaRef) -> SchemaRef {
        match self {
            WireTypes::Engine => schema.clone(),
            WireTypes::Plain => Arc::new(Schema::new_with_metadata(
                schema.fields().iter().map(plain_field).collect::<Fields>(),
                schema.metadata().clone(),
            )),
        }
    }

    /// `batch` in the types of `sent` (the answer's [`WireTypes::schema`]).
    pub(crate) fn batch(self, batch: RecordBatch, sent: &SchemaRef) -> Result<RecordBatch, ArrowError> {
        if self == WireTypes::Engine || batch.schema().fields() == sent.fields() {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(sent.fields())
            .map(|(column, field)| {
                if column.data_type() == field.data_type() {
                    Ok(column.clone())
                } else {
                    cast(column, field.data_type())
                }
            })
            .collect::<Result<Vec<ArrayRef>, ArrowError>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(sent.clone(), columns, &options)
    }
}

fn plain_field(field: &FieldRef) -> FieldRef {
    let plain = plain_type(field.data_type());
    if &plain == field.data_type() {
        return field.clone();
    }
    Arc::new(field.as_ref().clone().with_data_type(plain))
}

/// `data_type` with every view type, at any depth, in its plain form.
fn plain_type(data_type: &DataType) -> DataType {
    use DataType::*;
    match data_type {
        Utf8View => Utf8,
        BinaryView => Binary,
        ListView(f) | List(f) => List(plain_field(f)),
        LargeListView(f) | LargeList(f) => LargeList(plain_field(f)),
        FixedSizeList(f, n) => FixedSizeList(plain_field(f), *n),
        Struct(fields) => Struct(fields.iter().map(plain_field).collect()),
        Map(f, sorted) => Map(plain_field(f), *sorted),
        Dictionary(k, v) => Dictionary(k.clone(), Box::new(plain_type(v))),
        RunEndEncoded(ends, values) => RunEndEncoded(ends.clone(), plain_field(values)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray, BinaryViewArray, Int32Array, ListBuilder, StringViewBuilder};
    use datafusion::arrow::datatypes::Field;

    fn views_batch() -> RecordBatch {
        let mut list = ListBuilder::new(StringViewBuilder::new());
        list.values().append_value("a value longer than twelve bytes");
        list.values().append_null();
        list.append(true);
        list.append(false);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(datafusion::arrow::array::StringViewArray::from(vec![Some("x"), None])),
            Arc::new(BinaryViewArray::from(vec![Some(b"y".as_ref()), Some(b"".as_ref())])),
            Arc::new(list.finish()),
            Arc::new(Int32Array::from(vec![1, 2])),
        ];
        let fields: Vec<Field> = ["s", "b", "l", "i"]
            .iter()
            .zip(&columns)
            .map(|(name, c)| Field::new(*name, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    #[test]
    fn plain_answers_have_no_view_type_at_any_depth() {
        let batch = views_batch();
        let sent = WireTypes::Plain.schema(&batch.schema());
        let types: Vec<String> = sent.fields().iter().map(|f| f.data_type().to_string()).collect();
        assert_eq!(types[0], "Utf8");
        assert_eq!(types[1], "Binary");
        assert!(types[2].starts_with("List(") && types[2].contains("Utf8") && !types[2].contains("View"));
        assert_eq!(types[3], "Int32");
        let plain = WireTypes::Plain.batch(batch.clone(), &sent).unwrap();
        assert_eq!(plain.schema(), sent);
        assert_eq!(plain.column(0).as_string::<i32>().value(0), "x");
        assert!(plain.column(0).is_null(1));
        assert_eq!(plain.column(1).as_binary::<i32>().value(0), b"y");
        let list = plain.column(2).as_list::<i32>();
        assert_eq!(
            list.value(0).as_string::<i32>().value(0),
            "a value longer than twelve bytes"
        );
        assert!(list.is_null(1));
    }

    #[test]
    fn engine_types_are_sent_as_they_are() {
        let batch = views_batch();
        let sent = WireTypes::Engine.schema(&batch.schema());
        assert_eq!(sent, batch.schema());
        assert_eq!(WireTypes::Engine.batch(batch.clone(), &sent).unwrap(), batch);
    }

    #[test]
    fn only_the_header_set_to_true_asks_for_views() {
        let mut metadata = MetadataMap::new();
        assert_eq!(WireTypes::asked(&metadata), WireTypes::Plain);
        metadata.insert(silt_proto::VIEW_TYPES_HEADER, "false".parse().unwrap());
        assert_eq!(WireTypes::asked(&metadata), WireTypes::Plain);
        metadata.insert(silt_proto::VIEW_TYPES_HEADER, "TRUE".parse().unwrap());
        assert_eq!(WireTypes::asked(&metadata), WireTypes::Engine);
    }
}
