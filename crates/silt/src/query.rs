//! `silt query`: plan on the client, push scans to the server.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use datafusion::prelude::{SessionConfig, SessionContext};
use rustyline::error::ReadlineError;
use silt_client::script::run_script;
use silt_client::{SiltClient, SiltTableOptions};

use crate::output::{Format, print};

#[derive(Args, Debug)]
pub struct QueryArgs {
    /// Silt server, e.g. http://127.0.0.1:50051; or a fleet of servers
    /// serving the same tables, comma separated: each row group is read from
    /// the server rendezvous hashing assigns it, failing over to the next.
    #[arg(long, required_unless_present = "config")]
    server: Option<String>,
    /// Read the servers from a config file's `[cluster] servers = [...]`
    /// (the servers' own config serves), when --server is not given.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Run queries on `silt worker`s (datafusion-distributed): each scan is
    /// split into one task per worker, worker i reading the row groups its
    /// server owns (worker i is beside server i of --server, same order).
    #[arg(long, requires = "workers")]
    distributed: bool,
    /// The `silt worker`s of --distributed, comma separated, e.g.
    /// http://a:50061,http://b:50061.
    #[arg(long, value_delimiter = ',', requires = "distributed")]
    workers: Vec<String>,
    /// SQL to run; omit (and omit -f) for an interactive shell.
    sql: Option<String>,
    /// Read SQL from a file (may hold several statements).
    #[arg(short = 'f', long = "file", conflicts_with = "sql")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Print the plan (showing what is pushed down) instead of running.
    #[arg(long)]
    explain: bool,
    /// A point lookup instead of SQL: `TABLE.KEY_COLUMN`, with --keys;
    /// answered in one call, nothing planned.
    #[arg(long, value_name = "TABLE.COLUMN", conflicts_with_all = ["sql", "file", "explain"], requires = "keys")]
    lookup: Option<String>,
    /// Keys of --lookup, comma separated (the server casts them to the key
    /// column's type: integers, strings, dates as YYYY-MM-DD).
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    /// Columns --lookup returns, comma separated [default: all].
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
    /// Bearer token for a server started with --auth-token.
    #[arg(long, env = "SILT_AUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Keep up to this much decoded data (e.g. 2GiB) in a compute-side
    /// cache in this process: row groups used twice are fetched once and
    /// then answered here, each of the others runs where the cost model
    /// says (here on rows filtered here, or pushed down). 0: none, every
    /// scan pushed down whole [default: a quarter of the machine's memory,
    /// at most 4 GiB].
    #[arg(long, value_parser = silt_server::config::parse_bytes)]
    local_cache: Option<u64>,
    /// Which column chunks a full --local-cache gives up first: weighted-lfu
    /// (uses x what a chunk saves per byte), lfu or lru.
    #[arg(long, default_value = "weighted-lfu")]
    local_cache_policy: silt_client::CachePolicy,
    /// Form of the --local-cache's column chunks: liquid (compressed, filtered
    /// rows decoded alone) or arrow (no decoding, ~4x the memory).
    #[arg(long, default_value = "liquid")]
    local_cache_form: silt_client::MemoryForm,
    /// Megabits per second between this client and the server: the prior
    /// of the link's estimate (still learned from the client's transfers)
    /// for the choice between pushing a row group down and filtering it
    /// here, and for compressing answers [default: 10000, a server in the
    /// same rack].
    #[arg(long)]
    link_mbps: Option<f64>,
}

/// The servers of a comma-separated list.
pub(crate) fn split_servers(server: &str) -> Vec<String> {
    server
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A client-side DataFusion context with the server's tables registered.
/// Whether `entry` names members rather than being one: a membership file
/// or a DNS name ([`silt_client::membership`]), always a fleet.
pub fn is_membership_entry(entry: &str) -> bool {
    silt_client::membership::Source::names_members(entry)
}

pub async fn connect(server: &str, token: Option<String>) -> anyhow::Result<SessionContext> {
    connect_with(server, token, &SiltTableOptions::default()).await
}

/// [`connect`] with `options` (a compute-side cache, for one server or a
/// fleet alike).
pub async fn connect_with(
    server: &str,
    token: Option<String>,
    options: &SiltTableOptions,
) -> anyhow::Result<SessionContext> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
    let servers = split_servers(server);
    if servers.len() > 1 || servers.iter().any(|s| is_membership_entry(s)) {
        let fleet = silt_client::fleet::Fleet::connect(&servers, token)?;
        silt_client::register_fleet_tables_with_options(&ctx, std::sync::Arc::new(fleet), options)
            .await
            .with_context(|| format!("reading the table list of the fleet {server}"))?;
        return Ok(ctx);
    }
    let client = SiltClient::connect(server).await?.with_token(token);
    silt_client::register_tables_with_options(&ctx, &client, options)
        .await
        .with_context(|| format!("reading the table list of {server}"))?;
    Ok(ctx)
}

/// The servers of `--server` (comma separated) or `--config`'s `[cluster]`.
fn servers(args: &QueryArgs) -> anyhow::Result<String> {
    if let Some(server) = &args.server {
        return Ok(server.clone());
    }
    let Some(path) = &args.config else {
        bail!("give --server or --config");
    };
    let config = silt_server::config::ServerConfig::from_file(path)?;
    if config.cluster.servers.is_empty() {
        bail!("{} has no [cluster] servers = [...]", path.display());
    }
    Ok(config.cluster.servers.join(","))
}

