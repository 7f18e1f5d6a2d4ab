//! The point-lookup table: `rows` rows sorted by a unique `id`, twelve
//! columns, one of them a ~1 KiB binary payload — the shape of a feature
//! store or key-value table read one key at a time (`WHERE id = ?`).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::tpch::{GenError, ParquetLayout, write_parquet};

/// Bytes of each row's payload.
pub const PAYLOAD_BYTES: usize = 1024;

/// The table's schema.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("tenant", DataType::Int32, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("score", DataType::Float64, false),
        Field::new("weight", DataType::Float32, false),
        Field::new("count", DataType::Int64, false),
        Field::new("flags", DataType::UInt64, false),
        Field::new("active", DataType::Boolean, false),
        Field::new("created", DataType::Timestamp(TimeUnit::Microsecond, None), false),
        Field::new("version", DataType::Int32, false),
        Field::new("data", DataType::Binary, false),
    ]))
}

/// Writes the lookup table of `rows` rows to `out` (ids `0..rows`, in
/// order, so row-group statistics locate any id).
pub fn generate(out: &Path, rows: u64, layout: ParquetLayout) -> Result<(), GenError> {
    const BATCH: u64 = 8192;
    let schema = schema();
    let batches = (0..rows.div_ceil(BATCH)).map(|b| {
        let ids: Vec<i64> = (b * BATCH..((b + 1) * BATCH).min(rows)).map(|i| i as i64).collect();
        batch(&schema, &ids).map_err(|source| GenError::Arrow {
            table: "lookup",
            source,
        })
    });
    write_parquet(out, schema.clone(), batches, layout)
}

fn batch(schema: &SchemaRef, ids: &[i64]) -> Result<RecordBatch, arrow::error::ArrowError> {
    let h = |i: i64, k: u64| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(k as u32) ^ k;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.to_vec())),
        Arc::new(Int32Array::from_iter_values(
            ids.iter().map(|&i| (h(i, 1) % 1000) as i32),
        )),
        Arc::new(StringArray::from_iter_values(
            ids.iter().map(|&i| format!("cat-{}", h(i, 2) % 50)),
        )),
        Arc::new(StringArray::from_iter_values(
            ids.iter().map(|&i| format!("item {i:012}")),
        )),
        Arc::new(Float64Array::from_iter_values(
            ids.iter().map(|&i| (h(i, 3) % 1_000_000) as f64 / 1000.0),
        )),
        Arc::new(Float32Array::from_iter_values(
            ids.iter().map(|&i| (h(i, 4) % 1000) as f32 / 10.0),
        )),
        Arc::new(Int64Array::from_iter_values(
            ids.iter().map(|&i| (h(i, 5) % 100_000) as i64),
        )),
        Arc::new(UInt64Array::from_iter_values(ids.iter().map(|&i| h(i, 6)))),
        Arc::new(BooleanArray::from_iter(ids.iter().map(|&i| Some(h(i, 7) % 4 != 0)))),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            ids.iter()
                .map(|&i| 1_600_000_000_000_000 + (h(i, 8) % 100_000_000_000_000) as i64),
        )),
        Arc::new(Int32Array::from_iter_values(ids.iter().map(|&i| (h(i, 9) % 10) as i32))),
        Arc::new(BinaryArray::from_iter_values(ids.iter().map(|&i| payload(i)))),
    ];
    RecordBatch::try_new(schema.clone(), columns)
}

/// A row's payload: pseudo-random bytes (incompressible, like embeddings).
pub fn payload(id: i64) -> Vec<u8> {
    let mut x = id as u64 ^ 0xD1B5_4A32_D192_ED03;
    (0..PAYLOAD_BYTES / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[test]
    fn ids_are_sorted_unique_and_payloads_are_a_kib() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("lookup.parquet");
        generate(&out, 20_000, ParquetLayout::default()).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut next = 0i64;
        for b in reader {
            let b = b.unwrap();
            assert_eq!(b.num_columns(), 12);
            let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let data = b.column(11).as_any().downcast_ref::<BinaryArray>().unwrap();
            for (id, d) in ids.values().iter().zip(data.iter()) {
                assert_eq!(*id, next);
                assert_eq!(d.unwrap(), payload(*id).as_slice());
                next += 1;
            }
        }
        assert_eq!(next, 20_000);
    }
}
