//! Differential comparison of query results: the same query through Silt
//! and through a baseline engine must give the same rows. Shared by the
//! integration tests and the benchmark harness.

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// One value of a result row, for comparison.
#[derive(Debug, Clone)]
enum Cell {
    Null,
    Float(f64),
    Text(String),
}

impl Cell {
    fn sort_key(&self) -> String {
        match self {
            Cell::Null => "\u{0}NULL".into(),
            Cell::Float(f) => format!("{:.6e}", f),
            Cell::Text(s) => s.clone(),
        }
    }

    fn matches(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Null, Cell::Null) => true,
            (Cell::Text(a), Cell::Text(b)) => a == b,
            (Cell::Float(a), Cell::Float(b)) => {
                if a.is_nan() || b.is_nan() {
                    return a.is_nan() && b.is_nan();
                }
                let scale = a.abs().max(b.abs()).max(1e-300);
                a == b || (a - b).abs() / scale <= 1e-9
            }
            _ => false,
        }
    }
}

fn rows(batches: &[RecordBatch]) -> Vec<Vec<Cell>> {
    let mut out = Vec::new();
    let options = FormatOptions::default().with_null("");
    for b in batches {
        let cols: Vec<Box<dyn Fn(usize) -> Cell>> = b
            .columns()
            .iter()
            .map(|c| -> Box<dyn Fn(usize) -> Cell> {
                let c = c.clone();
                match c.data_type() {
                    DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                        let f = arrow::compute::cast(&c, &DataType::Float64).unwrap();
                        Box::new(move |i| {
                            if f.is_null(i) {
                                Cell::Null
                            } else {
                                let a = f.as_any().downcast_ref::<arrow::array::Float64Array>().unwrap();
                                Cell::Float(a.value(i))
                            }
                        })
                    }
                    _ => {
                        let options = options.clone();
                        Box::new(move |i| {
                            if c.is_null(i) {
                                Cell::Null
                            } else {
                                let fmt = ArrayFormatter::try_new(c.as_ref(), &options).unwrap();
                                Cell::Text(fmt.value(i).to_string())
                            }
                        })
                    }
                }
            })
            .collect();
        for i in 0..b.num_rows() {
            out.push(cols.iter().map(|f| f(i)).collect());
        }
    }
    out
}

fn same_rows(a: &[Vec<Cell>], b: &[Vec<Cell>]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("row counts differ: {} vs {}", a.len(), b.len()));
    }
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        if ra.len() != rb.len() || !ra.iter().zip(rb).all(|(x, y)| x.matches(y)) {
            return Some(format!("row {i} differs:\n  silt:     {ra:?}\n  baseline: {rb:?}"));
        }
    }
    None
}

/// Compare Silt's result with the baseline's: same column names and types,
/// same rows (in order when `ordered`, else as multisets), floats to 1e-9
/// relative. An ordered query may still differ in the order of rows that tie
/// on its sort keys; such a result is accepted only if the multisets match.
pub fn check_same(name: &str, silt: &[RecordBatch], baseline: &[RecordBatch], ordered: bool) -> Result<(), String> {
    let schema_of = |b: &[RecordBatch]| {
        b.first().map(|b| {
            b.schema()
                .fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect::<Vec<_>>()
        })
    };
    match (schema_of(silt), schema_of(baseline)) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!("{name}: schemas differ:\n  silt:     {a:?}\n  baseline: {b:?}"));
        }
        (Some(_), Some(_)) => {}
        // Without a batch there is no schema to compare: an empty result
        // must come as one empty batch (`run_script` does so).
        (a, b) => {
            return Err(format!(
                "{name}: a result without batches carries no schema to compare (silt: {}, baseline: {})",
                if a.is_some() { "has one" } else { "none" },
                if b.is_some() { "has one" } else { "none" },
            ));
        }
    }
    let (mut a, mut b) = (rows(silt), rows(baseline));
    if ordered && same_rows(&a, &b).is_none() {
        return Ok(());
    }
    let key = |r: &Vec<Cell>| r.iter().map(Cell::sort_key).collect::<Vec<_>>();
    a.sort_by_cached_key(key);
    b.sort_by_cached_key(key);
    match same_rows(&a, &b) {
        None => Ok(()),
        Some(diff) => Err(format!("{name}: {diff}")),
    }
}

/// Make a `... [ORDER BY k] LIMIT n [OFFSET m]` query deterministic by breaking
/// ties on every output column (`ORDER BY k, 1, 2, .., columns`). Rows that
/// tie on the query's own keys may legally come in any order, and a LIMIT
/// may legally keep any of them; both engines get the same rewritten query,
/// so the comparison stays exact. Queries without LIMIT are returned as is.
pub fn break_ties(sql: &str, columns: usize) -> String {
    let body = sql.trim().trim_end_matches(';').trim_end();
    let lower = body.to_ascii_lowercase();
    if columns == 0 {
        return sql.to_string();
    }
    let Some(limit_at) = lower.rfind("limit ") else {
        return sql.to_string();
    };
    let tail = &lower[limit_at..];
    if !tail
        .split_whitespace()
        .all(|w| w == "limit" || w == "offset" || w.chars().all(|c| c.is_ascii_digit()))
    {
        return sql.to_string();
    }
    let head = body[..limit_at].trim_end();
    let positions: Vec<String> = (1..=columns).map(|i| i.to_string()).collect();
    let order = if lower[..limit_at].contains("order by") {
        format!("{head}, {}", positions.join(", "))
    } else {
        format!("{head} ORDER BY {}", positions.join(", "))
    };
    format!("{order} {}", &body[limit_at..])
}

/// True when the query's outermost statement sorts its result.
pub fn is_ordered(sql: &str) -> bool {
    sql.to_ascii_lowercase().contains("order by")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn empty(name: &str, t: DataType) -> RecordBatch {
        RecordBatch::new_empty(Arc::new(Schema::new(vec![Field::new(name, t, true)])))
    }

    #[test]
    fn empty_results_are_compared_by_schema() {
        let ints = empty("a", DataType::Int64);
        assert!(check_same("same", std::slice::from_ref(&ints), std::slice::from_ref(&ints), false).is_ok());
        let strings = empty("a", DataType::Utf8);
        let err = check_same("types", std::slice::from_ref(&ints), &[strings], false).unwrap_err();
        assert!(err.contains("schemas differ"), "{err}");
        let err = check_same("no batches", &[], &[], false).unwrap_err();
        assert!(err.contains("no schema"), "{err}");
        let one = RecordBatch::try_new(
            ints.schema(),
            vec![Arc::new(Int64Array::from(vec![1])) as arrow::array::ArrayRef],
        )
        .unwrap();
        assert!(check_same("rows", &[one], &[ints], false).is_err());
    }
}
