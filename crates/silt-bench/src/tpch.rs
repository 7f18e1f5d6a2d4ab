//! TPC-H data, generated in-process with the `tpchgen` crates (no download).

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator,
    RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow, SupplierArrow,
};

/// The eight TPC-H tables, in the order they are generated.
pub const TABLES: [&str; 8] = [
    "nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem",
];

/// Errors while generating data.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding {path} as Parquet: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("generating {table}: {source}")]
    Arrow {
        table: &'static str,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("seed data {path}: {reason}")]
    Seed { path: PathBuf, reason: String },
}

/// How the Parquet files are laid out.
#[derive(Debug, Clone, Copy)]
pub struct ParquetLayout {
    /// Rows per row group.
    pub row_group_rows: usize,
    /// Compression codec for every column.
    pub compression: Compression,
}

impl Default for ParquetLayout {
    fn default() -> Self {
        ParquetLayout {
            row_group_rows: 128 * 1024,
            compression: Compression::ZSTD(ZstdLevel::default()),
        }
    }
}

fn reader(table: &str, sf: f64) -> Box<dyn RecordBatchReader + Send> {
    const BATCH: usize = 8192;
    match table {
        "nation" => Box::new(NationArrow::new(NationGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "region" => Box::new(RegionArrow::new(RegionGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "part" => Box::new(PartArrow::new(PartGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "supplier" => Box::new(SupplierArrow::new(SupplierGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "partsupp" => Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "customer" => Box::new(CustomerArrow::new(CustomerGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        _ => Box::new(LineItemArrow::new(LineItemGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
    }
}

/// Path of `table`'s file under `dir`: `dir/<table>/<table>.parquet`, one
/// folder per table so a table URL can name the folder.
pub fn table_file(dir: &Path, table: &str) -> PathBuf {
    dir.join(table).join(format!("{table}.parquet"))
}

/// Generate all eight TPC-H tables at scale factor `sf` under `dir`
/// (see [`table_file`]). Files are written to a temporary name and renamed,
/// so an interrupted run never leaves a truncated table behind. Tables whose
/// file already exists are skipped. Returns the tables it wrote.
pub fn generate(dir: &Path, sf: f64, layout: ParquetLayout) -> Result<Vec<&'static str>, GenError> {
    let mut written = Vec::new();
    for table in TABLES {
        let path = table_file(dir, table);
        if path.exists() {
            continue;
        }
        write_table(table, sf, &path, layout)?;
        written.push(table);
    }
    Ok(written)
}

fn write_table(table: &'static str, sf: f64, path: &Path, layout: ParquetLayout) -> Result<(), GenError> {
    let reader = reader(table, sf);
    let schema = reader.schema();
    write_parquet(
        path,
        schema,
        reader.map(|b| b.map_err(|source| GenError::Arrow { table, source })),
        layout,
    )
}

/// Writes `batches` as one Parquet file at `path`, through a temporary name
/// and a rename, so an interrupted run never leaves a truncated file behind.
pub fn write_parquet(
    path: &Path,
    schema: SchemaRef,
    batches: impl Iterator<Item = Result<RecordBatch, GenError>>,
    layout: ParquetLayout,
) -> Result<(), GenError> {
    let io = |source| GenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let pq = |source| GenError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let tmp = path.with_extension("parquet.tmp");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(layout.row_group_rows))
        .set_compression(layout.compression)
        .build();
    let file = File::create(&tmp).map_err(io)?;
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(pq)?;
    for batch in batches {
        writer.write(&batch?).map_err(pq)?;
    }
    writer.close().map_err(pq)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_readable_tables() {
        let dir = tempfile::tempdir().unwrap();
        let written = generate(dir.path(), 0.001, ParquetLayout::default()).unwrap();
        assert_eq!(written.len(), 8);
        let f = File::open(table_file(dir.path(), "nation")).unwrap();
        let r = parquet::file::reader::SerializedFileReader::new(f).unwrap();
        use parquet::file::reader::FileReader;
        assert_eq!(r.metadata().file_metadata().num_rows(), 25);
        // A second run finds everything present.
        assert!(
            generate(dir.path(), 0.001, ParquetLayout::default())
                .unwrap()
                .is_empty()
        );
    }
}
