//! Region files: where each slot of the tier lives on disk, and the open
//! files that hold them.
//!
//! The tier's space is `slots` slots of `slot_bytes` each (a 4 KiB header
//! block plus room for the largest page, rounded up to 4 KiB), numbered from
//! 0. Slot `s` lives in region file `s / region_slots`, at offset
//! `(s % region_slots) * slot_bytes`. Region files are about
//! [`REGION_BYTES`] (the last one shorter) and created when a slot in them
//! is first written, sparse, so an unwritten slot takes no disk space and
//! reads as zeros ([`super::format::Invalid::Blank`]).
//!
//! Neighbouring slots are neighbouring bytes of one file, so consecutive
//! pages of an object placed in consecutive slots are read with one request
//! ([`Regions::read_run`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::format::{BLOCK, HEADER_LEN};
use super::io::{BlockIo, RegionFile};

/// Target size of one region file.
pub(crate) const REGION_BYTES: u64 = 64 << 20;

/// The shape of the tier's space, fixed for one open directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Bytes per slot: header block + data capacity, a multiple of 4 KiB.
    pub slot_bytes: u64,
    /// Slots per region file.
    pub region_slots: u32,
    /// Slots in all (the budget divided by `slot_bytes`).
    pub slots: u32,
}

impl Geometry {
    /// Slots for pages of up to `page_bytes` within `budget_bytes`.
    pub fn new(page_bytes: u64, budget_bytes: u64) -> Self {
        let slot_bytes = HEADER_LEN as u64 + page_bytes.max(1).div_ceil(BLOCK) * BLOCK;
        Geometry {
            slot_bytes,
            region_slots: (REGION_BYTES / slot_bytes).clamp(1, u32::MAX as u64) as u32,
            slots: (budget_bytes / slot_bytes).min(u32::MAX as u64) as u32,
        }
    }

    /// The largest page a slot holds.
    pub fn capacity(&self) -> u64 {
        self.slot_bytes - HEADER_LEN as u64
    }

    /// Region files needed for every slot.
    pub fn regions(&self) -> u32 {
        self.slots.div_ceil(self.region_slots)
    }

    /// The slots of region `region`.
    pub fn slots_of(&self, region: u32) -> std::ops::Range<u32> {
        let start = region.saturating_mul(self.region_slots).min(self.slots);
        start..start.saturating_add(self.region_slots).min(self.slots)
    }

    /// Region file and offset of `slot`.
    pub fn locate(&self, slot: u32) -> (u32, u64) {
        (
            slot / self.region_slots,
            (slot % self.region_slots) as u64 * self.slot_bytes,
        )
    }

    /// Bytes of a read of `len` data bytes at the start of a slot: the header
    /// and the data rounded up to whole blocks (exact up to `O_DIRECT`'s unit).
    pub fn read_len(len: u64) -> u64 {
        HEADER_LEN as u64 + len.div_ceil(BLOCK) * BLOCK
    }
}

/// The region files of one tier: paths, open handles and their I/O.
pub(crate) struct Regions {
    dir: PathBuf,
    geometry: Geometry,
    io: BlockIo,
    /// Open files by region number, opened on first use.
    files: Mutex<Vec<Option<Arc<RegionFile>>>>,
}

