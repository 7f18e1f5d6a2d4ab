//! Printing query results as a table, CSV or JSON lines.

use std::io::Write;

use anyhow::Context;
use arrow::array::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Csv,
    Json,
}

pub fn print(batches: &[RecordBatch], format: Format, out: &mut dyn Write) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            if batches.iter().all(|b| b.num_columns() == 0) {
                return Ok(());
            }
            writeln!(out, "{}", pretty_format_batches(batches).context("formatting results")?)?;
        }
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(&mut *out);
            for b in batches {
                w.write(b).context("writing CSV")?;
            }
        }
        Format::Json => {
            let mut w = arrow::json::LineDelimitedWriter::new(&mut *out);
            for b in batches {
                w.write(b).context("writing JSON")?;
            }
            w.finish().context("writing JSON")?;
        }
    }
    Ok(())
}
