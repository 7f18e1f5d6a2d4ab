//! Walking local folders: the files a cache directory or a data set holds.

use std::path::{Path, PathBuf};

/// Every regular file below `dir` (recursively), sorted; missing folders give none.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The files below `dir` whose extension is `ext` (without the dot).
pub fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    files_below(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect()
}

/// Disk space (allocated blocks) taken by the files below `dir` whose
/// extension is `ext`: what sparse files such as the disk tier's regions
/// really occupy, unlike their lengths.
pub fn allocated_bytes_with_extension(dir: &Path, ext: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    files_with_extension(dir, ext)
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Total size in bytes of the files below `dir`.
pub fn bytes_below(dir: &Path) -> u64 {
    files_below(dir)
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// The source folder of the crate being built or tested: `CARGO_MANIFEST_DIR`
/// as cargo sets it when it runs a test (so a test binary built in one
/// checkout and run from another, as a shared target directory allows, finds
/// this checkout's files), else `compiled`, the caller's
/// `env!("CARGO_MANIFEST_DIR")`.
pub fn source_dir(compiled: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_dir())
        .unwrap_or_else(|| PathBuf::from(compiled))
}

/// Writes `members` (one URL per line) to the membership file `file` with a
/// modification time past any this process gave it before, so a reader that
/// re-reads the file only when its time moves (`silt_proto::membership`)
/// sees every rewrite, however close together.
pub fn write_members<S: AsRef<str>>(file: &Path, members: &[S]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static BUMP: AtomicU64 = AtomicU64::new(1);
    let text: String = members.iter().map(|m| format!("{}\n", m.as_ref())).collect();
    std::fs::write(file, text).expect("writing the membership file");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(BUMP.fetch_add(1, Ordering::Relaxed));
    std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|f| f.set_modified(later))
        .expect("setting the membership file's time");
}

/// Runs `script` (a path below the repository's `scripts/`) with the
/// project's test Python (`scripts/python-env.sh` sets it up once) and
/// `args`; its stdout, or a panic with its stderr. For tests whose fixtures
/// real writers (pyiceberg, deltalake) write.
pub fn run_python_script(repo: &Path, script: &str, args: &[&std::ffi::OsStr]) -> Vec<u8> {
    use std::process::Command;
    let env = Command::new("bash")
        .arg(repo.join("scripts/python-env.sh"))
        .output()
        .expect("running scripts/python-env.sh");
    assert!(
        env.status.success(),
        "scripts/python-env.sh: {}",
        String::from_utf8_lossy(&env.stderr)
    );
    let python = String::from_utf8(env.stdout).unwrap().trim().to_string();
    let out = Command::new(python)
        .arg(repo.join("scripts").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
