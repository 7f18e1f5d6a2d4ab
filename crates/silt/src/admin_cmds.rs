//! `silt stats` and `silt preload`: look at and warm a running server's cache.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use silt_client::SiltClient;

/// Where the server is and how to authenticate.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Silt server, e.g. http://127.0.0.1:50051, or a fleet: comma-separated
    /// URLs, file:///members or dns://NAME:PORT entries (`silt stats` shows
    /// each member, `silt preload` warms each row group on its owner only).
    #[arg(long)]
    server: String,
    /// Bearer token for a server started with --auth-token.
    #[arg(long, env = "SILT_AUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl ServerArgs {
    async fn connect(&self) -> anyhow::Result<SiltClient> {
        Ok(SiltClient::connect(&self.server)
            .await
            .with_context(|| format!("connecting to {}", self.server))?
            .with_token(self.token.clone()))
    }
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Print the server's full statistics as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct PreloadArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Table to preload.
    table: String,
    /// Only these top-level columns, comma separated (default: all).
    #[arg(long, value_delimiter = ',')]
    columns: Option<Vec<String>>,
    /// Also decode the columns into the memory tier (default: metadata and disk only).
    #[arg(long)]
    memory: bool,
}

pub async fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let servers = crate::query::split_servers(&args.server.server);
    if servers.len() > 1 || servers.iter().any(|s| crate::query::is_membership_entry(s)) {
        return fleet_stats(&args, &servers).await;
    }
    let client = args.server.connect().await?;
    let text = client.stats_json().await?;
    if args.json {
        println!("{text}");
        return Ok(());
    }
    let stats: Value = serde_json::from_str(&text).context("the server sent malformed statistics")?;
    print!("{}", render_stats(&stats));
    // A member of a fleet also shows every member, as it sees them.
    if let Ok(fleet) = client.fleet_json().await
        && let Ok(fleet) = serde_json::from_str::<Value>(&fleet)
        && fleet["members"].as_array().is_some_and(|m| m.len() > 1)
    {
        print!("\n{}", render_fleet_view(&fleet));
    }
    Ok(())
}

/// One line per fleet member: state, memory and disk use, hit ratio, queries.
fn render_fleet_view(fleet: &Value) -> String {
    let mut out = format!(
        "{:<32} {:<9} {:>12} {:>12} {:>8} {:>9} {:>8}\n",
        "fleet member", "state", "memory", "disk", "hit %", "queries", "running"
    );
    for m in fleet["members"].as_array().into_iter().flatten() {
        let bytes = |tier: &str| indicatif::HumanBytes(m["tiers"][tier]["bytes"].as_u64().unwrap_or(0)).to_string();
        let name = format!(
            "{}{}",
            m["url"].as_str().unwrap_or("?"),
            if m["self"] == true { " (this)" } else { "" }
        );
        if m["state"] == "down" {
            out.push_str(&format!(
                "{name:<32} {:<9} {}\n",
                "down",
                m["error"].as_str().unwrap_or("")
            ));
            continue;
        }
        out.push_str(&format!(
            "{name:<32} {:<9} {:>12} {:>12} {:>8} {:>9} {:>8}\n",
            m["state"].as_str().unwrap_or("?"),
            bytes("memory"),
            bytes("disk"),
            m["hit_ratio"]
                .as_f64()
                .map_or("—".to_string(), |r| format!("{:.1}", r * 100.0)),
            m["queries"]["total"].as_f64().unwrap_or(0.0),
            m["queries"]["running"].as_f64().unwrap_or(0.0),
        ));
    }
    out
}

