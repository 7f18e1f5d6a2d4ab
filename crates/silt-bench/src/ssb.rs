//! Star Schema Benchmark data, derived from generated TPC-H.
//!
//! SSB (O'Neil et al.) is TPC-H denormalized into a star: `lineorder` is
//! `lineitem` joined with `orders` (and `partsupp` for the supply cost), and
//! the dimensions `customer`, `supplier`, `part` and `date` carry the
//! attributes the 13 queries filter on. `ssb-dbgen` is a C program not
//! available here, so the tables are derived with DataFusion SQL from the
//! `tpchgen` tables of the same scale factor (the TPC-H files are generated
//! into [`scratch_dir`] once and reused). Row counts are SSB's: `lineorder`
//! ~6M x SF, `customer` 150K x SF, `supplier` 10K x SF, `part` 200K x SF
//! (SSB grows `part` with the log of SF; here it is TPC-H's), `date` the 2,557
//! days of 1992-1998. Attribute domains follow `ssb-dbgen`, so the queries'
//! and the skewed workload's constants select what they select there:
//! - `c_city`/`s_city`: the nation name's first 9 characters, space-padded,
//!   then a digit (here the key modulo 10: `UNITED KI1`);
//! - `p_mfgr` `MFGR#m` (1-5), `p_category` `MFGR#mn` (from TPC-H's
//!   `Brand#mn`), `p_brand1` `MFGR#mn` + 1..40 (from the part key);
//! - `lo_orderdate`/`lo_commitdate`/`d_datekey` as `yyyymmdd` integers,
//!   `lo_discount`/`lo_tax` in percent, prices truncated to integers and
//!   `lo_revenue = extendedprice * (100 - discount) / 100`.

use std::path::{Path, PathBuf};

use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::tpch::{self, GenError, ParquetLayout};

/// The five SSB tables.
pub const TABLES: [&str; 5] = ["lineorder", "customer", "supplier", "part", "date"];

/// Where table `table` is written under `dir`.
pub fn table_file(dir: &Path, table: &str) -> PathBuf {
    tpch::table_file(dir, table)
}