impl Regions {
    /// Region files under `dir` (which must exist) shaped by `geometry`.
    pub fn new(dir: PathBuf, geometry: Geometry, direct_io: bool) -> Self {
        Regions {
            dir,
            files: Mutex::new(vec![None; geometry.regions() as usize]),
            geometry,
            io: BlockIo::new(direct_io),
        }
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn is_direct(&self) -> bool {
        self.io.is_direct()
    }

    /// The path of region file `region`.
    pub fn path(&self, region: u32) -> PathBuf {
        region_path(&self.dir, region)
    }

    /// The open file of `region`, extended (sparse) to its full length when
    /// shorter; with `create`, created when missing, else a missing file is
    /// `NotFound`.
    fn file(&self, region: u32, create: bool) -> io::Result<Arc<RegionFile>> {
        let mut files = self.files.lock();
        let entry = files
            .get_mut(region as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such region"))?;
        if let Some(file) = entry {
            return Ok(file.clone());
        }
        let slots = self.geometry.slots_of(region);
        let len = (slots.end - slots.start) as u64 * self.geometry.slot_bytes;
        let file = Arc::new(self.io.open(&self.path(region), create, len)?);
        *entry = Some(file.clone());
        Ok(file)
    }

    /// Reads the slots `first..=last` of one region: every slot but the last
    /// whole, the last up to `last_len` data bytes. One request.
    pub fn read_run(&self, first: u32, last: u32, last_len: u64) -> io::Result<Bytes> {
        let (region, offset) = self.geometry.locate(first);
        debug_assert_eq!(self.geometry.locate(last).0, region, "a run stays in one region");
        let len = (last - first) as u64 * self.geometry.slot_bytes + Geometry::read_len(last_len);
        let file = self.file(region, false)?;
        self.io.read(&file, &self.path(region), offset, len as usize)
    }

    /// Writes `header` + `data` at the start of `slot`.
    pub fn write(&self, slot: u32, header: &[u8], data: &[u8]) -> io::Result<()> {
        let (region, offset) = self.geometry.locate(slot);
        let file = self.file(region, true)?;
        self.io.write(&file, &self.path(region), offset, &[header, data])
    }

    /// Zeroes the header block of `slot`, so that recovery finds it blank
    /// (free). For a write that failed partway (the disk filled): the header
    /// may be on disk with only part of the data after it, which a restart
    /// would index and a read then find damaged. Overwriting a block the
    /// failed write allocated needs no new space.
    pub fn blank(&self, slot: u32) -> io::Result<()> {
        let (region, offset) = self.geometry.locate(slot);
        let file = self.file(region, true)?;
        self.io.write(&file, &self.path(region), offset, &[&[0u8; HEADER_LEN]])
    }

    /// The header block of every slot of `region` (recovery: 4 KiB per
    /// slot, whatever the page size); `None` for a short read (the file was
    /// cut by someone else since it was opened).
    pub fn headers(&self, region: u32) -> io::Result<Vec<Option<Bytes>>> {
        let file = self.file(region, false)?;
        let slots = self.geometry.slots_of(region);
        let mut headers = Vec::with_capacity((slots.end - slots.start) as usize);
        for slot in slots {
            let (_, offset) = self.geometry.locate(slot);
            let block = self.io.read(&file, &self.path(region), offset, HEADER_LEN)?;
            headers.push((block.len() == HEADER_LEN).then_some(block));
        }
        Ok(headers)
    }

    /// Region files present in `dir` at open, by number: the ones recovery
    /// scans. Files of regions past the budget are deleted (the budget
    /// shrank), and the last region is cut to its slots.
    pub fn existing(&self) -> io::Result<Vec<u32>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let Some(region) = parse_region(&path) else {
                tracing::warn!(path = %path.display(), "disk tier: deleting a file that is not a region");
                let _ = super::io::remove_quietly(&path);
                continue;
            };
            if region >= self.geometry.regions() {
                tracing::info!(path = %path.display(), "disk tier: deleting a region past the budget");
                super::io::remove_quietly(&path)?;
                continue;
            }
            let slots = self.geometry.slots_of(region);
            let len = (slots.end - slots.start) as u64 * self.geometry.slot_bytes;
            if fs::metadata(&path)?.len() > len {
                fs::OpenOptions::new().write(true).open(&path)?.set_len(len)?;
            }
            found.push(region);
        }
        found.sort_unstable();
        Ok(found)
    }
}

fn region_path(dir: &Path, region: u32) -> PathBuf {
    dir.join(format!("{region:06}.region"))
}

fn parse_region(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let number = name.strip_suffix(".region")?;
    let region: u32 = number
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| number.parse().ok())
        .flatten()?;
    // Only the name `region_path` gives it (no `+`, no missing zeros).
    (region_path(Path::new(""), region).to_str() == Some(name)).then_some(region)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_regions_and_offsets() {
        let g = Geometry::new(64 << 10, 200 << 20);
        assert_eq!(g.slot_bytes, 68 << 10);
        assert_eq!(g.capacity(), 64 << 10);
        assert_eq!(g.region_slots, 963);
        assert_eq!(g.slots, 3011);
        assert_eq!(g.regions(), 4);
        assert_eq!(g.slots_of(3), 2889..3011);
        assert_eq!(g.locate(964), (1, 68 << 10));
        assert_eq!(Geometry::read_len(1), 8192);
        assert_eq!(Geometry::read_len(0), 4096);
        assert_eq!(Geometry::new(1, 4095).slots, 0);
    }

    #[test]
    fn region_names_round_trip() {
        let dir = Path::new("/x");
        assert_eq!(parse_region(&region_path(dir, 42)), Some(42));
        assert_eq!(parse_region(Path::new("/x/42.region")), None);
        assert_eq!(parse_region(Path::new("/x/+00042.region")), None);
        assert_eq!(parse_region(&region_path(dir, 1_234_567)), Some(1_234_567));
        assert_eq!(parse_region(Path::new("/x/000042.page")), None);
    }
}