/// A coordinating context: the fleet's tables, queries planned over `workers`.
async fn connect_distributed(
    server: &str,
    workers: &[String],
    token: Option<String>,
) -> anyhow::Result<SessionContext> {
    let servers = split_servers(server);
    let fleet = std::sync::Arc::new(silt_client::fleet::Fleet::connect(&servers, token.clone())?);
    silt_client::distributed::coordinator_context(fleet, workers, token)
        .await
        .with_context(|| format!("reading the table list of {server}"))
}

pub async fn run(mut args: QueryArgs) -> anyhow::Result<()> {
    let server = servers(&args)?;
    args.server = Some(server.clone());
    if let Some(target) = &args.lookup {
        return lookup(&args, &server, target).await;
    }
    let options = SiltTableOptions {
        local_cache_bytes: args.local_cache.unwrap_or_else(silt_client::default_local_cache_bytes),
        local_cache_policy: args.local_cache_policy,
        caching_only: false,
        local_cache_form: args.local_cache_form,
        link_bytes_per_second: args.link_mbps.map(|m| m * 1e6 / 8.0),
    };
    let explicit_cache = args.local_cache.is_some_and(|b| b > 0);
    let ctx = if args.distributed {
        if explicit_cache {
            tracing::warn!("--local-cache is not used with --distributed");
        }
        connect_distributed(&server, &args.workers, args.token.clone()).await?
    } else {
        connect_with(&server, args.token.clone(), &options).await?
    };
    let sql = match (&args.sql, &args.file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) => return shell(&ctx, args.format).await,
    };
    if args.explain && args.distributed {
        println!("{}", silt_client::distributed::explain(&ctx, &sql).await?);
        return Ok(());
    }
    let sql = if args.explain { format!("EXPLAIN {sql}") } else { sql };
    if args.distributed {
        // A worker that dies under a statement costs a second run of it, not the query.
        let results = silt_client::distributed::run_script_retrying(&ctx, &sql).await?;
        if let Some(workers) = ctx
            .state()
            .config()
            .get_extension::<silt_client::distributed::Workers>()
            && workers.retries() > 0
        {
            eprintln!(
                "{} statement run(s) repeated after a worker failed under them",
                workers.retries()
            );
        }
        return print_results(&results, args.format);
    }
    execute(&ctx, &sql, args.format, false).await
}

/// `silt query --lookup TABLE.COLUMN --keys ...`: one `LookupRequest`.
async fn lookup(args: &QueryArgs, server: &str, target: &str) -> anyhow::Result<()> {
    let Some((table, column)) = target.split_once('.') else {
        bail!("--lookup takes TABLE.KEY_COLUMN, got '{target}'");
    };
    let first = split_servers(server).into_iter().next().unwrap_or_default();
    let client = SiltClient::connect(&first).await?.with_token(args.token.clone());
    let keys = std::sync::Arc::new(datafusion::arrow::array::StringArray::from(args.keys.clone()));
    let batches = client
        .lookup(table, column, keys, args.columns.clone())
        .await
        .with_context(|| format!("looking up {} key(s) in {table}.{column}", args.keys.len()))?;
    print(&batches, args.format, &mut std::io::stdout().lock())
}

/// Prints every statement's result.
fn print_results(results: &[silt_client::script::StatementResult], format: Format) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for r in results {
        print(&r.batches, format, &mut out)?;
    }
    Ok(())
}

async fn execute(ctx: &SessionContext, sql: &str, format: Format, timing: bool) -> anyhow::Result<()> {
    let start = Instant::now();
    let results = run_script(ctx, sql).await?;
    print_results(&results, format)?;
    if timing {
        let rows: usize = results
            .last()
            .map_or(0, |r| r.batches.iter().map(|b| b.num_rows()).sum());
        eprintln!("{rows} rows in {:.3}s", start.elapsed().as_secs_f64());
    }
    Ok(())
}

async fn shell(ctx: &SessionContext, format: Format) -> anyhow::Result<()> {
    let mut editor = rustyline::DefaultEditor::new().context("starting the line editor")?;
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".silt_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    eprintln!("Silt SQL shell. End statements with ';'. \\d lists tables, \\q quits.");
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() { "silt> " } else { "  ... " };
        match editor.readline(prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if buffer.is_empty() && (trimmed == "\\q" || trimmed == "quit" || trimmed == "exit") {
                    break;
                }
                if buffer.is_empty() && trimmed == "\\d" {
                    let _ = editor.add_history_entry(trimmed);
                    if let Err(e) = execute(ctx, "SHOW TABLES", format, false).await {
                        eprintln!("error: {e:#}");
                    }
                    continue;
                }
                buffer.push_str(&line);
                buffer.push('\n');
                if trimmed.ends_with(';') {
                    let sql = std::mem::take(&mut buffer);
                    let _ = editor.add_history_entry(sql.trim());
                    if let Err(e) = execute(ctx, &sql, format, true).await {
                        eprintln!("error: {e:#}");
                    }
                }
            }
            Err(ReadlineError::Interrupted) => buffer.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => bail!("reading input: {e}"),
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}
