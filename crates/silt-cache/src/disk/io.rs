//! Reading and writing page files: `O_DIRECT` (the default) or buffered
//! reads and writes, atomic writes.
//!
//! With `O_DIRECT` the tier's own files never enter the OS page cache: the
//! memory tiers already hold what is hot, and a second copy there would
//! only push the rest of the machine's memory out (Column Cache measured 43%
//! fewer disk reads with direct I/O under a concurrent workload).

use std::alloc::{self, Layout};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::format::{BLOCK, HEADER_LEN};

/// Reads and writes whole page files, with `O_DIRECT` when configured and
/// supported.
pub(crate) struct PageIo {
    /// Whether to try `O_DIRECT`; cleared for good the first time the
    /// filesystem refuses it, so the fallback is taken (and logged) once.
    direct: AtomicBool,
}

impl PageIo {
    pub(crate) fn new(direct_io: bool) -> Self {
        PageIo {
            direct: AtomicBool::new(direct_io),
        }
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

    /// Writes `header` + `data` to `tmp` and renames it to `dest`, so `dest`
    /// appears whole or not at all. No fsync: see the module docs of
    /// [`crate::disk`]. On failure the temporary file is removed.
    pub(crate) fn write(&self, tmp: &Path, dest: &Path, header: &[u8], data: &[u8]) -> io::Result<()> {
        if self.is_direct() {
            match write_page(tmp, dest, |path| write_direct(path, header, data)) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.refused(tmp),
                other => return other,
            }
        }
        write_page(tmp, dest, |path| {
            let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
            file.write_all(header)?;
            file.write_all(data)
        })
    }

    /// Whether reads currently bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// The whole file at `path` (header and data).
    pub(crate) fn read(&self, path: &Path) -> io::Result<Bytes> {
        if self.is_direct() {
            match read_direct(path) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.refused(path),
                other => return other,
            }
        }
        read_buffered(path)
    }
}

fn read_buffered(path: &Path) -> io::Result<Bytes> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut buf)?;
    Ok(Bytes::from(buf))
}

/// Reads with `O_DIRECT` into a block-aligned buffer. The request is the file
/// length rounded up to a block; the kernel returns a short read at end of
/// file. Files are never modified after they are renamed into place, so the
/// length from `fstat` stays true for the open file.
fn read_direct(path: &Path) -> io::Result<Bytes> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| io::Error::other("page file too large"))?;
    let mut buf = AlignedBuf::zeroed(len.div_ceil(BLOCK as usize).max(1) * BLOCK as usize)?;
    let mut filled = 0;
    while filled < len {
        // `filled` stays block-aligned: only the read at end of file is short.
        match file.read_at(&mut buf.as_mut_slice()[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.len = filled.min(len);
    Ok(Bytes::from_owner(buf))
}

/// Reads the header block of a page file and returns it with the file length,
/// without touching the data (recovery reads only headers).
pub(crate) fn read_header(path: &Path) -> io::Result<(Vec<u8>, u64)> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut header = Vec::with_capacity(HEADER_LEN);
    (&mut file).take(HEADER_LEN as u64).read_to_end(&mut header)?;
    Ok((header, len))
}

/// `write` creates and fills `tmp`, which is then renamed to `dest`; on
/// failure the temporary file is removed.
fn write_page(tmp: &Path, dest: &Path, write: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    let result = write(tmp).and_then(|()| fs::rename(tmp, dest));
    if result.is_err() {
        let _ = fs::remove_file(tmp);
    }
    result
}

/// Writes `header` (one block) + `data` with `O_DIRECT`: one block-aligned
/// buffer padded to whole blocks, then the file cut to its exact length
/// (which the header's length check expects).
fn write_direct(path: &Path, header: &[u8], data: &[u8]) -> io::Result<()> {
    let len = header.len() + data.len();
    let mut buf = AlignedBuf::zeroed(len.div_ceil(BLOCK as usize).max(1) * BLOCK as usize)?;
    buf.as_mut_slice()[..header.len()].copy_from_slice(header);
    buf.as_mut_slice()[header.len()..len].copy_from_slice(data);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut written = 0;
    let padded = buf.layout.size();
    while written < padded {
        match file.write_at(&buf.as_mut_slice()[written..], written as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short O_DIRECT write")),
            // A partial write that leaves the offset unaligned could not go on
            // (the next write would be refused as if O_DIRECT were): an error
            // of this write, not the filesystem's refusal.
            Ok(n) if (written + n) % BLOCK as usize != 0 => {
                return Err(io::Error::other("O_DIRECT write ended off a block boundary"));
            }
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    file.set_len(len as u64)
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
    match fs::remove_file(path) {
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