/// The SELECT deriving each SSB table from the TPC-H tables.
fn derivation(table: &str) -> &'static str {
    match table {
        "lineorder" => {
            "SELECT CAST(l_orderkey AS INT) AS lo_orderkey, CAST(l_linenumber AS INT) AS lo_linenumber, \
             CAST(o_custkey AS INT) AS lo_custkey, CAST(l_partkey AS INT) AS lo_partkey, \
             CAST(l_suppkey AS INT) AS lo_suppkey, CAST(to_char(o_orderdate, '%Y%m%d') AS INT) AS lo_orderdate, \
             o_orderpriority AS lo_orderpriority, CAST(o_shippriority AS VARCHAR) AS lo_shippriority, \
             CAST(l_quantity AS INT) AS lo_quantity, CAST(l_extendedprice AS INT) AS lo_extendedprice, \
             CAST(o_totalprice AS INT) AS lo_ordtotalprice, CAST(l_discount * 100 AS INT) AS lo_discount, \
             CAST(CAST(l_extendedprice AS INT) * (100 - CAST(l_discount * 100 AS INT)) / 100 AS INT) AS lo_revenue, \
             CAST(ps_supplycost AS INT) AS lo_supplycost, CAST(l_tax * 100 AS INT) AS lo_tax, \
             CAST(to_char(l_commitdate, '%Y%m%d') AS INT) AS lo_commitdate, l_shipmode AS lo_shipmode \
             FROM lineitem JOIN orders ON l_orderkey = o_orderkey \
             JOIN partsupp ON l_partkey = ps_partkey AND l_suppkey = ps_suppkey \
             ORDER BY lo_orderkey, lo_linenumber"
        }
        "customer" => {
            "SELECT CAST(c_custkey AS INT) AS c_custkey, c_name, c_address, \
             concat(rpad(substr(n_name, 1, 9), 9, ' '), CAST(c_custkey % 10 AS VARCHAR)) AS c_city, \
             n_name AS c_nation, r_name AS c_region, c_phone, c_mktsegment \
             FROM customer JOIN nation ON c_nationkey = n_nationkey JOIN region ON n_regionkey = r_regionkey \
             ORDER BY c_custkey"
        }
        "supplier" => {
            "SELECT CAST(s_suppkey AS INT) AS s_suppkey, s_name, s_address, \
             concat(rpad(substr(n_name, 1, 9), 9, ' '), CAST(s_suppkey % 10 AS VARCHAR)) AS s_city, \
             n_name AS s_nation, r_name AS s_region, s_phone \
             FROM supplier JOIN nation ON s_nationkey = n_nationkey JOIN region ON n_regionkey = r_regionkey \
             ORDER BY s_suppkey"
        }
        "part" => {
            "SELECT CAST(p_partkey AS INT) AS p_partkey, p_name, concat('MFGR#', substr(p_mfgr, 14, 1)) AS p_mfgr, \
             concat('MFGR#', substr(p_brand, 7, 2)) AS p_category, \
             concat('MFGR#', substr(p_brand, 7, 2), CAST(1 + p_partkey % 40 AS VARCHAR)) AS p_brand1, \
             split_part(p_name, ' ', 1) AS p_color, p_type, CAST(p_size AS INT) AS p_size, p_container \
             FROM part ORDER BY p_partkey"
        }
        _ => {
            "SELECT CAST(to_char(d, '%Y%m%d') AS INT) AS d_datekey, to_char(d, '%B %-d, %Y') AS d_date, \
             to_char(d, '%A') AS d_dayofweek, to_char(d, '%B') AS d_month, \
             CAST(date_part('year', d) AS INT) AS d_year, \
             CAST(date_part('year', d) * 100 + date_part('month', d) AS INT) AS d_yearmonthnum, \
             to_char(d, '%b%Y') AS d_yearmonth, CAST(date_part('dow', d) + 1 AS INT) AS d_daynuminweek, \
             CAST(date_part('day', d) AS INT) AS d_daynuminmonth, CAST(date_part('doy', d) AS INT) AS d_daynuminyear, \
             CAST(date_part('month', d) AS INT) AS d_monthnuminyear, \
             CAST((date_part('doy', d) - 1) / 7 + 1 AS INT) AS d_weeknuminyear, \
             CASE WHEN date_part('month', d) IN (12, 1, 2) THEN 'Winter' \
                  WHEN date_part('month', d) IN (3, 4, 5) THEN 'Spring' \
                  WHEN date_part('month', d) IN (6, 7, 8) THEN 'Summer' ELSE 'Fall' END AS d_sellingseason, \
             CASE WHEN date_part('dow', d) = 6 THEN '1' ELSE '0' END AS d_lastdayinweekfl, \
             CASE WHEN date_part('month', d + INTERVAL '1 day') <> date_part('month', d) THEN '1' ELSE '0' END \
                  AS d_lastdayinmonthfl, \
             '0' AS d_holidayfl, \
             CASE WHEN date_part('dow', d) BETWEEN 1 AND 5 THEN '1' ELSE '0' END AS d_weekdayfl \
             FROM (SELECT CAST(unnest(range(DATE '1992-01-01', DATE '1999-01-01', INTERVAL '1 day')) AS DATE) AS d) \
             ORDER BY d_datekey"
        }
    }
}

/// Where the TPC-H tables the SSB tables are derived from are generated: a
/// sibling of `dir` (`<dir>-tpch`), so `dir` holds only the SSB tables.
pub fn scratch_dir(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push("-tpch");
    dir.with_file_name(name)
}