/// `silt stats --server a,b,c`: each member's statistics (an unreachable
/// one says so and the others are still shown), then the fleet's totals per
/// tier. With `--json`, one object keyed by server URL.
async fn fleet_stats(args: &StatsArgs, entries: &[String]) -> anyhow::Result<()> {
    let fleet = silt_client::fleet::Fleet::connect(entries, args.server.token.clone())?;
    let clients = fleet.clients();
    // Members as given, or (membership files, DNS names) as they resolved.
    let urls: Vec<String> = if fleet.is_dynamic() {
        clients.iter().map(|c| c.url().to_string()).collect()
    } else {
        entries.to_vec()
    };
    let mut all = serde_json::Map::new();
    for (url, client) in urls.iter().zip(&clients) {
        let answer = async {
            let text = client.stats_json().await?;
            anyhow::Ok(serde_json::from_str::<Value>(&text)?)
        }
        .await;
        let value = answer.unwrap_or_else(|e| serde_json::json!({ "error": format!("{e:#}") }));
        all.insert(url.clone(), value);
    }
    // The row groups each member owns (rendezvous hashing, as clients place them).
    match fleet.owned_row_groups().await {
        Ok(owned) => {
            for (url, n) in urls.iter().zip(owned) {
                if let Some(Value::Object(stats)) = all.get_mut(url) {
                    stats.insert("owned_row_groups".into(), n.into());
                }
            }
        }
        Err(e) => eprintln!("silt stats: cannot read the fleet's layouts to count owned row groups: {e}"),
    }
    if args.json {
        println!("{}", Value::Object(all));
        return Ok(());
    }
    print!("{}", render_fleet(&all));
    Ok(())
}

/// The human-readable form of `silt stats` over a fleet.
fn render_fleet(all: &serde_json::Map<String, Value>) -> String {
    let mut out = String::new();
    let mut totals: Vec<(&str, u64, u64, u64, u64)> = ["metadata", "memory", "pages", "disk"]
        .iter()
        .map(|t| (*t, 0, 0, 0, 0))
        .collect();
    for (url, stats) in all {
        match stats["owned_row_groups"].as_u64() {
            Some(n) => out.push_str(&format!("== {url} (owns {n} row groups)\n")),
            None => out.push_str(&format!("== {url}\n")),
        }
        if let Some(e) = stats.get("error") {
            out.push_str(&format!("unreachable: {}\n\n", e.as_str().unwrap_or("?")));
            continue;
        }
        out.push_str(&render_stats(stats));
        out.push('\n');
        for (tier, hits, misses, used, budget) in &mut totals {
            let t = &stats["tiers"][*tier];
            *hits += t["hits"].as_u64().unwrap_or(0);
            *misses += t["misses"].as_u64().unwrap_or(0);
            *used += t["bytes"].as_u64().unwrap_or(0);
            *budget += t["budget"].as_u64().unwrap_or(0);
        }
    }
    out.push_str(&format!(
        "== fleet of {}\n{:<9} {:>10} {:>10} {:>8} {:>12} {:>12}\n",
        all.len(),
        "tier",
        "hits",
        "misses",
        "hit %",
        "used",
        "budget"
    ));
    for (tier, hits, misses, used, budget) in totals {
        out.push_str(&format!(
            "{:<9} {:>10} {:>10} {:>8} {:>12} {:>12}\n",
            tier,
            hits,
            misses,
            ratio(hits, misses),
            indicatif::HumanBytes(used),
            indicatif::HumanBytes(budget)
        ));
    }
    out
}

fn bytes(v: &Value) -> String {
    v.as_u64()
        .map(|b| indicatif::HumanBytes(b).to_string())
        .unwrap_or_else(|| "-".into())
}

fn ratio(hits: u64, misses: u64) -> String {
    if hits + misses == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * hits as f64 / (hits + misses) as f64)
    }
}

