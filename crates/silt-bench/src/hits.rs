//! Hits-like data at any size, grown from real ClickBench rows.
//!
//! Two models ([`HitsModel`]): `realistic` (the default) grows each column's
//! distinct values, keeps the seed's clustering and lays dates out along the
//! file as the real, sorted table does (see [`crate::hits_model`]);
//! `resample`, round 1's generator, described next, keeps the seed's values.
//!
//! The seed (`nano_hits.parquet`, ~25k real rows of one day) is sampled with
//! replacement; each output row is a seed row with its identifiers and time
//! perturbed so the data behaves like a larger slice of the real 100M-row
//! set: `WatchID` unique, `UserID` and `ClientIP` renamed per copy of the
//! seed (so their cardinalities grow with the row count while each keeps the
//! seed's skew), dates spread over July 2013. The sample lacks rows that
//! ClickBench filters look for, so they are planted, and columns whose
//! non-empty share differs from the real data are thinned or filled, to hit
//! the real data's selectivities ([`TARGETS`]). Everything is a function of
//! (seed, row number): the same arguments give the same file.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int16Array, Int32Array, Int64Array, RecordBatch, RecordBatchReader, StringArray,
    UInt16Array, UInt32Array,
};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{ArrowPrimitiveType, Int16Type, Int32Type, Int64Type, UInt16Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::hits_model::{Census, Model, RUN};
use crate::tpch::{GenError, ParquetLayout, write_parquet};

/// The UserID query 19 looks for.
pub const Q19_USER: i64 = 435090932899640449;

/// First day of July 2013, days since the epoch (`EventDate`).
const JULY_1_2013: u16 = 15887;

/// Rows generated per batch.
const BATCH: usize = 64 * 1024;

/// Salt of the draw that places a `realistic` run in the seed.
const RUN_SALT: u64 = 0x005E_ED0F_2A11;

/// Selectivities of the real data set that the generator reproduces: the
/// filter, and the share of rows it matches there.
pub const TARGETS: [(&str, f64); 7] = [
    ("AdvEngineID <> 0", 0.014),
    ("MobilePhoneModel <> ''", 0.02),
    ("SearchPhrase <> ''", 0.13),
    ("URL LIKE '%google%'", 0.0001),
    (
        "Title LIKE '%Google%' AND URL NOT LIKE '%.google.%' AND SearchPhrase <> '' (q22)",
        0.0002,
    ),
    ("CounterID = 62", 0.05),
    ("UserID = 435090932899640449 (q19)", 0.0),
];

/// How the generator grows the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HitsModel {
    /// Distinct counts, clustering and drift of the real table ([`crate::hits_model`]).
    #[default]
    Realistic,
    /// Seed rows sampled with replacement, ids renamed per copy (round 1's).
    Resample,
}

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    /// Each [`TARGETS`] filter's share of the rows.
    pub selectivities: Vec<Selectivity>,
    /// Per growing column, the model's target and what was produced
    /// (`realistic` only).
    pub columns: Vec<crate::hits_model::ColumnProduced>,
    /// The model's clustering factor (`realistic` only).
    pub clustering: Option<f64>,
}

/// One filter's share of the generated rows.
#[derive(Debug, Clone)]
pub struct Selectivity {
    pub filter: &'static str,
    pub target: f64,
    pub matched: u64,
    pub rows: u64,
}

/// The seed rows, whole, and what the generator derives from them.
struct Seed {
    rows: RecordBatch,
    /// Non-empty values to fill `MobilePhoneModel` / `SearchPhrase` and
    /// non-zero `AdvEngineID`s, drawn from the seed.
    phones: Vec<String>,
    phrases: Vec<String>,
    engines: Vec<i16>,
    /// Share of seed rows matching each thinned filter.
    adv_rate: f64,
    phone_rate: f64,
    phrase_rate: f64,
    q22_rate: f64,
}

/// A per-row source of random numbers: a function of (seed, row) only.
struct Dice(u64);

