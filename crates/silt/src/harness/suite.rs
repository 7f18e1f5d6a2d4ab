//! What a benchmark suite reads and runs: its tables (as buckets of the
//! loopback object store), views and queries, and the local copy of the
//! files that the reference and DuckDB read.

use std::path::{Path, PathBuf};

use anyhow::Context;
use silt_bench::compare::break_ties;
use silt_bench::results::{DataSet, QuerySpec};
use silt_bench::{hits, ssb, tpch};

/// One table: the objects under `s3://{bucket}/{prefix}`.
#[derive(Debug, Clone)]
pub struct TableSpec {
    pub name: String,
    pub bucket: String,
    /// Key prefix inside the bucket: a folder (`lineitem/`) or one object (`hits.parquet`).
    pub prefix: String,
    pub binary_as_string: bool,
}

/// A suite ready to run.
#[derive(Debug, Clone)]
pub struct Suite {
    /// `clickbench`, `tpch` or `smoke`.
    pub kind: String,
    pub tables: Vec<TableSpec>,
    /// (name, SELECT) over the tables.
    pub views: Vec<(String, String)>,
    pub queries: Vec<QuerySpec>,
    /// Folder with one sub-folder per bucket: what is uploaded, and what the
    /// reference and DuckDB read directly.
    pub src: PathBuf,
    pub data: DataSet,
}

impl Suite {
    /// Local path of a table (its folder or file) under [`Suite::src`].
    pub fn local_path(&self, t: &TableSpec) -> PathBuf {
        self.src.join(&t.bucket).join(&t.prefix)
    }

    /// The buckets the tables live in, each once, sorted.
    pub fn buckets(&self) -> Vec<String> {
        let mut b: Vec<String> = self.tables.iter().map(|t| t.bucket.clone()).collect();
        b.sort();
        b.dedup();
        b
    }

    /// `CREATE EXTERNAL TABLE` / `CREATE VIEW` statements registering every
    /// table at `location(table)` in a DataFusion context.
    pub fn ddl(&self, location: impl Fn(&TableSpec) -> String) -> Vec<String> {
        let tables = self.tables.iter().map(|t| {
            let options = if t.binary_as_string {
                " OPTIONS ('binary_as_string' 'true')"
            } else {
                ""
            };
            format!(
                "CREATE EXTERNAL TABLE \"{}\" STORED AS PARQUET LOCATION '{}'{options}",
                t.name,
                location(t)
            )
        });
        let views = self
            .views
            .iter()
            .map(|(name, select)| format!("CREATE VIEW \"{name}\" AS {select}"));
        tables.chain(views).collect()
    }
}

/// The SELECT of ClickBench's `hits` view over `hits_raw` (raw Int64 times as timestamps).
fn hits_view(shared: &Path) -> anyhow::Result<String> {
    let path = shared.join("bench/clickbench/datafusion_create.sql");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let marker = "CREATE VIEW hits AS";
    let start = text
        .find(marker)
        .with_context(|| format!("{} has no `{marker}`", path.display()))?;
    Ok(text[start + marker.len()..].trim().trim_end_matches(';').to_string())
}

/// Reads `ids` from `dir` (file `{prefix}{id:02}.sql`), each made deterministic
/// for comparison by breaking LIMIT ties on every output column (the column
/// count comes from the reference run, so it is filled in later).
pub fn read_queries(dir: &Path, ids: &[u32], prefix: &str) -> anyhow::Result<Vec<QuerySpec>> {
    ids.iter()
        .map(|id| {
            let path = dir.join(format!("q{id:02}.sql"));
            let sql = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            Ok(QuerySpec {
                id: format!("{prefix}{id:02}"),
                sql,
            })
        })
        .collect()
}

/// Rewrites each query with its ties broken, given its output column count.
pub fn with_ties_broken(q: &QuerySpec, columns: usize) -> QuerySpec {
    QuerySpec {
        id: q.id.clone(),
        sql: break_ties(&q.sql, columns),
    }
}

fn parquet_bytes(dir: &Path) -> (usize, u64) {
    let files = silt_bench::files::files_with_extension(dir, "parquet");
    let bytes = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    (files.len(), bytes)
}

