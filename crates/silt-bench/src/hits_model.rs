//! The realistic model of the hits generator: how many distinct values each
//! column should have at a given row count, and how new values are
//! synthesized so the generated file has them.
//!
//! # What it targets, and why
//!
//! The seed (`nano_hits.parquet`) is 24,586 consecutive rows of the real
//! 99,997,497-row table, which is stored sorted by (CounterID, EventDate,
//! UserID, EventTime): each user's rows are adjacent. Resampling it (the
//! `resample` model) keeps every column's distinct count at the seed's (URL
//! ~6,000 at any size). The real table has about 17.6M distinct UserID and
//! 6.0M distinct SearchPhrase, i.e. a new user every 5.7 rows and a new phrase
//! every 17: in a sorted file the distinct count grows about linearly with
//! the rows, because every further slice holds other users and sites.
//!
//! Per column `c` the model targets `D_c(N) = d_c + r_c * (N - n)` distinct
//! non-empty values at `N` rows (`d_c` the seed's, `n` its rows), where the
//! rate of new values `r_c` is estimated from the seed's frequencies of
//! frequencies:
//!
//! - Good-Turing: the share of rows whose value the sample has not seen is
//!   `f1_c / n`, `f1_c` the number of values seen exactly once.
//! - A contiguous slice of a sorted table sees each user's session whole, so
//!   per-row Good-Turing underestimates how fast a longer slice meets new
//!   values by a clustering factor `k`. It is fitted on the two columns whose
//!   full-size distinct counts are known (UserID, SearchPhrase: the geometric
//!   mean of `(D_real / N_real) / (f1 / n)` over both, about 140), and
//!   `r_c = min(k * f1_c / n, MAX_NEW_SHARE * nonempty share)`; UserID and
//!   SearchPhrase use their known rates directly.
//!
//! Empty/zero/null fractions stay the seed's (except the three the generator
//! rebalances to the real selectivities), and a new value keeps its template's
//! length (a string's tail is rewritten; an integer stays within twice the
//! seed's range), so length distributions stay the seed's. That caps how far
//! a narrow integer column or a column of 2-character strings can grow: its
//! target is lowered to what draws from its space reach, collisions counted.
//! Columns whose seed has no singleton (flags, enums) get no new values.
//!
//! # Where the new values go
//!
//! The generator copies runs of [`RUN`] consecutive seed rows (keeping each
//! session's clustering), with dates ascending along the file. A value is
//! renamed per (column, window of `G` rows, value): all its rows in the window
//! get the same new value, so new values cluster where they appear, like a
//! user's session, and the value set drifts along the file. The window `G` is
//! the largest of [`WINDOWS`] that offers enough (window, value) pairs to reach
//! the target with a renaming chance of at most 0.8.

use std::collections::{HashMap, HashSet};

use crate::hits::mix;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Int16Type, Int32Type, Int64Type};

/// Rows of the real ClickBench table.
pub const REAL_ROWS: f64 = 99_997_497.0;

/// Known distinct counts of the real table (non-empty values).
pub const KNOWN_DISTINCT: [(&str, f64); 2] = [("UserID", 17_600_000.0), ("SearchPhrase", 6_000_000.0)];

/// Consecutive seed rows copied per run.
pub const RUN: u64 = 256;

/// Window sizes (rows) at which a value may be renamed, largest first.
const WINDOWS: [u64; 5] = [256, 64, 16, 4, 1];

/// At most this share of a column's non-empty rows starts a new value.
const MAX_NEW_SHARE: f64 = 0.5;

/// Columns the model leaves alone: unique ids, times and dates (the
/// generator lays them out), and the planted `CounterID`.
const UNMODELLED: [&str; 6] = [
    "WatchID",
    "EventTime",
    "EventDate",
    "ClientEventTime",
    "LocalEventTime",
    "CounterID",
];

