//! Liquid numeric columns versus Arrow and Parquet.
//!
//! For an Int64-like column (narrow range, for-bitpack) and a Float64 column
//! of 2-decimal prices (ALP), 8192 * 64 rows in batches of 8192:
//! - `decode/liquid`: `to_arrow` of every batch;
//! - `decode/parquet`: reading the same column from an uncompressed Parquet
//!   file (what the cache saves by keeping liquid batches);
//! - `filter/liquid`: `evaluate(column > literal)` on the encoded batches;
//! - `filter/arrow`: `cmp::gt` on already decoded Arrow batches.
//!
//! Run: `cargo bench -p silt-liquid --bench numeric -- --quick`.

use std::fs::File;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, Scalar};
use arrow::compute::kernels::cmp;
use arrow::datatypes::{Field, Schema};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use silt_liquid::{CmpOp, ColumnEncoder, LiquidArrayRef, LiquidPredicate};

const BATCH: usize = 8192;
const BATCHES: usize = 64;

/// splitmix64, for reproducible data without a rand dependency.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Order-key-like integers: about 17 bits of range per batch.
fn int_batches() -> Vec<ArrayRef> {
    (0..BATCHES)
        .map(|b| {
            let base = 1_000_000 * b as i64;
            let values = (0..BATCH).map(|i| base + (mix((b * BATCH + i) as u64) % 100_000) as i64);
            Arc::new(Int64Array::from_iter_values(values)) as ArrayRef
        })
        .collect()
}

/// Prices with 2 decimals, 0.00 to 999.99.
fn price_batches() -> Vec<ArrayRef> {
    (0..BATCHES)
        .map(|b| {
            let values = (0..BATCH).map(|i| (mix((b * BATCH + i) as u64) % 100_000) as f64 / 100.0);
            Arc::new(Float64Array::from_iter_values(values)) as ArrayRef
        })
        .collect()
}

/// Writes `batches` as one column of an uncompressed Parquet file.
fn write_parquet(name: &str, batches: &[ArrayRef]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("silt-liquid-bench-{}-{name}.parquet", std::process::id()));
    let field = Field::new("v", batches[0].data_type().clone(), false);
    let schema = Arc::new(Schema::new(vec![field]));
    let file = File::create(&path).expect("create bench file");
    let mut writer = ArrowWriter::try_new(file, schema.clone(), None).expect("parquet writer");
    for array in batches {
        let batch = RecordBatch::try_new(schema.clone(), vec![array.clone()]).expect("batch");
        writer.write(&batch).expect("write batch");
    }
    writer.close().expect("close parquet");
    path
}

/// Reads every batch of the file's column.
fn read_parquet(path: &PathBuf) -> usize {
    let file = File::open(path).expect("open bench file");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet reader")
        .with_batch_size(BATCH)
        .build()
        .expect("parquet reader");
    reader.map(|b| b.expect("parquet batch").num_rows()).sum()
}

fn encode(batches: &[ArrayRef]) -> Vec<LiquidArrayRef> {
    let mut encoder = ColumnEncoder::new(batches[0].data_type());
    batches
        .iter()
        .map(|a| encoder.encode(a).expect("numeric types encode"))
        .collect()
}

/// The benches for one column; `literal` is the `>` literal (about half pass).
fn bench_column(c: &mut Criterion, name: &str, batches: Vec<ArrayRef>, literal: ArrayRef) {
    let liquid = encode(&batches);
    let path = write_parquet(name, &batches);
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.throughput(Throughput::Elements((BATCH * BATCHES) as u64));

    group.bench_function("decode/liquid", |b| {
        b.iter(|| liquid.iter().map(|l| black_box(l.to_arrow()).len()).sum::<usize>())
    });
    group.bench_function("decode/parquet", |b| b.iter(|| black_box(read_parquet(&path))));

    let predicate = LiquidPredicate::Compare {
        op: CmpOp::Gt,
        literal: literal.clone(),
    };
    group.bench_function("filter/liquid", |b| {
        b.iter(|| {
            liquid
                .iter()
                .map(|l| l.evaluate(&predicate).map_or(0, |r| r.true_count()))
                .sum::<usize>()
        })
    });
    let scalar = Scalar::new(literal);
    group.bench_function("filter/arrow", |b| {
        b.iter(|| {
            batches
                .iter()
                .map(|a| cmp::gt(a, &scalar).map_or(0, |r| r.true_count()))
                .sum::<usize>()
        })
    });
    group.finish();
    let encoding = liquid.first().map_or("none", |l| l.encoding());
    let liquid_bytes: usize = liquid.iter().map(|l| l.heap_size()).sum();
    let parquet_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!("{name}: {encoding}, liquid {liquid_bytes} bytes, parquet file {parquet_bytes} bytes");
    let _ = std::fs::remove_file(&path);
}

fn numeric(c: &mut Criterion) {
    let int_literal = Arc::new(Int64Array::from(vec![32_000_000])) as ArrayRef;
    bench_column(c, "int64", int_batches(), int_literal);
    let price_literal = Arc::new(Float64Array::from(vec![500.0])) as ArrayRef;
    bench_column(c, "price_f64", price_batches(), price_literal);
}

criterion_group!(benches, numeric);
criterion_main!(benches);
