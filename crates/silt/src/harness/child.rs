//! Child processes of the harness: the loopback object store and the cache
//! servers, each a separate `silt` process so that its CPU time and memory
//! can be read from `/proc` without the client's.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// A child process killed when dropped.
pub struct ChildGuard {
    child: Child,
    what: String,
}

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it (SIGKILL: `kill -9`) and waits until it is gone.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().with_context(|| format!("killing {}", self.what))?;
        self.child
            .wait()
            .with_context(|| format!("waiting for {}", self.what))?;
        Ok(())
    }

    /// Whether it is still running; an exit is an error naming the process.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!("{} exited: {status}", self.what),
            Err(e) => bail!("cannot check on {}: {e}", self.what),
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` with stderr piped, waits (up to `timeout`) for stderr lines
/// starting with each of `markers`, and returns what followed each marker.
/// stderr keeps being drained (and echoed when `SILT_BENCH_VERBOSE` is set)
/// so the child never blocks on a full pipe.
pub fn spawn_and_wait(
    mut cmd: Command,
    what: &str,
    markers: &[&str],
    timeout: Duration,
) -> anyhow::Result<(ChildGuard, Vec<String>)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let guard = ChildGuard {
        child,
        what: what.to_string(),
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let verbose = std::env::var_os("SILT_BENCH_VERBOSE").is_some();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if verbose {
                eprintln!("    | {line}");
            }
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + timeout;
    let mut found: Vec<Option<String>> = vec![None; markers.len()];
    let mut seen = Vec::new();
    while found.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                for (i, m) in markers.iter().enumerate() {
                    if let Some(rest) = line.strip_prefix(m) {
                        found[i] = Some(rest.trim().to_string());
                    }
                }
                seen.push(line);
            }
            // The reader thread ends with the child's stderr: it exited.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => bail!(
                "{what} exited before it started ({}); its output:\n{}",
                seen.last().map_or("no output", String::as_str),
                seen.join("\n")
            ),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => bail!(
                "{what} did not start within {timeout:?}; its output:\n{}",
                seen.join("\n")
            ),
        }
    }
    // Keep draining: the reader thread owns the pipe and exits with the child.
    std::thread::spawn(move || for _ in rx {});
    Ok((guard, found.into_iter().flatten().collect()))
}

/// The loopback S3 server (`silt bench object-store`) over `root`, with
/// `uploads` (local folder, bucket) put into it first. Returns the process
/// and its endpoint.
pub fn object_store(root: &Path, uploads: &[(&Path, &str)]) -> anyhow::Result<(ChildGuard, String)> {
    let exe = std::env::current_exe().context("locating the silt executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "object-store", "--root"]).arg(root);
    for (dir, bucket) in uploads {
        cmd.arg("--upload").arg(format!("{}={bucket}", dir.display()));
    }
    let (guard, found) = spawn_and_wait(
        cmd,
        "the loopback object store",
        &[OBJECT_STORE_READY],
        Duration::from_secs(3600),
    )?;
    Ok((guard, found[0].clone()))
}

/// The line `silt bench object-store` prints once it serves, before its endpoint.
pub const OBJECT_STORE_READY: &str = "silt: object store on ";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_exits_before_its_marker_is_reported_as_exited_with_its_last_line() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'error: store.mbps must be positive' >&2; exit 1"]);
        let err = spawn_and_wait(cmd, "silt serve", &["ready"], Duration::from_secs(600))
            .err()
            .expect("the child never printed its marker");
        let text = format!("{err:#}");
        assert!(
            text.starts_with("silt serve exited before it started (error: store.mbps must be positive)"),
            "{text}"
        );
    }
}