/// What the model knows of one column and what it aims for.
#[derive(Debug, Clone)]
pub struct ColumnTarget {
    pub name: String,
    /// Index in the schema.
    pub index: usize,
    /// Non-empty distinct values and non-empty share in the seed.
    pub seed_distinct: u64,
    pub seed_nonempty: f64,
    /// Values seen once in the seed (non-empty).
    pub singletons: u64,
    /// New distinct values per generated row.
    pub new_rate: f64,
    /// Whether `new_rate` is the real table's known rate.
    pub known: bool,
    /// Mean length in characters of non-empty values (strings) in the seed.
    pub seed_mean_len: Option<f64>,
    /// Target distinct values at the requested rows.
    pub target_distinct: u64,
    /// Window (rows) and chance of renaming a (window, value) pair.
    pub window: u64,
    pub rename_chance: f64,
    /// Smallest and largest non-zero seed value (integers).
    range: (i64, i64),
}

/// The per-column targets for `rows` generated rows, from the seed.
pub struct Model {
    pub columns: Vec<ColumnTarget>,
    pub clustering: f64,
}

/// One column's values as the model sees them: 64-bit keys (0 = empty).
fn keys(array: &ArrayRef) -> Option<Vec<u64>> {
    Some(match array.data_type() {
        DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            let wide = arrow::compute::cast(array, &DataType::Int64).ok()?;
            wide.as_primitive::<Int64Type>()
                .values()
                .iter()
                .map(|&v| v as u64)
                .collect()
        }
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) || a.value(i).is_empty() {
                        0
                    } else {
                        fnv(a.value(i).as_bytes()) | 1
                    }
                })
                .collect()
        }
        _ => return None,
    })
}

/// FNV-1a, 64 bit: a stable hash of a string's bytes.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Mean distinct non-empty values per aligned window of `w` rows.
fn per_window(keys: &[u64], w: u64) -> f64 {
    let chunks = keys.chunks(w as usize);
    let windows = chunks.len().max(1) as f64;
    let distinct: usize = keys
        .chunks(w as usize)
        .map(|c| c.iter().filter(|&&k| k != 0).collect::<HashSet<_>>().len())
        .sum();
    distinct as f64 / windows
}