/// Generates the SSB tables at scale factor `sf` under `dir` (see
/// [`table_file`]); tables already there are kept. Returns those written.
/// Blocking: DataFusion runs on a runtime of its own, on a thread of its
/// own, so callers on an async runtime may call it too.
pub fn generate(dir: &Path, sf: f64, layout: ParquetLayout) -> Result<Vec<&'static str>, GenError> {
    let missing: Vec<&'static str> = TABLES.into_iter().filter(|t| !table_file(dir, t).exists()).collect();
    if missing.is_empty() {
        return Ok(missing);
    }
    let tpch_dir = scratch_dir(dir);
    tpch::generate(&tpch_dir, sf, layout)?;
    let dir = dir.to_path_buf();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|source| GenError::Io {
                        path: dir.clone(),
                        source,
                    })?;
                runtime.block_on(derive_all(&tpch_dir, &dir, &missing, layout))
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })?;
    Ok(missing)
}

async fn derive_all(
    tpch_dir: &Path,
    dir: &Path,
    tables: &[&'static str],
    layout: ParquetLayout,
) -> Result<(), GenError> {
    let ctx = SessionContext::new();
    for t in tpch::TABLES {
        let path = tpch::table_file(tpch_dir, t);
        ctx.register_parquet(t, path.to_string_lossy().as_ref(), ParquetReadOptions::default())
            .await
            .map_err(|e| derive_error(t, e))?;
    }
    for &table in tables {
        let df = ctx.sql(derivation(table)).await.map_err(|e| derive_error(table, e))?;
        let schema = std::sync::Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await.map_err(|e| derive_error(table, e))?;
        tpch::write_parquet(&table_file(dir, table), schema, batches.into_iter().map(Ok), layout)?;
    }
    Ok(())
}

fn derive_error(table: &'static str, e: datafusion::error::DataFusionError) -> GenError {
    GenError::Arrow {
        table,
        source: datafusion::arrow::error::ArrowError::ExternalError(Box::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Int32Type;

    #[test]
    fn derived_tables_have_ssb_domains() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ssb");
        let written = generate(&dir, 0.01, ParquetLayout::default()).unwrap();
        assert_eq!(written, TABLES);
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let ctx = SessionContext::new();
            for t in TABLES {
                let path = table_file(&dir, t);
                ctx.register_parquet(t, path.to_string_lossy().as_ref(), ParquetReadOptions::default())
                    .await
                    .unwrap();
            }
            let one = |sql: &'static str| {
                let ctx = ctx.clone();
                async move { ctx.sql(sql).await.unwrap().collect().await.unwrap() }
            };
            let days =
                one("SELECT count(*), min(d_datekey), max(d_datekey), count(DISTINCT d_yearmonthnum) FROM date").await;
            let row = &days[0];
            assert_eq!(
                row.column(0)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
                2557
            );
            assert_eq!(row.column(1).as_primitive::<Int32Type>().value(0), 19920101);
            assert_eq!(row.column(2).as_primitive::<Int32Type>().value(0), 19981231);
            assert_eq!(
                row.column(3)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
                84
            );
            // Every order date is a date key; discounts are 0..10 percent.
            let orphans = one(
                "SELECT count(*) FROM lineorder LEFT JOIN date ON lo_orderdate = d_datekey WHERE d_datekey IS NULL",
            )
            .await;
            assert_eq!(
                orphans[0]
                    .column(0)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
                0
            );
            let domains = one("SELECT min(lo_discount), max(lo_discount), \
                 (SELECT count(*) FROM customer WHERE c_city = 'UNITED KI1') AS cities, \
                 (SELECT count(*) FROM part WHERE p_brand1 BETWEEN 'MFGR#2221' AND 'MFGR#2228') AS brands, \
                 (SELECT count(DISTINCT p_category) FROM part) AS categories FROM lineorder")
            .await;
            let r = &domains[0];
            assert_eq!(r.column(0).as_primitive::<Int32Type>().value(0), 0);
            assert_eq!(r.column(1).as_primitive::<Int32Type>().value(0), 10);
            for c in 2..4 {
                let n = r.column(c).as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                assert!(!n.is_null(0) && n.value(0) > 0, "column {c} selects nothing");
            }
            assert_eq!(
                r.column(4)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
                25
            );
        });
    }
}