impl Dice {
    fn new(seed: u64, row: u64) -> Self {
        Dice(mix(seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// SplitMix64's finalizer: a bijection on u64 with good avalanche (also the
/// realistic model's hash, `crate::hits_model`).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Writes `rows` hits-like rows grown from `seed_file` to `out` with
/// `model`, and returns what it wrote: each [`TARGETS`] filter's share, and
/// for `realistic` each growing column's distinct count against its target.
pub fn generate(
    seed_file: &Path,
    out: &Path,
    rows: u64,
    seed: u64,
    layout: ParquetLayout,
    model: HitsModel,
) -> Result<Generated, GenError> {
    let seed_rows = Seed::read(seed_file)?;
    let fitted = (model == HitsModel::Realistic).then(|| Model::fit(&seed_rows.rows, rows));
    let mut census = fitted.as_ref().map(Census::new);
    let mut counts = [0u64; TARGETS.len()];
    let schema = seed_rows.rows.schema();
    let batches = (0..rows.div_ceil(BATCH as u64)).map(|b| {
        let start = b * BATCH as u64;
        let n = (rows - start).min(BATCH as u64) as usize;
        let arrow = |source| GenError::Arrow { table: "hits", source };
        let mut batch = seed_rows.batch(start, n, rows, seed, model).map_err(arrow)?;
        if let (Some(fitted), Some(census)) = (&fitted, census.as_mut()) {
            batch = fitted
                .apply(&batch, start, seed, |column, v| column == "UserID" && v == Q19_USER)
                .map_err(arrow)?;
            census.add(fitted, &batch);
        }
        count_matches(&batch, &mut counts);
        Ok(batch)
    });
    write_parquet(out, schema, batches, layout)?;
    Ok(Generated {
        selectivities: TARGETS
            .iter()
            .zip(counts)
            .map(|(&(filter, target), matched)| Selectivity {
                filter,
                target,
                matched,
                rows,
            })
            .collect(),
        columns: match (census, &fitted) {
            (Some(c), Some(f)) => c.finish(f),
            _ => Vec::new(),
        },
        clustering: fitted.map(|f| f.clustering),
    })
}

/// Every row of the Parquet file at `path`, as one batch.
fn read_whole(path: &Path) -> Result<RecordBatch, GenError> {
    let file = std::fs::File::open(path).map_err(|e| seed_error(path, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| seed_error(path, e))?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().map_err(|e| seed_error(path, e))?;
    concat_batches(&schema, &batches).map_err(|e| seed_error(path, e))
}

fn seed_error(path: &Path, reason: impl ToString) -> GenError {
    GenError::Seed {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

impl Seed {
    fn read(path: &Path) -> Result<Self, GenError> {
        let rows = read_whole(path)?;
        if rows.num_rows() == 0 {
            return Err(seed_error(path, "no rows"));
        }
        // The same typed readers as the generator's (a wrong type is an error, not a panic).
        let strings = |name: &str| strings(&rows, name).map_err(|e| seed_error(path, e));
        let phones_all = strings("MobilePhoneModel")?;
        let phrases_all = strings("SearchPhrase")?;
        let titles = strings("Title")?;
        let urls = strings("URL")?;
        let adv: Vec<i16> = values::<Int16Type>(&rows, "AdvEngineID").map_err(|e| seed_error(path, e))?;
        let n = rows.num_rows() as f64;
        let share = |m: usize| m as f64 / n;
        let q22 = (0..rows.num_rows())
            .filter(|&i| is_q22(&titles[i], &urls[i], &phrases_all[i]))
            .count();
        Ok(Seed {
            adv_rate: share(adv.iter().filter(|&&a| a != 0).count()),
            phone_rate: share(phones_all.iter().filter(|p| !p.is_empty()).count()),
            phrase_rate: share(phrases_all.iter().filter(|p| !p.is_empty()).count()),
            q22_rate: share(q22),
            engines: adv.into_iter().filter(|&a| a != 0).collect(),
            phones: phones_all.into_iter().filter(|p| !p.is_empty()).collect(),
            phrases: phrases_all.into_iter().filter(|p| !p.is_empty()).collect(),
            rows,
        })
    }

    /// Output rows `start .. start + n` of `total`.
    fn batch(
        &self,
        start: u64,
        n: usize,
        total: u64,
        seed: u64,
        model: HitsModel,
    ) -> Result<RecordBatch, arrow::error::ArrowError> {
        let seed_len = self.rows.num_rows() as u64;
        let picks: Vec<u32> = (start..start + n as u64)
            .map(|row| match model {
                HitsModel::Resample => Dice::new(seed, row).below(seed_len) as u32,
                // Runs of consecutive seed rows: each session stays whole.
                HitsModel::Realistic => {
                    let run_start = Dice::new(seed ^ RUN_SALT, row / RUN).below(seed_len);
                    ((run_start + row % RUN) % seed_len) as u32
                }
            })
            .collect();
        let mut batch = take_record_batch(&self.rows, &UInt32Array::from(picks))?;
        let mut cols = Columns::of(&batch)?;
        for i in 0..n {
            self.perturb(&mut cols, i, start + i as u64, total, seed, model);
        }
        cols.write_into(&mut batch)?;
        Ok(batch)
    }

    /// Rewrites output row `row` (slot `i` of the batch).
    fn perturb(&self, c: &mut Columns, i: usize, row: u64, total: u64, seed: u64, model: HitsModel) {
        // Draws for perturbing start after the one that picked the seed row.
        let mut dice = Dice::new(seed, row);
        dice.next();
        c.watch_id[i] = mix(row ^ seed) as i64;
        let day = match model {
            HitsModel::Resample => {
                let copy = row / self.rows.num_rows() as u64;
                if copy > 0 {
                    let salt = mix(copy ^ seed.rotate_left(17));
                    c.user_id[i] ^= (salt >> 2) as i64;
                    c.client_ip[i] ^= (salt >> 33) as i32;
                }
                dice.below(31) as u16
            }
            // Sorted by date along the file, a run on one day (the model renames ids).
            HitsModel::Realistic => ((row / RUN * RUN) * 31 / total.max(1)) as u16,
        };
        let shift = (i64::from(JULY_1_2013 + day) - i64::from(c.event_date[i])) * 86_400;
        c.event_date[i] = JULY_1_2013 + day;
        c.event_time[i] += shift + dice.below(3601) as i64 - 1800;
        rebalance(
            &mut dice,
            self.adv_rate,
            TARGETS[0].1,
            c.adv[i] != 0,
            &self.engines,
            |v| c.adv[i] = v.unwrap_or(0),
        );
        rebalance(
            &mut dice,
            self.phone_rate,
            TARGETS[1].1,
            !c.phone[i].is_empty(),
            &self.phones,
            |v| c.phone[i] = v.unwrap_or_default(),
        );
        rebalance(
            &mut dice,
            self.phrase_rate,
            TARGETS[2].1,
            !c.phrase[i].is_empty(),
            &self.phrases,
            |v| c.phrase[i] = v.unwrap_or_default(),
        );
        if c.title[i].contains("Google") && !dice.chance(TARGETS[4].1 / self.q22_rate.max(f64::MIN_POSITIVE)) {
            c.title[i] = c.title[i].replace("Google", "Gooogle");
        }
        if dice.chance(TARGETS[3].1) {
            // Half with a ".google." host, half without (query 22 tells them apart).
            c.url[i] = if dice.chance(0.5) {
                format!("http://www.google.com/search?q={}&id={row}", c.phrase[i])
            } else {
                format!("https://google.ru/url?sa=t&id={row}")
            };
        }
        if dice.chance(TARGETS[5].1) {
            c.counter_id[i] = 62;
        }
        // A handful of rows (five, evenly spread) carry query 19's user.
        let every = (total / 5).max(1);
        if row % every == every / 2 {
            c.user_id[i] = Q19_USER;
        }
    }
}

/// Moves a column's share of non-empty rows from the seed's `rate` to
/// `target`: thins non-empty rows, or fills empty ones from `pool`.
fn rebalance<T: Clone>(
    dice: &mut Dice,
    rate: f64,
    target: f64,
    present: bool,
    pool: &[T],
    set: impl FnOnce(Option<T>),
) {
    if present && rate > target {
        if !dice.chance(target / rate) {
            set(None);
        }
    } else if !present && rate < target && !pool.is_empty() && dice.chance((target - rate) / (1.0 - rate)) {
        set(Some(pool[dice.below(pool.len() as u64) as usize].clone()));
    }
}

fn is_q22(title: &str, url: &str, phrase: &str) -> bool {
    title.contains("Google") && !url.contains(".google.") && !phrase.is_empty()
}

fn column(batch: &RecordBatch, name: &str) -> Result<ArrayRef, arrow::error::ArrowError> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| arrow::error::ArrowError::SchemaError(format!("the seed has no column {name}")))
}

/// The columns the generator rewrites, as plain vectors.
struct Columns {
    watch_id: Vec<i64>,
    user_id: Vec<i64>,
    client_ip: Vec<i32>,
    event_date: Vec<u16>,
    event_time: Vec<i64>,
    counter_id: Vec<i32>,
    adv: Vec<i16>,
    phone: Vec<String>,
    phrase: Vec<String>,
    title: Vec<String>,
    url: Vec<String>,
}

fn values<T: ArrowPrimitiveType>(batch: &RecordBatch, name: &str) -> Result<Vec<T::Native>, arrow::error::ArrowError> {
    let c = column(batch, name)?;
    c.as_primitive_opt::<T>().map(|a| a.values().to_vec()).ok_or_else(|| {
        arrow::error::ArrowError::SchemaError(format!("column {name} is {}, not {}", c.data_type(), T::DATA_TYPE))
    })
}

fn strings(batch: &RecordBatch, name: &str) -> Result<Vec<String>, arrow::error::ArrowError> {
    let c = column(batch, name)?;
    let a = c.as_string_opt::<i32>().ok_or_else(|| {
        arrow::error::ArrowError::SchemaError(format!("column {name} is {}, not Utf8", c.data_type()))
    })?;
    Ok(a.iter().map(|v| v.unwrap_or("").to_string()).collect())
}

impl Columns {
    fn of(b: &RecordBatch) -> Result<Self, arrow::error::ArrowError> {
        Ok(Columns {
            watch_id: values::<Int64Type>(b, "WatchID")?,
            user_id: values::<Int64Type>(b, "UserID")?,
            client_ip: values::<Int32Type>(b, "ClientIP")?,
            event_date: values::<UInt16Type>(b, "EventDate")?,
            event_time: values::<Int64Type>(b, "EventTime")?,
            counter_id: values::<Int32Type>(b, "CounterID")?,
            adv: values::<Int16Type>(b, "AdvEngineID")?,
            phone: strings(b, "MobilePhoneModel")?,
            phrase: strings(b, "SearchPhrase")?,
            title: strings(b, "Title")?,
            url: strings(b, "URL")?,
        })
    }

    /// Replaces the batch's columns by these.
    fn write_into(self, batch: &mut RecordBatch) -> Result<(), arrow::error::ArrowError> {
        let text = |v: Vec<String>| Arc::new(StringArray::from(v)) as ArrayRef;
        let replaced: [(&str, ArrayRef); 11] = [
            ("WatchID", Arc::new(Int64Array::from(self.watch_id))),
            ("UserID", Arc::new(Int64Array::from(self.user_id))),
            ("ClientIP", Arc::new(Int32Array::from(self.client_ip))),
            ("EventDate", Arc::new(UInt16Array::from(self.event_date))),
            ("EventTime", Arc::new(Int64Array::from(self.event_time))),
            ("CounterID", Arc::new(Int32Array::from(self.counter_id))),
            ("AdvEngineID", Arc::new(Int16Array::from(self.adv))),
            ("MobilePhoneModel", text(self.phone)),
            ("SearchPhrase", text(self.phrase)),
            ("Title", text(self.title)),
            ("URL", text(self.url)),
        ];
        let schema = batch.schema();
        let mut columns = batch.columns().to_vec();
        for (name, array) in replaced {
            let idx = schema.index_of(name)?;
            columns[idx] = array;
        }
        *batch = RecordBatch::try_new(schema, columns)?;
        Ok(())
    }
}

/// Adds the generated batch's matches of each [`TARGETS`] filter to `counts`.
fn count_matches(batch: &RecordBatch, counts: &mut [u64; TARGETS.len()]) {
    let Ok(c) = Columns::of(batch) else { return };
    for i in 0..batch.num_rows() {
        let hits = [
            c.adv[i] != 0,
            !c.phone[i].is_empty(),
            !c.phrase[i].is_empty(),
            c.url[i].contains("google"),
            is_q22(&c.title[i], &c.url[i], &c.phrase[i]),
            c.counter_id[i] == 62,
            c.user_id[i] == Q19_USER,
        ];
        for (n, hit) in counts.iter_mut().zip(hits) {
            *n += u64::from(hit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generating again with the same arguments writes the same file as `out`.
    fn assert_same_file_again(out: &Path, again: &Path, rows: u64, seed: u64, model: HitsModel) {
        generate(&seed_file(), again, rows, seed, ParquetLayout::default(), model).unwrap();
        assert_eq!(std::fs::read(out).unwrap(), std::fs::read(again).unwrap());
    }

    fn seed_file() -> std::path::PathBuf {
        crate::files::source_dir(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/nano_hits.parquet")
    }

    #[test]
    fn grows_unique_watch_ids_and_more_users_with_planted_rows() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("hits.parquet");
        let rows = 100_000;
        let sel = generate(
            &seed_file(),
            &out,
            rows,
            7,
            ParquetLayout::default(),
            HitsModel::Resample,
        )
        .unwrap()
        .selectivities;
        let all = read_whole(&out).unwrap();
        assert_eq!(all.num_rows() as u64, rows);
        let ids: std::collections::HashSet<i64> = values::<Int64Type>(&all, "WatchID").unwrap().into_iter().collect();
        assert_eq!(ids.len() as u64, rows, "WatchID is unique");
        let users: std::collections::HashSet<i64> = values::<Int64Type>(&all, "UserID").unwrap().into_iter().collect();
        assert!(users.len() > 3 * 1885, "users grow with the rows: {}", users.len());
        let by = |f: &str| sel.iter().find(|s| s.filter.starts_with(f)).unwrap().matched;
        assert_eq!(by("UserID"), 5);
        assert!(by("URL LIKE") > 0 && by("CounterID") > rows / 50);
        let share = |f: &str| by(f) as f64 / rows as f64;
        assert!((share("SearchPhrase") - 0.13).abs() < 0.01, "{}", share("SearchPhrase"));
        assert!((share("AdvEngineID") - 0.014).abs() < 0.004, "{}", share("AdvEngineID"));
        assert_same_file_again(&out, &dir.path().join("again.parquet"), rows, 7, HitsModel::Resample);
    }

    #[test]
    fn the_realistic_model_reaches_its_statistics_and_keeps_sessions_and_dates_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("hits.parquet");
        let rows = 200_000;
        let generated = generate(
            &seed_file(),
            &out,
            rows,
            3,
            ParquetLayout::default(),
            HitsModel::Realistic,
        )
        .unwrap();
        let within = |got: f64, want: f64| (got - want).abs() <= 0.2 * want;
        let names: Vec<&str> = generated.columns.iter().map(|c| c.target.name.as_str()).collect();
        for known in ["UserID", "SearchPhrase", "URL", "Title", "Referer"] {
            assert!(names.contains(&known), "{known} grows: {names:?}");
        }
        // The three columns the generator rebalances to the real selectivities.
        let rebalanced = ["SearchPhrase", "MobilePhoneModel", "AdvEngineID"];
        for c in &generated.columns {
            let t = &c.target;
            if t.target_distinct >= 1_000 {
                assert!(
                    within(c.distinct as f64, t.target_distinct as f64),
                    "{}: {} distinct, target {}",
                    t.name,
                    c.distinct,
                    t.target_distinct
                );
            }
            if !rebalanced.contains(&t.name.as_str()) {
                assert!(
                    within(c.nonempty, t.seed_nonempty),
                    "{}: non-empty {} vs {}",
                    t.name,
                    c.nonempty,
                    t.seed_nonempty
                );
            }
            if let (Some(got), Some(want)) = (c.mean_len, t.seed_mean_len) {
                assert!(within(got, want), "{}: mean length {got} vs {want}", t.name);
            }
        }
        let user = &generated.columns[names.iter().position(|n| *n == "UserID").unwrap()];
        assert!(user.target.known && user.distinct > 15 * 1885, "{}", user.distinct);
        let by = |f: &str| {
            generated
                .selectivities
                .iter()
                .find(|s| s.filter.starts_with(f))
                .unwrap()
                .matched
        };
        assert_eq!(by("UserID"), 5);
        assert!((by("SearchPhrase") as f64 / rows as f64 - 0.13).abs() < 0.01);

        // Sessions stay together and dates ascend along the file, as in the sorted real table.
        let all = read_whole(&out).unwrap();
        let users = values::<Int64Type>(&all, "UserID").unwrap();
        let changes = users.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(
            changes < users.len() / 2,
            "{changes} user changes in {} rows",
            users.len()
        );
        let dates = values::<UInt16Type>(&all, "EventDate").unwrap();
        assert!(dates.windows(2).all(|w| w[0] <= w[1]), "dates ascend");
        assert_eq!((dates[0], dates[dates.len() - 1]), (JULY_1_2013, JULY_1_2013 + 30));
        assert_same_file_again(&out, &dir.path().join("again.parquet"), rows, 3, HitsModel::Realistic);
    }
}