impl Model {
    /// Fits the model on `seed` for `rows` generated rows.
    pub fn fit(seed: &RecordBatch, rows: u64) -> Model {
        let n = seed.num_rows() as f64;
        let schema = seed.schema();
        struct Raw {
            index: usize,
            keys: Vec<u64>,
            distinct: u64,
            singletons: u64,
            nonempty: f64,
            mean_len: Option<f64>,
            /// Distinct new values strings can take, if few ([`string_space`]).
            string_space: Option<f64>,
            range: (i64, i64),
        }
        let mut raws = Vec::new();
        for (index, field) in schema.fields().iter().enumerate() {
            if UNMODELLED.contains(&field.name().as_str()) {
                continue;
            }
            let array = seed.column(index);
            let Some(keys) = keys(array) else { continue };
            let mut freq: HashMap<u64, u64> = HashMap::new();
            for &k in keys.iter().filter(|&&k| k != 0) {
                *freq.entry(k).or_default() += 1;
            }
            let nonempty = freq.values().sum::<u64>() as f64 / n;
            let mean_len = (array.data_type() == &DataType::Utf8).then(|| {
                let a = array.as_string::<i32>();
                let (sum, count) = a
                    .iter()
                    .flatten()
                    .filter(|s| !s.is_empty())
                    .fold((0usize, 0usize), |(s, c), v| (s + v.chars().count(), c + 1));
                sum as f64 / count.max(1) as f64
            });
            let string_space = array.as_string_opt::<i32>().and_then(string_space);
            let ints = || keys.iter().filter(|&&k| k != 0).map(|&k| k as i64);
            let range = match array.data_type() {
                DataType::Utf8 => (0, 0),
                _ => (ints().min().unwrap_or(1), ints().max().unwrap_or(1)),
            };
            raws.push((
                field.name().clone(),
                Raw {
                    index,
                    distinct: freq.len() as u64,
                    singletons: freq.values().filter(|&&c| c == 1).count() as u64,
                    nonempty,
                    mean_len,
                    string_space,
                    range,
                    keys,
                },
            ));
        }
        // The clustering factor: known rates over Good-Turing's.
        let ratios: Vec<f64> = KNOWN_DISTINCT
            .iter()
            .filter_map(|(name, d)| {
                let (_, raw) = raws.iter().find(|(n, _)| n == name)?;
                (raw.singletons > 0).then(|| (d / REAL_ROWS) / (raw.singletons as f64 / n))
            })
            .collect();
        let clustering = if ratios.is_empty() {
            1.0
        } else {
            (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp()
        };
        let columns = raws
            .into_iter()
            .map(|(name, raw)| {
                let known = KNOWN_DISTINCT
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, d)| d / REAL_ROWS);
                let new_rate =
                    known.unwrap_or_else(|| (clustering * raw.singletons as f64 / n).min(MAX_NEW_SHARE * raw.nonempty));
                let wanted = (new_rate * (rows as f64 - n))
                    .max(0.0)
                    .min((raw.nonempty * rows as f64 - raw.distinct as f64).max(0.0));
                // Integers stay within twice the seed's range and short strings
                // have few siblings of their length: such a column can only
                // grow so far, and random draws collide.
                let capacity = raw
                    .string_space
                    .or_else(|| int_capacity(&schema.fields()[raw.index], raw.range));
                let (extra, draws) = match capacity {
                    Some(capacity) => {
                        let extra = wanted.min(0.8 * capacity);
                        (extra, -capacity * (1.0 - extra / capacity).ln())
                    }
                    None => (wanted, wanted),
                };
                let target_distinct = (raw.distinct as f64 + extra).round() as u64;
                let pairs = |w: u64| rows as f64 / w as f64 * per_window(&raw.keys, w);
                let window = WINDOWS.into_iter().find(|&w| pairs(w) * 0.8 >= draws).unwrap_or(1);
                let rename_chance = if draws > 0.0 {
                    (draws / pairs(window).max(1.0)).min(1.0)
                } else {
                    0.0
                };
                ColumnTarget {
                    name,
                    index: raw.index,
                    seed_distinct: raw.distinct,
                    seed_nonempty: raw.nonempty,
                    singletons: raw.singletons,
                    new_rate,
                    known: known.is_some(),
                    seed_mean_len: raw.mean_len,
                    target_distinct,
                    window,
                    rename_chance,
                    range: raw.range,
                }
            })
            .collect();
        Model { columns, clustering }
    }

    /// The columns that get new values.
    pub fn growing(&self) -> impl Iterator<Item = &ColumnTarget> {
        self.columns.iter().filter(|c| c.rename_chance > 0.0)
    }

    /// Renames values of `batch` (output rows `start ..`) per the model;
    /// `keep(column, value)` protects planted integer values (planted
    /// strings may be renamed; the generator counts selectivities after).
    pub fn apply(
        &self,
        batch: &RecordBatch,
        start: u64,
        seed: u64,
        keep: impl Fn(&str, i64) -> bool,
    ) -> Result<RecordBatch, arrow::error::ArrowError> {
        let mut columns = batch.columns().to_vec();
        for c in self.growing() {
            columns[c.index] = c.rename(&columns[c.index], start, seed, &keep);
        }
        RecordBatch::try_new(batch.schema(), columns)
    }
}

/// How many distinct new values [`rewrite_tail`] can make from a string
/// column's values, when that is few: values of at most [`TAIL`] characters
/// are rewritten whole, so all of one length share `36^length` values. `None`
/// when most rows hold longer values (their kept prefixes keep them apart).
fn string_space(a: &arrow::array::StringArray) -> Option<f64> {
    let lengths: Vec<usize> = a
        .iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().count())
        .collect();
    let long = lengths.iter().filter(|&&l| l > TAIL).count();
    if lengths.is_empty() || long * 2 >= lengths.len() {
        return None;
    }
    let short: HashSet<usize> = lengths.into_iter().filter(|&l| l <= TAIL).collect();
    Some(short.into_iter().map(|l| (ALPHABET.len() as f64).powi(l as i32)).sum())
}

