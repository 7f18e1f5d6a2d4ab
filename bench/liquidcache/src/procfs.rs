//! CPU time and resident memory of a process, from `/proc` (Linux): the same
//! readings Silt's harness takes (`crates/silt-bench/src/procfs.rs`).

use anyhow::Context;

/// One reading of a process's resource use.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// User + system CPU seconds of every thread since the process started.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
}

/// The usage of process `pid` now.
pub fn usage(pid: u32) -> anyhow::Result<Usage> {
    Ok(Usage {
        cpu_seconds: cpu_seconds(pid)?,
        rss_bytes: rss_bytes(pid)?,
    })
}

/// The usage of this process.
pub fn own_usage() -> anyhow::Result<Usage> {
    usage(std::process::id())
}

/// utime + stime (fields 14 and 15 of `stat`), counted after the command
/// name's closing parenthesis since the name may hold spaces.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let after_name = &text[text.rfind(')').with_context(|| format!("no ')' in {path}"))? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("utime/stime of {path} are not numbers"))
    };
    Ok((tick(11)? + tick(12)?) as f64 / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// `VmRSS` of `status`, bytes.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .with_context(|| format!("no VmRSS in {path}"))
}
