//! Liquid strings vs Arrow on a URL-like column (8192 × 32 rows, ~1000
//! distinct values): decode throughput, `=` and `LIKE '%google%'` on the
//! encoded batches vs Arrow's kernels on decoded ones, and memory held.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{ArrayRef, Scalar, StringArray};
use arrow::compute::kernels::cmp;
use arrow::compute::kernels::comparison::like;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use silt_liquid::bytes::BytesEncoder;
use silt_liquid::{CmpOp, LiquidArrayRef, LiquidPredicate};

const BATCH: usize = 8192;
const BATCHES: usize = 32;
const DISTINCT: usize = 1000;

fn url(i: usize) -> String {
    const HOSTS: [&str; 8] = [
        "www.google.com",
        "en.wikipedia.org",
        "github.com",
        "news.ycombinator.com",
        "www.example.org",
        "docs.rs",
        "maps.google.de",
        "www.youtube.com",
    ];
    let id = (i.wrapping_mul(2_654_435_761)) % DISTINCT;
    format!("https://{}/search/item/{id}?ref=home&lang=en", HOSTS[id % HOSTS.len()])
}

fn column() -> Vec<ArrayRef> {
    (0..BATCHES)
        .map(|b| Arc::new(StringArray::from_iter_values((0..BATCH).map(|i| url(b * BATCH + i)))) as ArrayRef)
        .collect()
}

fn encode(batches: &[ArrayRef]) -> Vec<LiquidArrayRef> {
    let mut encoder = BytesEncoder::new();
    batches
        .iter()
        .map(|b| encoder.encode(b).expect("strings are supported"))
        .collect()
}

fn bench_bytes(c: &mut Criterion) {
    let arrow = column();
    let liquid = encode(&arrow);
    let arrow_size: usize = arrow.iter().map(|a| a.get_buffer_memory_size()).sum();
    let liquid_size: usize = liquid.iter().map(|a| a.heap_size()).sum();
    println!(
        "url column: arrow {arrow_size} bytes, liquid {liquid_size} bytes ({}), ratio {:.2}",
        liquid[0].encoding(),
        arrow_size as f64 / liquid_size as f64
    );

    let mut group = c.benchmark_group("bytes");
    group.sample_size(10);
    group.throughput(Throughput::Elements((BATCH * BATCHES) as u64));
    group.bench_function("decode/liquid", |b| {
        b.iter(|| liquid.iter().map(|a| black_box(a.to_arrow()).len()).sum::<usize>())
    });

    let literal: ArrayRef = Arc::new(StringArray::from(vec![url(7)]));
    let eq = LiquidPredicate::Compare {
        op: CmpOp::Eq,
        literal: literal.clone(),
    };
    group.bench_function("eq/liquid", |b| {
        b.iter(|| {
            liquid
                .iter()
                .map(|a| a.evaluate(&eq).expect("eq").true_count())
                .sum::<usize>()
        })
    });
    let scalar = Scalar::new(literal);
    group.bench_function("eq/arrow", |b| {
        b.iter(|| {
            arrow
                .iter()
                .map(|a| cmp::eq(a, &scalar).unwrap().true_count())
                .sum::<usize>()
        })
    });

    let pattern = "%google%";
    let like_pred = LiquidPredicate::Like {
        pattern: pattern.into(),
        negated: false,
        case_insensitive: false,
    };
    group.bench_function("like_google/liquid", |b| {
        b.iter(|| {
            liquid
                .iter()
                .map(|a| a.evaluate(&like_pred).expect("like").true_count())
                .sum::<usize>()
        })
    });
    let pattern = Scalar::new(StringArray::from(vec![pattern]));
    group.bench_function("like_google/arrow", |b| {
        b.iter(|| {
            arrow
                .iter()
                .map(|a| like(a, &pattern).unwrap().true_count())
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_bytes);
criterion_main!(benches);