/// The human-readable form of `silt stats`.
fn render_stats(stats: &Value) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<9} {:>10} {:>10} {:>8} {:>10} {:>12} {:>12}\n",
        "tier", "hits", "misses", "hit %", "evictions", "used", "budget"
    ));
    for tier in ["metadata", "memory", "pages", "disk"] {
        let Some(t) = stats["tiers"].get(tier) else { continue };
        let hits = t["hits"].as_u64().unwrap_or(0);
        let misses = t["misses"].as_u64().unwrap_or(0);
        out.push_str(&format!(
            "{:<9} {:>10} {:>10} {:>8} {:>10} {:>12} {:>12}\n",
            tier,
            hits,
            misses,
            ratio(hits, misses),
            t["evictions"].as_u64().unwrap_or(0),
            bytes(&t["bytes"]),
            bytes(&t["budget"]),
        ));
    }
    if let Some(m) = stats["tiers"].get("memory").filter(|m| m.get("forms").is_some()) {
        let form = |f: &str, k: &str| m["forms"][f][k].as_u64().unwrap_or(0);
        out.push_str(&format!(
            "memory: form {}, arrow {}, liquid {} (was {} as Arrow: {}x smaller), {} batches waiting to transcode\n",
            m["form"].as_str().unwrap_or("?"),
            indicatif::HumanBytes(form("arrow", "bytes")),
            indicatif::HumanBytes(form("liquid", "bytes")),
            indicatif::HumanBytes(form("liquid", "arrow_bytes")),
            m["forms"]["liquid"]["compression"]
                .as_f64()
                .map_or("-".to_string(), |r| format!("{r:.1}")),
            m["transcode_backlog"],
        ));
        if let Some(columns) = m["columns"].as_array().filter(|c| !c.is_empty()) {
            out.push_str(&format!(
                "{:<16} {:<24} {:<7} {:>8} {:>12} {:>12} {:>8}\n",
                "table", "column", "form", "batches", "bytes", "as arrow", "ratio"
            ));
            for c in columns {
                out.push_str(&format!(
                    "{:<16} {:<24} {:<7} {:>8} {:>12} {:>12} {:>8}\n",
                    c["table"].as_str().unwrap_or("?"),
                    c["column"].as_str().unwrap_or("?"),
                    c["form"].as_str().unwrap_or("?"),
                    c["batches"],
                    bytes(&c["bytes"]),
                    bytes(&c["arrow_bytes"]),
                    c["compression"]
                        .as_f64()
                        .map_or("-".to_string(), |r| format!("{r:.1}x")),
                ));
            }
        }
    }
    if let Some(d) = stats["tiers"].get("disk") {
        out.push_str(&format!(
            "disk: {} pages, {} corrupt pages dropped, {} recovered at start{}\n",
            d["pages"],
            d["corrupt_pages"],
            d["recovered_pages"],
            if d["recovering"].as_bool() == Some(true) {
                " (recovery running)"
            } else {
                ""
            }
        ));
    }
    let m = &stats["metrics"];
    let get = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0) as u64;
    out.push_str(&format!(
        "object store: {} GETs ({}), {} HEADs, {} LISTs, {} errors\n",
        get("silt_object_store_get_requests_total"),
        indicatif::HumanBytes(get("silt_object_store_get_bytes_total")),
        get("silt_object_store_head_requests_total"),
        get("silt_object_store_list_requests_total"),
        get("silt_object_store_errors_total"),
    ));
    if let Some(tables) = stats["tables"].as_object().filter(|t| !t.is_empty()) {
        out.push_str(&format!(
            "\n{:<24} {:>12} {:>12} {:>12} {:>12} {:>8}\n",
            "table", "memory hits", "memory miss", "page hits", "page misses", "hit %"
        ));
        for (name, t) in tables {
            let count = |k: &str| t[k].as_u64().unwrap_or(0);
            let (batch_hits, batch_misses) = (count("memory_hits"), count("memory_misses"));
            let (hits, misses) = (count("page_hits"), count("page_misses"));
            out.push_str(&format!(
                "{name:<24} {batch_hits:>12} {batch_misses:>12} {hits:>12} {misses:>12} {:>8}\n",
                ratio(batch_hits + hits, misses)
            ));
        }
    }
    out
}

