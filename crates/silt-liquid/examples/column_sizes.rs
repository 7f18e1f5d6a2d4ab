//! Memory of a Parquet file's columns in three forms: compressed Parquet
//! (column chunk sizes from the footer), Arrow, and liquid (8192-row batches,
//! one encoder per column chunk, as the server's transcoder does).
//!
//! `cargo run --release -p silt-liquid --example column_sizes -- FILE [COLUMN...]`

use std::collections::BTreeMap;
use std::fs::File;

use arrow::array::Array;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use silt_liquid::ColumnEncoder;

/// One column's bytes in each form, and how many batches took each encoding.
#[derive(Default)]
struct Sizes {
    parquet: usize,
    arrow: usize,
    liquid: usize,
    encodings: BTreeMap<&'static str, usize>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: column_sizes FILE [COLUMN...]")?;
    let wanted: Vec<String> = args.collect();
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path)?)?;
    let schema = builder.schema().clone();
    let meta = builder.metadata().clone();
    let columns: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| wanted.is_empty() || wanted.iter().any(|w| w == schema.field(i).name()))
        .collect();
    let mut totals: BTreeMap<String, Sizes> = BTreeMap::new();
    for rg in 0..meta.num_row_groups() {
        for &c in &columns {
            let name = schema.field(c).name().clone();
            let parquet = meta.row_group(rg).column(c).compressed_size() as usize;
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path)?)?
                .with_row_groups(vec![rg])
                .with_projection(ProjectionMask::roots(meta.file_metadata().schema_descr(), [c]))
                .with_batch_size(8192)
                .build()?;
            let mut encoder = ColumnEncoder::new(schema.field(c).data_type());
            let entry = totals.entry(name).or_default();
            entry.parquet += parquet;
            for batch in reader {
                let array = batch?.column(0).clone();
                let arrow = array.get_array_memory_size();
                entry.arrow += arrow;
                let liquid = encoder.encode(&array).map_or(arrow, |l| {
                    *entry.encodings.entry(l.encoding()).or_default() += 1;
                    l.heap_size().min(arrow)
                });
                entry.liquid += liquid;
            }
        }
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>8} {:>8}  encodings",
        "column", "parquet", "arrow", "liquid", "xPq", "xArrow"
    );
    let (mut p, mut a, mut l) = (0, 0, 0);
    for (name, sizes) in &totals {
        let (pq, ar, lq, enc) = (&sizes.parquet, &sizes.arrow, &sizes.liquid, &sizes.encodings);
        println!(
            "{name:<24} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>8.2}  {enc:?}",
            mib(*pq),
            mib(*ar),
            mib(*lq),
            *lq as f64 / *pq as f64,
            *lq as f64 / *ar as f64
        );
        p += pq;
        a += ar;
        l += lq;
    }
    println!(
        "{:<24} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>8.2}",
        "TOTAL",
        mib(p),
        mib(a),
        mib(l),
        l as f64 / p as f64,
        l as f64 / a as f64
    );
    Ok(())
}
