//! What the disk tier's directory really is: a "disk" tier on tmpfs keeps
//! its pages in RAM (competing with the memory tier for the same memory),
//! and one on a filesystem without `O_DIRECT` fills the OS page cache with a
//! second copy of every page. Either is worth a warning at start-up, when it
//! can still be fixed (`--cache-dir`), rather than a surprise in production.

use std::path::{Path, PathBuf};

/// Filesystems whose files live in memory.
const MEMORY_FILESYSTEMS: [&str; 2] = ["tmpfs", "ramfs"];

/// What the directory of a disk tier is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Medium {
    /// The directory looked at.
    pub dir: PathBuf,
    /// Its filesystem's type (`/proc/self/mounts`), where known.
    pub filesystem: Option<String>,
    /// Whether a file in it opens with `O_DIRECT`.
    pub direct_io: bool,
}

impl Medium {
    /// Looks at `dir` (which must exist): its filesystem, and whether a probe
    /// file in it opens with `O_DIRECT`.
    pub fn of(dir: &Path) -> std::io::Result<Medium> {
        let dir = dir.canonicalize()?;
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        Ok(Medium {
            filesystem: filesystem_of(&mounts, &dir),
            direct_io: accepts_o_direct(&dir)?,
            dir,
        })
    }

    /// The start-up warning this medium deserves for a disk tier that asked
    /// for `O_DIRECT` (`want_direct`), if any.
    pub fn warning(&self, want_direct: bool) -> Option<String> {
        let dir = self.dir.display();
        if let Some(fs) = self.filesystem.as_deref().filter(|fs| MEMORY_FILESYSTEMS.contains(fs)) {
            return Some(format!(
                "the disk tier's directory {dir} is on {fs}: its pages are held in memory, not on disk; \
                 give --cache-dir (cache_dir) a directory on a local disk"
            ));
        }
        if want_direct && !self.direct_io {
            let fs = self.filesystem.as_deref().unwrap_or("its filesystem");
            return Some(format!(
                "the disk tier's directory {dir} ({fs}) refuses O_DIRECT: its pages will also fill the OS page \
                 cache; give --cache-dir (cache_dir) a directory on a filesystem that takes O_DIRECT (ext4, xfs)"
            ));
        }
        None
    }
}

/// The type of the filesystem `dir` (canonical) is on: that of the longest
/// mount point in `mounts` (`/proc/self/mounts`) that contains it.
fn filesystem_of(mounts: &str, dir: &Path) -> Option<String> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_device, point, fs) = (fields.next()?, fields.next()?, fields.next()?);
            // Spaces in mount points are written as \040.
            let point = PathBuf::from(point.replace("\\040", " "));
            dir.starts_with(&point)
                .then(|| (point.as_os_str().len(), fs.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
}

/// Whether files in `dir` open with `O_DIRECT` (probed on a file of its
/// own, the way the tier's first open finds out).
pub fn accepts_o_direct(dir: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(format!(".o_direct_probe.{}", std::process::id()));
    std::fs::write(&probe, vec![0u8; 4096])?;
    let accepted = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    std::fs::remove_file(&probe)?;
    Ok(accepted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw,nosuid 0 0
/dev/sdb1 /tmp/data\\040disk xfs rw 0 0
";

    #[test]
    fn the_longest_mount_point_names_the_filesystem() {
        assert_eq!(
            filesystem_of(MOUNTS, Path::new("/var/cache/silt")).as_deref(),
            Some("ext4")
        );
        assert_eq!(
            filesystem_of(MOUNTS, Path::new("/tmp/silt-cache")).as_deref(),
            Some("tmpfs")
        );
        assert_eq!(
            filesystem_of(MOUNTS, Path::new("/tmp/data disk/silt")).as_deref(),
            Some("xfs")
        );
        // A path prefix is not a parent: /tmpfoo is not under /tmp.
        assert_eq!(filesystem_of(MOUNTS, Path::new("/tmpfoo")).as_deref(), Some("ext4"));
    }

    #[test]
    fn memory_and_buffered_media_are_warned_of() {
        let medium = |fs: &str, direct_io| Medium {
            dir: PathBuf::from("/c"),
            filesystem: Some(fs.to_string()),
            direct_io,
        };
        assert!(medium("tmpfs", true).warning(true).unwrap().contains("on tmpfs"));
        assert!(medium("tmpfs", false).warning(false).unwrap().contains("in memory"));
        assert!(medium("zfs", false).warning(true).unwrap().contains("refuses O_DIRECT"));
        assert_eq!(medium("zfs", false).warning(false), None, "buffered I/O was asked for");
        assert_eq!(medium("ext4", true).warning(true), None);
    }

    #[test]
    fn a_real_directory_is_looked_at() {
        let dir = tempfile::tempdir().unwrap();
        let medium = Medium::of(dir.path()).unwrap();
        assert!(medium.filesystem.is_some(), "{medium:?}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the probe is removed"
        );
    }
}
