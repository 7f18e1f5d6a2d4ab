//! Chaos: the cache disk fills up. A real `silt serve` whose cache dir is a
//! 256 KiB tmpfs (far below its disk budget) answers every TPC-H query
//! exactly like plain DataFusion, twice, logs once that the disk tier
//! degraded to memory, and, restarted on the same full disk, recovers what
//! was written without a damaged page and answers right again.
//!
//! The tmpfs is mounted in a private user and mount namespace
//! (`unshare --user --map-root-user --mount`), so the test needs no
//! privileges (where user namespaces are disabled it prints SKIPPED and
//! passes), and the server's cache dir is that mount; the namespace
//! lives as long as a `sleep` holding it, so both servers see the same
//! filesystem.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use silt_bench::local_s3::LocalS3;
use silt_bench::tpch;

use common::{baseline, client, serve_command, start, tpch_differences};

/// A private mount namespace holding a small tmpfs at `dir`, kept alive by
/// a `sleep`; commands join it with `nsenter`.
struct FullDisk {
    holder: Child,
}

impl FullDisk {
    /// `None` where user namespaces are not allowed (the test then says so
    /// and skips: it cannot make a full disk without privileges).
    fn mount(dir: &Path, size: &str) -> Option<FullDisk> {
        let script = format!("mount -t tmpfs -o size={size} tmpfs \"$0\" && echo mounted && exec sleep 600");
        let mut holder = Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        // One line: "mounted", or nothing when the mount failed (sh exits).
        let mut out = String::new();
        let _ = BufReader::new(holder.stdout.take()?).read_line(&mut out);
        if !out.contains("mounted") {
            let _ = holder.kill();
            let mut err = String::new();
            let _ = holder.stderr.as_mut().unwrap().read_to_string(&mut err);
            let _ = holder.wait();
            eprintln!("SKIPPED: cannot mount a tmpfs in a user namespace here: {err}");
            return None;
        }
        Some(FullDisk { holder })
    }

    /// `cmd` run inside the namespace (so it sees the tmpfs).
    fn enter(&self, cmd: Command) -> Command {
        let mut wrapped = Command::new("nsenter");
        wrapped
            .arg(format!("--target={}", self.holder.id()))
            .args(["--user", "--mount", "--preserve-credentials"])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => wrapped.env(k, v),
                None => wrapped.env_remove(k),
            };
        }
        wrapped
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cache_disk_degrades_to_memory_and_nothing_is_corrupt() {
    let data = tempfile::tempdir().unwrap();
    tpch::generate(&data.path().join("tpch"), 0.01, tpch::ParquetLayout::default()).unwrap();
    let s3 = LocalS3::start(data.path()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let Some(disk) = FullDisk::mount(cache.path(), "256k") else {
        return;
    };
    let base = baseline(&data.path().join("tpch")).await;
    let args = ["--disk-budget", "64MiB", "--page-memory-budget", "64MiB"];

    let server = start(disk.enter(serve_command(&s3, cache.path(), &args)));
    let silt = client(&server.url).await;
    for round in ["cold", "warm"] {
        let failures = tpch_differences(&silt, &base).await;
        assert!(failures.is_empty(), "{round}: {}", failures.join("\n"));
    }
    let full = server.log_lines_with("the cache disk is full");
    assert!(
        !full.is_empty(),
        "no disk-full warning: {:?}",
        server.log.lock().unwrap()
    );
    // One warning per 30 s pause, not one per page.
    assert!(full.len() <= 3, "{full:?}");
    assert!(server.log_lines_with("cannot write page").is_empty());
    server.stop();

    // Restarted on the same full disk: what was written is whole.
    let server = start(disk.enter(serve_command(&s3, cache.path(), &args)));
    let silt = client(&server.url).await;
    let failures = tpch_differences(&silt, &base).await;
    assert!(failures.is_empty(), "after restart: {}", failures.join("\n"));
    assert!(
        server.log_lines_with("damaged").is_empty(),
        "{:?}",
        server.log.lock().unwrap()
    );
    server.stop();
}