pub async fn preload(args: PreloadArgs) -> anyhow::Result<()> {
    let servers = crate::query::split_servers(&args.server.server);
    if servers.len() > 1 || servers.iter().any(|s| crate::query::is_membership_entry(s)) {
        return fleet_preload(&args, &servers).await;
    }
    let client = args.server.connect().await?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let last = client
        .preload(&args.table, args.columns.clone(), args.memory, |p| {
            bar.set_length(p["bytes_total"].as_u64().unwrap_or(0));
            bar.set_position(p["bytes_done"].as_u64().unwrap_or(0));
            bar.set_message(format!(
                "files {}/{}",
                p["files_done"].as_u64().unwrap_or(0),
                p["files_total"].as_u64().unwrap_or(0)
            ));
        })
        .await
        .with_context(|| format!("preloading {}", args.table));
    bar.finish_and_clear();
    let last = last?;
    eprintln!(
        "preloaded {}: {} files, {} in {:.1?}",
        args.table,
        last["files_done"],
        indicatif::HumanBytes(last["bytes_done"].as_u64().unwrap_or(0)),
        bar.elapsed()
    );
    Ok(())
}

/// `silt preload --server a,b,c TABLE`: each member warms only the row
/// groups it owns, all at once; one line per member, and an error if any failed.
async fn fleet_preload(args: &PreloadArgs, entries: &[String]) -> anyhow::Result<()> {
    let fleet = silt_client::fleet::Fleet::connect(entries, args.server.token.clone())?;
    let started = std::time::Instant::now();
    let answers = fleet
        .preload(&args.table, args.columns.clone(), args.memory)
        .await
        .with_context(|| format!("preloading {} across the fleet", args.table))?;
    let mut failed = 0;
    for (url, answer) in &answers {
        match answer {
            Ok(p) => eprintln!(
                "  {url}: {} files, {}",
                p["files_done"],
                indicatif::HumanBytes(p["bytes_done"].as_u64().unwrap_or(0))
            ),
            Err(e) => {
                failed += 1;
                eprintln!("  {url}: FAILED: {e}");
            }
        }
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} members failed to preload {}",
        answers.len(),
        args.table
    );
    eprintln!(
        "preloaded {} on {} members, each its own row groups, in {:.1?}",
        args.table,
        answers.len(),
        started.elapsed()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_tiers_and_tables() {
        let stats = serde_json::json!({
            "tiers": {
                "metadata": {"hits": 3, "misses": 1, "evictions": 0, "bytes": 2048, "budget": 1048576},
                "memory": {"hits": 0, "misses": 0, "evictions": 0, "bytes": 300, "budget": 1024,
                    "form": "liquid", "transcode_backlog": 0,
                    "forms": {"arrow": {"bytes": 0, "arrow_bytes": 0, "compression": null},
                              "liquid": {"bytes": 300, "arrow_bytes": 1200, "compression": 4.0}},
                    "columns": [{"table": "lineitem", "column": "l_shipdate", "form": "liquid", "batches": 2,
                                 "bytes": 300, "arrow_bytes": 1200, "compression": 4.0}]},
            },
            "metrics": {"silt_object_store_get_requests_total": 7.0},
            "tables": {"lineitem": {"memory_hits": 5, "memory_misses": 2, "page_hits": 4, "page_misses": 1}},
        });
        let text = render_stats(&stats);
        assert!(text.contains("metadata") && text.contains("75.0%"), "{text}");
        assert!(text.contains("7 GETs"), "{text}");
        assert!(text.contains("lineitem") && text.contains("90.0%"), "{text}");
        assert!(text.contains("l_shipdate") && text.contains("4.0x"), "{text}");

        // A fleet: each member, an unreachable one named, and the totals.
        let mut fleet = serde_json::Map::new();
        let mut owning = stats.clone();
        owning["owned_row_groups"] = 12.into();
        fleet.insert("http://a:1".into(), owning);
        fleet.insert("http://b:1".into(), stats);
        fleet.insert("http://c:1".into(), serde_json::json!({"error": "connection refused"}));
        let text = render_fleet(&fleet);
        assert!(
            text.contains("== http://a:1 (owns 12 row groups)") && text.contains("== http://b:1\n"),
            "{text}"
        );
        assert!(text.contains("unreachable: connection refused"), "{text}");
        assert!(text.contains("== fleet of 3"), "{text}");
        let metadata = text.lines().rev().find(|l| l.starts_with("metadata")).unwrap();
        assert!(
            metadata.contains(" 6 ") && metadata.contains("75.0%") && metadata.contains("4.00 KiB"),
            "{metadata}"
        );
    }
}