/// ClickBench over hits-like data of `rows` rows under `data_dir`
/// (generated once with `model`; an existing file is used as it is).
pub fn clickbench(
    shared: &Path,
    data_dir: &Path,
    rows: u64,
    model: hits::HitsModel,
    ids: &[u32],
) -> anyhow::Result<Suite> {
    let src = data_dir.join("src");
    let file = src.join("hits").join("hits.parquet");
    if !file.exists() {
        let seed = shared.join("data/nano_hits.parquet");
        println!("Generating {rows} hits-like rows into {} (once) ...", file.display());
        hits::generate(&seed, &file, rows, 1, tpch::ParquetLayout::default(), model)
            .with_context(|| format!("generating {}", file.display()))?;
    }
    let (files, parquet_bytes) = parquet_bytes(&src);
    Ok(Suite {
        kind: "clickbench".into(),
        tables: vec![TableSpec {
            name: "hits_raw".into(),
            bucket: "hits".into(),
            prefix: "hits.parquet".into(),
            binary_as_string: true,
        }],
        views: vec![("hits".into(), hits_view(shared)?)],
        queries: read_queries(&shared.join("bench/clickbench/queries"), ids, "q")?,
        src,
        data: DataSet {
            description: format!("hits-like ({model:?} model), {rows} rows"),
            rows,
            files,
            parquet_bytes,
        },
    })
}

/// One table per name, each the folder `{name}/` of `bucket`.
fn folder_tables(bucket: &str, names: &[&str]) -> Vec<TableSpec> {
    names
        .iter()
        .map(|t| TableSpec {
            name: (*t).into(),
            bucket: bucket.into(),
            prefix: format!("{t}/"),
            binary_as_string: false,
        })
        .collect()
}

/// TPC-H at scale factor `sf` under `data_dir` (generated once).
pub fn tpch(shared: &Path, data_dir: &Path, sf: f64, ids: &[u32]) -> anyhow::Result<Suite> {
    let src = data_dir.join("src");
    let bucket = src.join("tpch");
    if tpch::TABLES.iter().any(|t| !tpch::table_file(&bucket, t).exists()) {
        println!("Generating TPC-H SF {sf} into {} (once) ...", bucket.display());
        tpch::generate(&bucket, sf, tpch::ParquetLayout::default()).context("generating TPC-H")?;
    }
    let (files, parquet_bytes) = parquet_bytes(&src);
    Ok(Suite {
        kind: "tpch".into(),
        tables: folder_tables("tpch", &tpch::TABLES),
        views: Vec::new(),
        queries: read_queries(&shared.join("bench/tpch/queries"), ids, "q")?,
        src,
        data: DataSet {
            description: format!("TPC-H SF {sf}"),
            rows: (sf * 6_000_000.0) as u64,
            files,
            parquet_bytes,
        },
    })
}

/// SSB at scale factor `sf` under `data_dir` (derived from TPC-H, generated
/// once), with the 13 queries of `../shared/bench/ssb/queries` named in
/// `names` (`1.1` ... `4.3`).
pub fn ssb(shared: &Path, data_dir: &Path, sf: f64, names: &[String]) -> anyhow::Result<Suite> {
    let src = data_dir.join("src");
    let bucket = src.join("ssb");
    if ssb::TABLES.iter().any(|t| !ssb::table_file(&bucket, t).exists()) {
        println!("Generating SSB SF {sf} into {} (once) ...", bucket.display());
        ssb::generate(&bucket, sf, tpch::ParquetLayout::default()).context("generating SSB")?;
    }
    let (files, parquet_bytes) = parquet_bytes(&bucket);
    let dir = shared.join("bench/ssb/queries");
    let queries = names
        .iter()
        .map(|name| {
            let path = dir.join(format!("q{name}.sql"));
            let sql = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            Ok(QuerySpec {
                id: format!("q{name}"),
                sql,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Suite {
        kind: "ssb".into(),
        tables: folder_tables("ssb", &ssb::TABLES),
        views: Vec::new(),
        queries,
        src,
        data: DataSet {
            description: format!("SSB SF {sf} (derived from TPC-H)"),
            rows: (sf * 6_000_000.0) as u64,
            files,
            parquet_bytes,
        },
    })
}
