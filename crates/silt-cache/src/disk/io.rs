//! Positioned, block-aligned reads and writes of region files: `O_DIRECT`
//! (the default) or buffered.
//!
//! With `O_DIRECT` the tier's own files never enter the OS page cache: the
//! memory tiers already hold what is hot, and a second copy there would
//! only push the rest of the machine's memory out (Column Cache measured 43%
//! fewer disk reads with direct I/O under a concurrent workload). Every
//! offset and length the tier asks for is a multiple of [`BLOCK`], which is
//! what `O_DIRECT` needs, so the same requests serve both modes.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::format::BLOCK;

/// One region file, opened for positioned reads and writes: buffered always,
/// and with `O_DIRECT` too where asked for and accepted.
pub(crate) struct RegionFile {
    buffered: File,
    direct: Option<File>,
}

/// Opens region files and moves aligned blocks in and out of them, with
/// `O_DIRECT` when configured and supported.
pub(crate) struct BlockIo {
    /// Whether to use `O_DIRECT`; cleared for good the first time the
    /// filesystem refuses it, so the fallback is taken (and logged) once.
    direct: AtomicBool,
}

impl BlockIo {
    pub(crate) fn new(direct_io: bool) -> Self {
        BlockIo {
            direct: AtomicBool::new(direct_io),
        }
    }

    /// Whether reads and writes currently bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// The filesystem refused `O_DIRECT` (`EINVAL`) on `path`: buffered I/O
    /// from now on, said once.
    fn refused(&self, path: &Path) {
        if self.direct.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                path = %path.display(),
                "disk tier: the filesystem refuses O_DIRECT; falling back to buffered I/O (pages also fill the OS page cache)"
            );
        }
    }

    /// Opens `path` (creating it when `create`) and makes it at least `len`
    /// bytes long (sparse: a region's unwritten slots take no space).
    pub(crate) fn open(&self, path: &Path, create: bool, len: u64) -> io::Result<RegionFile> {
        let buffered = OpenOptions::new().read(true).write(true).create(create).open(path)?;
        if buffered.metadata()?.len() < len {
            buffered.set_len(len)?;
        }
        let direct = if self.is_direct() {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(f) => Some(f),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.refused(path);
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        Ok(RegionFile { buffered, direct })
    }

    /// Reads `len` bytes at `offset` (both multiples of [`BLOCK`]) into an
    /// aligned buffer, served without a copy. Past the end of the file the
    /// read is short, and so is the result.
    pub(crate) fn read(&self, file: &RegionFile, path: &Path, offset: u64, len: usize) -> io::Result<Bytes> {
        let mut buf = AlignedBuf::zeroed(len.max(BLOCK as usize))?;
        if let Some(direct) = file.direct.as_ref().filter(|_| self.is_direct()) {
            match fill(direct, &mut buf, offset, len) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.refused(path),
                Ok(()) => return Ok(Bytes::from_owner(buf)),
                Err(e) => return Err(e),
            }
        }
        fill(&file.buffered, &mut buf, offset, len)?;
        Ok(Bytes::from_owner(buf))
    }

    /// Writes `parts` one after the other at `offset` (a multiple of
    /// [`BLOCK`]), padded with zeros to whole blocks. No fsync: see the module
    /// docs of [`crate::disk`].
    pub(crate) fn write(&self, file: &RegionFile, path: &Path, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut buf = AlignedBuf::zeroed(len.div_ceil(BLOCK as usize).max(1) * BLOCK as usize)?;
        let mut at = 0;
        for part in parts {
            buf.as_mut_slice()[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        if let Some(direct) = file.direct.as_ref().filter(|_| self.is_direct()) {
            match write_all_at(direct, buf.as_mut_slice(), offset) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.refused(path),
                other => return other,
            }
        }
        write_all_at(&file.buffered, buf.as_mut_slice(), offset)
    }
}

/// Reads up to `len` bytes at `offset` into `buf`; `buf.len` is set to what
/// was read. Offsets stay block-aligned: only a read at end of file is short.
fn fill(file: &File, buf: &mut AlignedBuf, offset: u64, len: usize) -> io::Result<()> {
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf.as_mut_slice()[filled..len], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.len = filled;
    Ok(())
}

fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut written = 0;
    while written < buf.len() {
        match file.write_at(&buf[written..], offset + written as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short write")),
            // A partial write that leaves the offset unaligned could not go
            // on with O_DIRECT (the next write would be refused as if
            // O_DIRECT were): an error of this write, not the filesystem's
            // refusal.
            Ok(n) if (written + n) % BLOCK as usize != 0 => {
                return Err(io::Error::other("write ended off a block boundary"));
            }
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Pages of the file at `path` resident in the OS page cache (`mincore`):
/// how tests see that `O_DIRECT` kept the tier's files out of it.
#[cfg(test)]
pub(crate) fn resident_pages(path: &Path) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let file = File::open(path)?;
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| io::Error::other("file too large"))?;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: a read-only shared mapping of a file we hold open, unmapped below; never dereferenced.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `addr` maps `len` bytes; `vec` has one byte per page of them.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above.
    unsafe { libc::munmap(addr, len) };
    if rc != 0 {
        return Err(err);
    }
    Ok(vec.iter().filter(|&&b| b & 1 == 1).count())
}

/// Deletes a file; a file already gone is not an error.
pub(crate) fn remove_quietly(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A zeroed heap buffer aligned to [`BLOCK`], as `O_DIRECT` requires; handed
/// to [`Bytes::from_owner`] so the page is served without a copy.
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Bytes read (the slice exposed); at most `layout.size()`.
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads through `as_ref`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `size` must be a non-zero multiple of [`BLOCK`].
    fn zeroed(size: usize) -> io::Result<Self> {
        let layout =
            Layout::from_size_align(size, BLOCK as usize).map_err(|_| io::Error::other("bad buffer layout"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) })
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "cannot allocate an aligned read buffer"))?;
        Ok(AlignedBuf { ptr, layout, len: 0 })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid, initialized (zeroed) and exclusively ours for layout.size() bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: len <= layout.size() and the memory is initialized.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