/// The integers [`ColumnTarget::new_int`] draws new values from, for an
/// integer column with non-zero seed values in `range`; `None` for strings.
fn int_capacity(field: &arrow::datatypes::Field, range: (i64, i64)) -> Option<f64> {
    let (lo, hi) = int_bounds(field.data_type())?;
    let (bottom, top) = new_int_range(range, lo, hi);
    Some((top - bottom + 1) as f64)
}

/// The type's smallest and largest value, for the integer types modelled.
fn int_bounds(data_type: &DataType) -> Option<(i64, i64)> {
    Some(match data_type {
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => (i64::MIN, i64::MAX),
        _ => return None,
    })
}

/// New integers come from `[min, min + 2 * (max - min + 1))` of the seed's
/// non-zero values, clipped to the type's `[lo, hi]`.
fn new_int_range((min, max): (i64, i64), lo: i64, hi: i64) -> (i128, i128) {
    let span = (max as i128 - min as i128 + 1).max(1) * 2;
    let top = (min as i128 + span - 1).min(hi as i128);
    let bottom = (min as i128).max(lo as i128);
    (bottom, top.max(bottom))
}

/// A uniform draw in [0, 1) from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Characters of a string a new value rewrites.
const TAIL: usize = 8;

/// Lower-case letters and digits for rewritten string tails.
const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// `template` with its last (up to [`TAIL`]) characters replaced by ones
/// drawn from `h`: same length in characters, most likely a different value.
pub fn rewrite_tail(template: &str, h: u64) -> String {
    let chars = template.chars().count();
    let keep = chars.saturating_sub(TAIL);
    let mut out: String = template.chars().take(keep).collect();
    let mut x = h;
    for _ in keep..chars {
        out.push(ALPHABET[(x % 36) as usize] as char);
        x = mix(x);
    }
    out
}

impl ColumnTarget {
    /// The renaming decision for `value` in the window of output row `row`:
    /// the hash of the new value, or None to keep it.
    fn draw(&self, row: u64, value: u64, seed: u64) -> Option<u64> {
        let window = row / self.window;
        let key = mix(mix(seed ^ (self.index as u64).wrapping_mul(0xA24B_AED4_963E_E407)) ^ window) ^ value;
        let h = mix(key);
        (unit(h) < self.rename_chance).then(|| mix(h ^ 0x5151))
    }

    /// A new integer for a renamed value: non-zero, within twice the seed's range.
    fn new_int(&self, h: u64, lo: i64, hi: i64) -> i64 {
        let (bottom, top) = new_int_range(self.range, lo, hi);
        let width = (top - bottom + 1).max(1) as u128;
        let v = (bottom + (h as u128 % width) as i128) as i64;
        if v == 0 { if top > 0 { 1 } else { -1 } } else { v }
    }

