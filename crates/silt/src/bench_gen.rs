//! `silt bench gen`: the data sets the benchmarks run on, written as Parquet
//! with a chosen layout.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use datafusion::parquet::basic::{Compression, ZstdLevel};
use silt_bench::{hits, lookup, tpch};

#[derive(Args, Debug)]
pub struct GenArgs {
    #[command(subcommand)]
    data: GenData,
}

#[derive(Subcommand, Debug)]
enum GenData {
    /// TPC-H (tpchgen): one folder per table under --out.
    Tpch {
        /// Scale factor.
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Output folder.
        #[arg(long, default_value = "data/tpch")]
        out: PathBuf,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Hits-like ClickBench data grown from real rows, with the real data set's selectivities.
    Hits {
        /// Rows to generate.
        #[arg(long, default_value_t = 5_000_000)]
        rows: u64,
        /// Output file.
        #[arg(long, default_value = "data/hits/hits.parquet")]
        out: PathBuf,
        /// The real ClickBench rows to grow from.
        #[arg(long, default_value = "../shared/data/nano_hits.parquet")]
        seed_file: PathBuf,
        /// Random seed (same seed, same file).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// `realistic`: distinct counts, clustering and drift of the real
        /// table, estimated from the seed; `resample`: round 1's resampled
        /// seed rows (few distinct values).
        #[arg(long, value_enum, default_value_t = HitsModelArg::Realistic)]
        model: HitsModelArg,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// The point-lookup table: unique sorted `id`, 12 columns, a 1 KiB binary payload.
    Lookup {
        /// Rows to generate.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Output file.
        #[arg(long, default_value = "data/lookup/lookup.parquet")]
        out: PathBuf,
        #[command(flatten)]
        layout: LayoutArgs,
    },
}

/// `--model` of `silt bench gen hits` (and `silt bench clickbench --hits-model`).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum HitsModelArg {
    Realistic,
    Resample,
}

impl HitsModelArg {
    pub fn model(self) -> hits::HitsModel {
        match self {
            HitsModelArg::Realistic => hits::HitsModel::Realistic,
            HitsModelArg::Resample => hits::HitsModel::Resample,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HitsModelArg::Realistic => "realistic",
            HitsModelArg::Resample => "resample",
        }
    }
}

#[derive(Args, Debug, Clone)]
struct LayoutArgs {
    /// Rows per row group.
    #[arg(long, default_value_t = 128 * 1024)]
    row_group_rows: usize,
    /// Compression of every column.
    #[arg(long, value_enum, default_value_t = Codec::Zstd)]
    compression: Codec,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Codec {
    Zstd,
    Snappy,
    Lz4,
    None,
}

impl LayoutArgs {
    fn layout(&self) -> anyhow::Result<tpch::ParquetLayout> {
        anyhow::ensure!(self.row_group_rows > 0, "--row-group-rows must be positive");
        Ok(tpch::ParquetLayout {
            row_group_rows: self.row_group_rows,
            compression: match self.compression {
                Codec::Zstd => Compression::ZSTD(ZstdLevel::default()),
                Codec::Snappy => Compression::SNAPPY,
                Codec::Lz4 => Compression::LZ4_RAW,
                Codec::None => Compression::UNCOMPRESSED,
            },
        })
    }
}

pub async fn run(args: GenArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    tokio::task::spawn_blocking(move || generate(args.data))
        .await
        .context("generator task")??;
    eprintln!("done in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}

fn generate(data: GenData) -> anyhow::Result<()> {
    match data {
        GenData::Tpch { sf, out, layout } => {
            let written = tpch::generate(&out, sf, layout.layout()?)?;
            println!(
                "TPC-H SF {sf} in {}: wrote {} tables ({} already there)",
                out.display(),
                written.len(),
                tpch::TABLES.len() - written.len()
            );
        }
        GenData::Hits {
            rows,
            out,
            seed_file,
            seed,
            model,
            layout,
        } => {
            let generated = hits::generate(&seed_file, &out, rows, seed, layout.layout()?, model.model())?;
            println!("{rows} hits-like rows ({} model) in {}\n", model.name(), out.display());
            print_generated(&generated);
        }
        GenData::Lookup { rows, out, layout } => {
            lookup::generate(&out, rows, layout.layout()?)?;
            println!("{rows} lookup rows in {}", out.display());
        }
    }
    Ok(())
}

/// Prints the filters' shares and, for the realistic model, each growing
/// column's statistics against the model's targets.
pub fn print_generated(generated: &hits::Generated) {
    println!("{:<84} {:>10} {:>10} {:>10}", "filter", "rows", "share", "target");
    for s in &generated.selectivities {
        let target = if s.target > 0.0 {
            format!("{:.3}%", s.target * 100.0)
        } else {
            "a handful".into()
        };
        println!(
            "{:<84} {:>10} {:>9.3}% {:>10}",
            s.filter,
            s.matched,
            s.matched as f64 / s.rows.max(1) as f64 * 100.0,
            target
        );
    }
    if let Some(k) = generated.clustering {
        println!("\ncolumns with new values (clustering factor {k:.1}; targets in silt_bench::hits_model's docs):");
        println!(
            "{:<20} {:>8} {:>6} {:>9} {:>11} {:>11} {:>6} {:>7} {:>15} {:>15}",
            "column",
            "seed d",
            "f1",
            "new/row",
            "target d",
            "produced d",
            "window",
            "chance",
            "non-empty seed/now",
            "mean len seed/now"
        );
        for c in &generated.columns {
            let t = &c.target;
            let len = match (t.seed_mean_len, c.mean_len) {
                (Some(a), Some(b)) => format!("{a:.1}/{b:.1}"),
                _ => "-".into(),
            };
            println!(
                "{:<20} {:>8} {:>6} {:>8.4}{} {:>11} {:>11} {:>6} {:>7.3} {:>15} {:>15}",
                t.name,
                t.seed_distinct,
                t.singletons,
                t.new_rate,
                if t.known { "*" } else { " " },
                t.target_distinct,
                c.distinct,
                t.window,
                t.rename_chance,
                format!("{:.3}/{:.3}", t.seed_nonempty, c.nonempty),
                len
            );
        }
        println!("(* the real table's known rate)");
    }
}
