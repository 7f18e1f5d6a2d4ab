//! CPU time and resident memory of a process, from `/proc` (Linux).
//!
//! The harness measures the cache server as a separate process, so a query's
//! server CPU is the difference of two readings of `/proc/PID/stat` taken
//! around it: user + system time of every thread, the transcoder and the
//! prefetchers included, and nothing of the client's.

use std::path::PathBuf;

/// One reading of a process's resource use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessUsage {
    /// User + system CPU seconds since the process started (all threads).
    pub cpu_seconds: f64,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
    /// Largest resident set size so far (`VmHWM`), in bytes.
    pub peak_rss_bytes: u64,
}

/// Why a reading failed: the process is gone, or `/proc` is not Linux's.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot parse {path}: {what}")]
    Parse { path: PathBuf, what: &'static str },
}

/// The usage of process `pid` now.
pub fn usage(pid: u32) -> Result<ProcessUsage, ProcError> {
    let root = PathBuf::from(format!("/proc/{pid}"));
    let (path, status) = read(root.join("status"))?;
    Ok(ProcessUsage {
        cpu_seconds: cpu_seconds(&root)?,
        rss_bytes: kib_field(&status, "VmRSS:").ok_or(ProcError::Parse {
            path,
            what: "no VmRSS line",
        })?,
        // Not every kernel reports it: 0 means "not measured".
        peak_rss_bytes: kib_field(&status, "VmHWM:").unwrap_or(0),
    })
}

/// The usage of this process.
pub fn own_usage() -> Result<ProcessUsage, ProcError> {
    usage(std::process::id())
}

/// CPU seconds this process has used (user + system, every thread), to the
/// nanosecond (`CLOCK_PROCESS_CPUTIME_ID`; `/proc` counts 10 ms ticks).
pub fn own_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return own_usage().map_or(0.0, |u| u.cpu_seconds);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn read(path: PathBuf) -> Result<(PathBuf, String), ProcError> {
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path, text)),
        Err(source) => Err(ProcError::Read { path, source }),
    }
}

/// utime + stime (fields 14 and 15 of `stat`, in clock ticks). The command
/// name (field 2) may hold spaces and parentheses, so fields are counted
/// from the last `)`.
fn cpu_seconds(root: &std::path::Path) -> Result<f64, ProcError> {
    let (path, text) = read(root.join("stat"))?;
    let after_name = text.rfind(')').map(|i| &text[i + 1..]).ok_or(ProcError::Parse {
        path: path.clone(),
        what: "no ')' after the command name",
    })?;
    // After the name: state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let tick = |i: usize| -> Result<u64, ProcError> {
        fields.get(i).and_then(|f| f.parse().ok()).ok_or(ProcError::Parse {
            path: path.clone(),
            what: "utime/stime are not numbers",
        })
    };
    let ticks = tick(11)? + tick(12)?;
    Ok(ticks as f64 / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), in bytes.
pub fn total_memory_bytes() -> Result<u64, ProcError> {
    let (path, text) = read(PathBuf::from("/proc/meminfo"))?;
    kib_field(&text, "MemTotal:").ok_or(ProcError::Parse {
        path,
        what: "no MemTotal line",
    })
}

/// The `NAME:   123 kB` line of a `/proc` file, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_grows_with_work_and_rss_is_plausible() {
        let before = own_usage().unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = own_usage().unwrap();
        assert!(after.cpu_seconds > before.cpu_seconds, "{before:?} -> {after:?}");
        let precise = own_cpu_seconds();
        let mut y = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(20) {
            y = y.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(y);
        assert!(own_cpu_seconds() > precise);
        assert!(after.rss_bytes > 1 << 20, "{after:?}");
    }

    #[test]
    fn a_missing_process_is_an_error_naming_the_path() {
        let err = usage(u32::MAX).unwrap_err().to_string();
        assert!(err.contains("/proc/4294967295/stat"), "{err}");
    }
}
