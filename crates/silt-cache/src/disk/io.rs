//! Reading and writing page files: buffered or `O_DIRECT` reads, atomic writes.

use std::alloc::{self, Layout};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::format::{BLOCK, HEADER_LEN};

/// Reads whole page files, with `O_DIRECT` when configured and supported.
pub(crate) struct PageReader {
    /// Whether to try `O_DIRECT`; cleared for good the first time the
    /// filesystem refuses it, so the fallback is taken (and logged) once.
    direct: AtomicBool,
}

impl PageReader {
    pub(crate) fn new(direct_io: bool) -> Self {
        PageReader {
            direct: AtomicBool::new(direct_io),
        }
    }

    /// Whether reads currently bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// The whole file at `path` (header and data).
    pub(crate) fn read(&self, path: &Path) -> io::Result<Bytes> {
        if self.is_direct() {
            match read_direct(path) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    if self.direct.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            path = %path.display(),
                            "disk tier: the filesystem refuses O_DIRECT; falling back to buffered reads"
                        );
                    }
                }
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

/// Writes `header` + `data` to `tmp` and renames it to `dest`, so `dest`
/// appears whole or not at all. No fsync: see the module docs of
/// [`crate::disk`]. On failure the temporary file is removed.
pub(crate) fn write_page(tmp: &Path, dest: &Path, header: &[u8], data: &[u8]) -> io::Result<()> {
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
        file.write_all(header)?;
        file.write_all(data)?;
        drop(file);
        fs::rename(tmp, dest)
    })();
    if result.is_err() {
        let _ = fs::remove_file(tmp);
    }
    result
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