    fn rename(&self, array: &ArrayRef, start: u64, seed: u64, keep: &dyn Fn(&str, i64) -> bool) -> ArrayRef {
        use arrow::array::PrimitiveArray;
        use arrow::datatypes::ArrowPrimitiveType;
        fn ints<T: ArrowPrimitiveType>(
            c: &ColumnTarget,
            array: &ArrayRef,
            start: u64,
            seed: u64,
            keep: &dyn Fn(&str, i64) -> bool,
        ) -> ArrayRef
        where
            T::Native: Into<i64> + TryFrom<i64>,
        {
            let a = array.as_primitive::<T>();
            let (lo, hi) = int_bounds(&T::DATA_TYPE).unwrap_or((i64::MIN, i64::MAX));
            let values: PrimitiveArray<T> = a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let v = v?;
                    let x: i64 = v.into();
                    if x == 0 || keep(&c.name, x) {
                        return Some(v);
                    }
                    match c.draw(start + i as u64, x as u64, seed) {
                        Some(h) => T::Native::try_from(c.new_int(h, lo, hi)).ok().or(Some(v)),
                        None => Some(v),
                    }
                })
                .collect();
            std::sync::Arc::new(values)
        }
        match array.data_type() {
            DataType::Int16 => ints::<Int16Type>(self, array, start, seed, keep),
            DataType::Int32 => ints::<Int32Type>(self, array, start, seed, keep),
            DataType::Int64 => ints::<Int64Type>(self, array, start, seed, keep),
            DataType::Utf8 => {
                let a = array.as_string::<i32>();
                let values: StringArray = a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let v = v?;
                        if v.is_empty() {
                            return Some(v.to_string());
                        }
                        Some(match self.draw(start + i as u64, fnv(v.as_bytes()) | 1, seed) {
                            Some(h) => rewrite_tail(v, h),
                            None => v.to_string(),
                        })
                    })
                    .collect();
                std::sync::Arc::new(values)
            }
            _ => array.clone(),
        }
    }
}

/// What the generated file holds, per modelled column, for the report.
#[derive(Debug, Clone)]
pub struct ColumnProduced {
    pub target: ColumnTarget,
    pub distinct: u64,
    pub nonempty: f64,
    pub mean_len: Option<f64>,
}

/// Counts distinct values, non-empty shares and lengths of the growing
/// columns as batches are written.
pub struct Census {
    /// Positions in [`Model::columns`] of the columns counted.
    counted: Vec<usize>,
    sets: Vec<HashSet<u64>>,
    nonempty: Vec<u64>,
    lengths: Vec<(u64, u64)>,
    rows: u64,
}

impl Census {
    pub fn new(model: &Model) -> Census {
        let counted: Vec<usize> = (0..model.columns.len())
            .filter(|&i| model.columns[i].rename_chance > 0.0)
            .collect();
        let n = counted.len();
        Census {
            counted,
            sets: vec![HashSet::new(); n],
            nonempty: vec![0; n],
            lengths: vec![(0, 0); n],
            rows: 0,
        }
    }

    pub fn add(&mut self, model: &Model, batch: &RecordBatch) {
        self.rows += batch.num_rows() as u64;
        for (slot, &i) in self.counted.iter().enumerate() {
            let array = batch.column(model.columns[i].index);
            let Some(keys) = keys(array) else { continue };
            for k in keys.into_iter().filter(|&k| k != 0) {
                self.nonempty[slot] += 1;
                self.sets[slot].insert(k);
            }
            if let Some(a) = array.as_string_opt::<i32>() {
                for v in a.iter().flatten().filter(|v| !v.is_empty()) {
                    self.lengths[slot].0 += v.chars().count() as u64;
                    self.lengths[slot].1 += 1;
                }
            }
        }
    }

    /// What was produced, per growing column.
    pub fn finish(self, model: &Model) -> Vec<ColumnProduced> {
        self.counted
            .iter()
            .enumerate()
            .map(|(slot, &i)| {
                let c = &model.columns[i];
                ColumnProduced {
                    target: c.clone(),
                    distinct: self.sets[slot].len() as u64,
                    nonempty: self.nonempty[slot] as f64 / self.rows.max(1) as f64,
                    mean_len: c
                        .seed_mean_len
                        .map(|_| self.lengths[slot].0 as f64 / self.lengths[slot].1.max(1) as f64),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewritten_tail_keeps_the_length_and_changes_the_value() {
        for s in ["http://example.com/some/path?x=1", "ab", "Привет мир, как дела"] {
            let r = rewrite_tail(s, 42);
            assert_eq!(r.chars().count(), s.chars().count());
            assert_ne!(r, s);
            assert_eq!(rewrite_tail(s, 42), r, "deterministic");
        }
        assert_eq!(rewrite_tail("D0", 42).chars().count(), 2);
    }
}
