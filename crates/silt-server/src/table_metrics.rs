//! Per-table and per-column hit ratios as Prometheus series, appended to
//! `/metrics` at each scrape from the per-table counters.
//!
//! Label cardinality is bounded: the [`TOP`] tables and the [`TOP`]
//! (table, column) pairs with the most lookups get their own series; the
//! rest are summed under `table="other"` (and `column="other"`). Which
//! tables are in the top can change between scrapes, so a series may
//! appear, vanish, or step down as its lookups move into or out of
//! `other`; alert on the ratios, or on `rate()` of the named series.
//!
//! - `silt_table_hits_total{table}`: memory-tier batch hits plus page hits
//!   (page buffer or disk) of the table's scans.
//! - `silt_table_misses_total{table}`: pages fetched from the object store.
//! - `silt_table_hit_ratio{table}`: hits / (hits + misses), once looked up.
//! - `silt_column_hits_total{table,column}`, `silt_column_misses_total`,
//!   `silt_column_hit_ratio`: the memory tier's lookups of the column's
//!   batches (a miss decodes the column chunk from pages).
//! - `silt_scan_column_chunk_bytes_total`: compressed bytes of the column
//!   chunks scans read, from whichever tier (what clients reading the
//!   Parquet themselves would have fetched).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::engine::Engine;

/// Tables, and (table, column) pairs, with series of their own.
pub const TOP: usize = 20;
/// The label value of everything beyond the top.
pub const OTHER: &str = "other";

/// One labelled set of lookups.
struct Lookups {
    labels: Vec<(&'static str, String)>,
    hits: u64,
    misses: u64,
}

/// The series above in Prometheus text exposition.
pub fn render(engine: &Engine) -> String {
    let stores = engine.table_stores();
    let mut tables = Vec::new();
    let mut columns = Vec::new();
    let mut chunk_bytes = 0;
    for (name, store) in &stores {
        let c = store.counters();
        chunk_bytes += c.chunk_bytes.load(Ordering::Relaxed);
        let (hits, misses) = c.lookups();
        tables.push(Lookups {
            labels: vec![("table", name.clone())],
            hits,
            misses,
        });
        for (column, n) in c.columns() {
            columns.push(Lookups {
                labels: vec![("table", name.clone()), ("column", column.to_string())],
                hits: n.hits,
                misses: n.misses,
            });
        }
    }
    let mut out = String::new();
    write_family(&mut out, "silt_table", bounded(tables));
    write_family(&mut out, "silt_column", bounded(columns));
    let _ = writeln!(out, "# TYPE silt_scan_column_chunk_bytes_total counter");
    let _ = writeln!(out, "silt_scan_column_chunk_bytes_total {chunk_bytes}");
    out
}

/// The [`TOP`] sets by lookups, then one `other` set summing the rest.
fn bounded(mut all: Vec<Lookups>) -> Vec<Lookups> {
    all.sort_by(|a, b| {
        (b.hits + b.misses)
            .cmp(&(a.hits + a.misses))
            .then(a.labels.cmp(&b.labels))
    });
    if all.len() <= TOP {
        return all;
    }
    let rest = all.split_off(TOP);
    let labels = rest[0].labels.iter().map(|(k, _)| (*k, OTHER.to_string())).collect();
    all.push(Lookups {
        labels,
        hits: rest.iter().map(|l| l.hits).sum(),
        misses: rest.iter().map(|l| l.misses).sum(),
    });
    all
}

fn write_family(out: &mut String, prefix: &str, sets: Vec<Lookups>) {
    let labels = |l: &Lookups| {
        l.labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let _ = writeln!(out, "# TYPE {prefix}_hits_total counter");
    for l in &sets {
        let _ = writeln!(out, "{prefix}_hits_total{{{}}} {}", labels(l), l.hits);
    }
    let _ = writeln!(out, "# TYPE {prefix}_misses_total counter");
    for l in &sets {
        let _ = writeln!(out, "{prefix}_misses_total{{{}}} {}", labels(l), l.misses);
    }
    let _ = writeln!(out, "# TYPE {prefix}_hit_ratio gauge");
    for l in &sets {
        if let Some(ratio) = silt_cache::hit_ratio(l.hits, l.misses) {
            let _ = writeln!(out, "{prefix}_hit_ratio{{{}}} {ratio}", labels(l));
        }
    }
}

/// A label value escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_the_top_everything_is_other() {
        let sets: Vec<Lookups> = (0..TOP as u64 + 5)
            .map(|i| Lookups {
                labels: vec![("table", format!("t{i}"))],
                hits: i,
                misses: 1,
            })
            .collect();
        let kept = bounded(sets);
        assert_eq!(kept.len(), TOP + 1);
        let other = kept.last().unwrap();
        assert_eq!(other.labels, vec![("table", OTHER.to_string())]);
        // t0..t4 have the fewest lookups: 0+1+2+3+4 hits, 5 misses.
        assert_eq!((other.hits, other.misses), (10, 5));
        let mut text = String::new();
        write_family(&mut text, "silt_table", kept);
        let parsed = crate::metrics::parse_exposition(&text);
        assert_eq!(parsed["silt_table_hits_total{table=\"t24\"}"], 24.0);
        assert_eq!(parsed["silt_table_hit_ratio{table=\"other\"}"], 10.0 / 15.0);
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
