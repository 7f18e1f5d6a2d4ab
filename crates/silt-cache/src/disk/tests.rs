//! Tests of the disk tier on real files in temporary directories.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::{DiskConfig, DiskMetrics, DiskTier, recovery};
use crate::PageKey;
use crate::policy::PolicyKind;

/// Refetch cost given to pages whose cost does not matter to the test.
const COST: f64 = 1e6;

/// The page size most tests open the tier with: slots of 24 KiB.
const PAGE: u64 = 20 << 10;
const SLOT: u64 = 24 << 10;

fn key(path: &str, version: &str, page: u64) -> PageKey {
    PageKey {
        object: crate::ObjectKey::new("s", path, version),
        page,
    }
}

fn config(dir: &Path, budget_bytes: u64, policy: PolicyKind, direct_io: bool) -> DiskConfig {
    DiskConfig {
        dir: dir.to_path_buf(),
        budget_bytes,
        page_bytes: PAGE,
        direct_io,
        policy,
        reservations: None,
    }
}

fn open(dir: &Path, budget_bytes: u64) -> Arc<DiskTier> {
    DiskTier::open(config(dir, budget_bytes, PolicyKind::Lru, false), DiskMetrics::noop()).unwrap()
}

/// A tier with pages of up to `page_bytes`.
fn open_paged(dir: &Path, budget_bytes: u64, page_bytes: u64, direct_io: bool) -> Arc<DiskTier> {
    let config = DiskConfig {
        page_bytes,
        ..config(dir, budget_bytes, PolicyKind::Lru, direct_io)
    };
    DiskTier::open(config, DiskMetrics::noop()).unwrap()
}

/// Deterministic bytes for a page, different per seed.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every file in the tier's region directories.
fn region_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for sub in fs::read_dir(dir).unwrap() {
        let sub = sub.unwrap().path();
        if sub.is_dir() {
            for f in fs::read_dir(&sub).unwrap() {
                files.push(f.unwrap().path());
            }
        }
    }
    files
}

/// Disk space the region files take (allocated blocks: they are sparse).
fn bytes_on_disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    region_files(dir)
        .iter()
        .map(|p| fs::metadata(p).map(|m| m.blocks() * 512).unwrap_or(0))
        .sum()
}

/// Overwrites `len` bytes of `file` at `offset` with `with`.
fn scribble(file: &Path, offset: u64, with: &[u8]) {
    use std::os::unix::fs::FileExt;
    fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .write_all_at(with, offset)
        .unwrap();
}

/// Small xorshift for reproducible random workloads.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn pages_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    let len = |page: u64| 1000 + page as usize * 2000;
    for page in 0..10 {
        tier.put(key("a", "v1", page), &bytes(page, len(page)), COST);
    }
    assert_eq!(tier.get(&key("a", "v1", 3)).unwrap().bytes, bytes(3, 7000));
    assert_eq!(tier.used_bytes(), 10 * SLOT);
    tier.wait_recovered();
    drop(tier);

    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!(
        (stats.recovered_pages, stats.pages, stats.used_bytes),
        (10, 10, 10 * SLOT)
    );
    for page in 0..10 {
        assert_eq!(tier.get(&key("a", "v1", page)).unwrap().bytes, bytes(page, len(page)));
    }
    assert!(tier.get(&key("a", "v1", 10)).is_none());
    assert!(tier.get(&key("a", "v2", 0)).is_none());
    let stats = tier.stats();
    assert_eq!((stats.hits, stats.misses, stats.corrupt_pages), (10, 2, 0));
    // New pages go to free slots, not over recovered ones.
    tier.put(key("b", "v1", 0), &bytes(50, 100), COST);
    for page in 0..10 {
        assert_eq!(tier.get(&key("a", "v1", page)).unwrap().bytes, bytes(page, len(page)));
    }
    assert_eq!(tier.get(&key("b", "v1", 0)).unwrap().bytes, bytes(50, 100));
}

/// A part of a page keeps its place in the page across a restart; a longer
/// part replaces it (in another slot), a shorter one does not.
#[test]
fn parts_of_pages_keep_their_offset_and_grow() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    let page = bytes(9, PAGE as usize);
    let k = key("a", "v", 4);
    tier.put_at(k.clone(), 15_000, &page[15_000..], COST);
    let got = tier.get(&k).unwrap();
    assert_eq!((got.offset, &got.bytes[..]), (15_000, &page[15_000..]));
    tier.put_at(k.clone(), 0, &page[..100], COST);
    assert_eq!(
        tier.get(&k).unwrap().offset,
        15_000,
        "a shorter part does not replace a longer one"
    );
    tier.put_at(k.clone(), 10_000, &page[10_000..], COST);
    assert_eq!(
        tier.get(&k).unwrap().offset,
        10_000,
        "a longer part replaces a shorter one"
    );
    assert_eq!(tier.used_bytes(), SLOT, "the replaced part's slot is free");
    tier.wait_recovered();
    drop(tier);

    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let got = tier.get(&k).unwrap();
    assert_eq!((got.offset, &got.bytes[..]), (10_000, &page[10_000..]));
    assert_eq!(tier.stats().pages, 1);
}

#[test]
fn consecutive_pages_are_placed_side_by_side_and_read_in_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    // Two objects written interleaved still get runs of neighbouring slots
    // where the pages of each were written in order.
    for page in 0..8 {
        tier.put(key("a", "v", page), &bytes(page, 20_000), COST);
        if page.is_multiple_of(4) {
            tier.put(key("b", "v", page), &bytes(100 + page, 3000), COST);
        }
    }
    let a: Vec<PageKey> = (0..8).map(|p| key("a", "v", p)).collect();
    let got = tier.get_many(&a);
    for (page, got) in got.iter().enumerate() {
        assert_eq!(
            got.as_ref().map(|p| &p.bytes[..]),
            Some(&bytes(page as u64, 20_000)[..]),
            "page {page}"
        );
    }
    // a0 | b0 | a1..a4 | b4 | a5..a7: three runs of a's pages.
    assert_eq!(tier.stats().read_requests, 3);
    // Misses and pages of other objects in the same call.
    let mixed = [key("a", "v", 2), key("zzz", "v", 0), key("b", "v", 4), key("a", "v", 3)];
    let got = tier.get_many(&mixed);
    assert_eq!(got[0].as_ref().map(|p| &p.bytes[..]), Some(&bytes(2, 20_000)[..]));
    assert!(got[1].is_none());
    assert_eq!(got[2].as_ref().map(|p| &p.bytes[..]), Some(&bytes(104, 3000)[..]));
    assert_eq!(got[3].as_ref().map(|p| &p.bytes[..]), Some(&bytes(3, 20_000)[..]));
    assert_eq!(tier.stats().read_requests, 3 + 2);
}

#[test]
fn a_flipped_data_byte_is_a_miss_and_frees_the_slot() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let k = key("a", "v1", 0);
    tier.put(k.clone(), &bytes(1, 5000), COST);
    tier.put(key("a", "v1", 1), &bytes(2, 5000), COST);
    let (file, offset) = tier.slot_of(&k).unwrap();
    let mut byte = [0u8];
    {
        use std::os::unix::fs::FileExt;
        fs::File::open(&file)
            .unwrap()
            .read_exact_at(&mut byte, offset + 4096 + 1234)
            .unwrap();
    }
    scribble(&file, offset + 4096 + 1234, &[byte[0] ^ 0x20]);

    let got = tier.get_many(&[k.clone(), key("a", "v1", 1)]);
    assert!(got[0].is_none(), "damaged page served");
    assert_eq!(
        got[1].as_ref().map(|p| &p.bytes[..]),
        Some(&bytes(2, 5000)[..]),
        "its neighbour in the same read is fine"
    );
    let stats = tier.stats();
    assert_eq!(
        (stats.corrupt_pages, stats.misses, stats.pages, stats.used_bytes),
        (1, 1, 1, SLOT)
    );
    // The slot is free again and is reused.
    tier.put(k.clone(), &bytes(1, 5000), COST);
    assert_eq!(tier.slot_of(&k).unwrap(), (file, offset));
    assert_eq!(tier.get(&k).unwrap().bytes, bytes(1, 5000));
}

#[test]
fn damaged_slots_are_dropped_at_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..3 {
        tier.put(key("a", "v1", page), &bytes(page, 9000), COST);
    }
    let slot = |page| tier.slot_of(&key("a", "v1", page)).unwrap();
    let (file, header_flip) = slot(0);
    let (_, garbage) = slot(1);
    let (_, good) = slot(2);
    drop(tier);
    scribble(&file, header_flip + 17, &[0x55]); // data length: header checksum fails
    scribble(&file, garbage, &bytes(99, 4096));
    scribble(&file, good + 4 * SLOT, b"SILTPAGE"); // a torn header in a blank slot
    // A header claiming more data than a slot holds (checksum right).
    let oversized = super::format::encode_header(&key("a", "v1", 9), 0, &vec![7; PAGE as usize + 1], COST).unwrap();
    scribble(&file, good + 5 * SLOT, &oversized);
    let stray = file.with_file_name("notes.txt");
    fs::write(&stray, b"not a region").unwrap();

    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!((stats.recovered_pages, stats.pages), (1, 1));
    assert_eq!((stats.recovered_dropped, stats.corrupt_pages), (4, 4));
    assert!(!stray.exists());
    assert_eq!(tier.get(&key("a", "v1", 2)).unwrap().bytes, bytes(2, 9000));
    // Freed slots are reused, lowest first; the good page is untouched.
    for page in 10..13 {
        tier.put(key("b", "v1", page), &bytes(page, 100), COST);
    }
    assert_eq!(tier.slot_of(&key("b", "v1", 10)).unwrap().1, header_flip);
    assert_eq!(tier.slot_of(&key("b", "v1", 11)).unwrap().1, garbage);
    assert_eq!(tier.get(&key("a", "v1", 2)).unwrap().bytes, bytes(2, 9000));
    assert_eq!(tier.get(&key("b", "v1", 12)).unwrap().bytes, bytes(12, 100));
}

/// What `put_at` does after a write that failed partway (a full disk): the
/// slot's header is zeroed, so a restart finds the slot free, not a page
/// whose data is damaged (`tests/disk_full.rs` makes the real failure).
#[test]
fn a_blanked_slot_is_free_at_recovery_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..2 {
        tier.put(key("a", "v1", page), &bytes(page, 9000), COST);
    }
    let (file, offset) = tier.slot_of(&key("a", "v1", 0)).unwrap();
    assert_eq!(region_files(dir.path()), vec![file], "one region holds both");
    let slot = (offset / tier.regions().geometry().slot_bytes) as u32;
    tier.regions().blank(slot).unwrap();
    drop(tier);

    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!(
        (stats.recovered_pages, stats.recovered_dropped, stats.corrupt_pages),
        (1, 0, 0)
    );
    assert!(tier.get(&key("a", "v1", 0)).is_none());
    assert_eq!(tier.get(&key("a", "v1", 1)).unwrap().bytes, bytes(1, 9000));
}

#[test]
fn the_old_layout_and_other_slot_sizes_are_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("pages/ab")).unwrap();
    fs::write(dir.path().join("pages/ab/0123.page"), b"an old page").unwrap();
    fs::create_dir_all(dir.path().join("tmp")).unwrap();
    fs::write(dir.path().join("tmp/1234-5.tmp"), b"half a page").unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.put(key("a", "v", 0), b"x", COST);
    tier.wait_recovered();
    assert!(!dir.path().join("pages").exists());
    assert!(!dir.path().join("tmp").exists());
    drop(tier);
    // Reopened with another page size: the slots do not fit, start empty.
    let tier = open_paged(dir.path(), 1 << 30, 64 << 10, false);
    tier.wait_recovered();
    assert_eq!(tier.page_count(), 0);
    assert!(tier.get(&key("a", "v", 0)).is_none());
    let dirs: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "LOCK")
        .collect();
    assert_eq!(dirs, [format!("regions-{}", 64 << 10)]);
}

#[test]
fn the_budget_holds_for_every_policy() {
    const BUDGET: u64 = 100 * 1024;
    for policy in PolicyKind::ALL {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(config(dir.path(), BUDGET, policy, false), DiskMetrics::noop()).unwrap();
        tier.wait_recovered();
        let mut rng = Rng(42);
        for i in 0..400 {
            let page = rng.below(60);
            let len = (page * 2311 % 20_000) as usize;
            let k = key("obj", "v", page);
            match tier.get(&k) {
                Some(got) => assert_eq!(got.bytes, bytes(page, len), "{policy}: wrong bytes"),
                None => tier.put(k, &bytes(page, len), COST),
            }
            assert!(tier.used_bytes() <= BUDGET, "{policy}: over budget");
            if i % 10 == 0 {
                assert!(bytes_on_disk(dir.path()) <= BUDGET, "{policy}: files over budget");
            }
        }
        let stats = tier.stats();
        assert!(stats.evictions > 0 && stats.hits > 0, "{policy}: {stats:?}");
        let mapped = tier.lock().mapped_pages();
        assert_eq!(mapped, tier.page_count());

        // A page larger than a slot is not written and evicts nothing.
        let before = tier.page_count();
        tier.put(key("big", "v", 0), &vec![0; PAGE as usize + 1], COST);
        assert!(tier.get(&key("big", "v", 0)).is_none());
        assert_eq!(tier.page_count(), before);
    }
}

#[test]
fn a_smaller_budget_keeps_the_pages_that_fit() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..20 {
        tier.put(key("a", "v", page), &bytes(page, 4096), COST);
    }
    drop(tier);
    let tier = open(dir.path(), 5 * SLOT);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!((stats.pages, stats.used_bytes), (5, 5 * SLOT));
    for page in 0..5 {
        assert_eq!(tier.get(&key("a", "v", page)).unwrap().bytes, bytes(page, 4096));
    }
    let files = region_files(dir.path());
    assert_eq!(files.len(), 1);
    assert_eq!(fs::metadata(&files[0]).unwrap().len(), 5 * SLOT);
}

#[test]
fn dropping_other_versions() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..3 {
        tier.put(key("a", "v1", page), &bytes(page, 100), COST);
        tier.put(key("b", "v1", page), &bytes(page, 100), COST);
    }
    for page in 0..2 {
        tier.put(key("a", "v2", page), &bytes(page + 10, 100), COST);
    }
    assert_eq!(tier.drop_other_versions("s", "a", "v2"), 3);
    assert_eq!(tier.drop_other_versions("s", "a", "v2"), 0);
    assert_eq!(tier.drop_other_versions("other-store", "b", "v2"), 0);
    assert!(tier.get(&key("a", "v1", 0)).is_none());
    assert_eq!(tier.get(&key("a", "v2", 1)).unwrap().bytes, bytes(11, 100));
    assert_eq!(tier.get(&key("b", "v1", 2)).unwrap().bytes, bytes(2, 100));
    assert_eq!(tier.page_count(), 5);
    assert_eq!(tier.used_bytes(), 5 * SLOT);
}

#[test]
fn versions_dropped_during_recovery_stay_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..50 {
        tier.put(key("a", "v1", page), &bytes(page, 100), COST);
    }
    tier.put(key("a", "v2", 0), &bytes(7, 100), COST);
    drop(tier);
    // Whether recovery already indexed some v1 pages or not, none survive.
    let tier = open(dir.path(), 1 << 30);
    tier.drop_other_versions("s", "a", "v2");
    tier.wait_recovered();
    assert_eq!(tier.page_count(), 1);
    assert_eq!(tier.get(&key("a", "v2", 0)).unwrap().bytes, bytes(7, 100));
}

#[test]
fn direct_io_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [0, 1, 4095, 4096, 4097, 100_000, 1 << 20];
    let tier = open_paged(dir.path(), 1 << 30, 1 << 20, true);
    tier.wait_recovered();
    for (page, len) in lens.iter().enumerate() {
        tier.put(key("a", "v", page as u64), &bytes(page as u64, *len), COST);
    }
    for (page, len) in lens.iter().enumerate() {
        assert_eq!(
            tier.get(&key("a", "v", page as u64)).unwrap().bytes,
            bytes(page as u64, *len)
        );
    }
    let all: Vec<PageKey> = (0..lens.len() as u64).map(|p| key("a", "v", p)).collect();
    for (page, got) in tier.get_many(&all).into_iter().enumerate() {
        assert_eq!(got.unwrap().bytes, bytes(page as u64, lens[page]));
    }
    // The tier uses O_DIRECT exactly where the filesystem takes it.
    assert_eq!(
        tier.direct_io_active(),
        accepts_o_direct(dir.path()),
        "O_DIRECT on {}",
        dir.path().display()
    );
    drop(tier);
    let tier = open_paged(dir.path(), 1 << 30, 1 << 20, true);
    tier.wait_recovered();
    for (page, len) in lens.iter().enumerate() {
        assert_eq!(
            tier.get(&key("a", "v", page as u64)).unwrap().bytes,
            bytes(page as u64, *len)
        );
    }
    assert_eq!(tier.stats().hits, lens.len() as u64);
}

/// Where the filesystem refuses `O_DIRECT` (tmpfs before Linux 6.6), reads
/// fall back to buffered ones. Runs only where `/dev/shm` exists.
#[test]
fn direct_io_falls_back_where_refused() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        return;
    };
    let tier = DiskTier::open(config(dir.path(), 1 << 30, PolicyKind::Lfu, true), DiskMetrics::noop()).unwrap();
    for page in 0..3 {
        tier.put(key("a", "v", page), &bytes(page, 5000 * page as usize), COST);
    }
    for page in 0..3 {
        assert_eq!(
            tier.get(&key("a", "v", page)).unwrap().bytes,
            bytes(page, 5000 * page as usize)
        );
    }
    assert_eq!(
        tier.direct_io_active(),
        accepts_o_direct(dir.path()),
        "O_DIRECT on /dev/shm"
    );
}

/// Whether files in `dir` can be opened with `O_DIRECT`.
fn accepts_o_direct(dir: &Path) -> bool {
    super::medium::accepts_o_direct(dir).unwrap()
}

#[test]
fn while_recovery_runs_new_pages_go_to_free_slots_and_old_ones_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..200 {
        tier.put(key("a", "v", page), &bytes(page, 300), COST);
    }
    drop(tier);

    // Recovery not started: old pages are misses (never wrong bytes) and
    // new pages go to slots past the regions found at open.
    let tier = DiskTier::create(config(dir.path(), 1 << 30, PolicyKind::Lru, false), DiskMetrics::noop()).unwrap();
    assert!(tier.get(&key("a", "v", 5)).is_none());
    for page in 0..10 {
        tier.put(key("new", "v", page), &bytes(1000 + page, 300), COST);
    }
    recovery::spawn(&tier).unwrap();
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!(
        (stats.pages, stats.recovered_pages, stats.used_bytes),
        (210, 200, 210 * SLOT)
    );
    for page in 0..200 {
        assert_eq!(tier.get(&key("a", "v", page)).unwrap().bytes, bytes(page, 300));
    }
    for page in 0..10 {
        assert_eq!(tier.get(&key("new", "v", page)).unwrap().bytes, bytes(1000 + page, 300));
    }
    drop(tier);

    // With recovery running, reads and writes go on; afterwards all is there.
    let tier = open(dir.path(), 1 << 30);
    for page in (0..200).rev() {
        if let Some(got) = tier.get(&key("a", "v", page)) {
            assert_eq!(got.bytes, bytes(page, 300));
        }
        tier.put(key("during", "v", page), &bytes(2000 + page, 300), COST);
    }
    tier.wait_recovered();
    assert_eq!(tier.stats().recovered_pages, 210);
    for page in 0..200 {
        assert_eq!(tier.get(&key("a", "v", page)).unwrap().bytes, bytes(page, 300));
        if let Some(got) = tier.get(&key("during", "v", page)) {
            assert_eq!(got.bytes, bytes(2000 + page, 300));
        }
    }
}

#[test]
fn concurrent_puts_and_gets_never_return_wrong_bytes() {
    const BUDGET: u64 = 20 * SLOT;
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), BUDGET);
    let len_of = |page: u64| (page * 997 % 9000) as usize;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let tier = &tier;
            s.spawn(move || {
                let mut rng = Rng(t + 1);
                for _ in 0..600 {
                    let page = rng.below(80);
                    if page.is_multiple_of(7) {
                        let keys: Vec<PageKey> = (page..page + 4).map(|p| key("a", "v", p)).collect();
                        for (p, got) in (page..).zip(tier.get_many(&keys)) {
                            if let Some(got) = got {
                                assert_eq!(got.bytes, bytes(p, len_of(p)), "wrong bytes for page {p}");
                            }
                        }
                        continue;
                    }
                    let k = key("a", "v", page);
                    match tier.get(&k) {
                        Some(got) => assert_eq!(got.bytes, bytes(page, len_of(page)), "wrong bytes for page {page}"),
                        None => tier.put(k, &bytes(page, len_of(page)), COST),
                    }
                    assert!(tier.used_bytes() <= BUDGET);
                }
            });
        }
    });
    let stats = tier.stats();
    assert!(stats.hits > 0 && stats.evictions > 0, "{stats:?}");
    assert_eq!(stats.corrupt_pages, 0);
    assert!(bytes_on_disk(dir.path()) <= BUDGET);
    let mapped = tier.lock().mapped_pages();
    assert_eq!(mapped, tier.page_count());
    // Every slot is accounted for once writers are done: the index can
    // fill the whole budget again.
    for page in 100..120 {
        tier.put(key("b", "v", page), &bytes(page, 100), COST);
    }
    assert_eq!(tier.page_count(), 20);
}

#[test]
fn refetch_costs_survive_a_restart() {
    // Three pages fill the budget; the one cheapest to refetch must be the
    // victim after a restart too, which only the costs stored in the headers
    // can tell (by the model they are equal).
    let dir = tempfile::tempdir().unwrap();
    let open_wlfu = || {
        let tier = DiskTier::open(
            config(dir.path(), 3 * SLOT, PolicyKind::WeightedLfu, false),
            DiskMetrics::noop(),
        )
        .unwrap();
        tier.wait_recovered();
        tier
    };
    let tier = open_wlfu();
    for (page, cost) in [(0, 40e6), (1, 2e6), (2, 30e6)] {
        tier.put(key("a", "v", page), &bytes(page, 4096), cost);
    }
    drop(tier);
    let tier = open_wlfu();
    assert_eq!(tier.page_count(), 3);
    tier.put(key("a", "v", 3), &bytes(3, 4096), 1e6);
    assert!(tier.get(&key("a", "v", 1)).is_none(), "the cheap page should have gone");
    for page in [0, 2, 3] {
        assert!(tier.get(&key("a", "v", page)).is_some(), "page {page}");
    }
}

#[test]
fn metrics_register_with_a_recorder() {
    let metrics = DiskMetrics::register(&metrics::NoopRecorder);
    let dir = tempfile::tempdir().unwrap();
    let tier = DiskTier::open(config(dir.path(), 1 << 20, PolicyKind::WeightedLfu, false), metrics).unwrap();
    tier.put(key("a", "v", 0), b"abc", COST);
    assert_eq!(&tier.get(&key("a", "v", 0)).unwrap().bytes[..], b"abc");
    tier.record_miss_bytes(10);
    assert_eq!(tier.stats().miss_bytes, 10);
}

/// Times recovery of 100k small pages and reads of them one by one and in
/// runs (not asserted; run with
/// `cargo test -p silt-cache --release -- --ignored --nocapture recovery_of_100k`).
#[test]
#[ignore]
fn recovery_of_100k_pages_timing() {
    const PAGES: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let tier = open_paged(dir.path(), 1 << 40, 4096, true);
    tier.wait_recovered();
    let started = Instant::now();
    let data = bytes(1, 4096);
    for page in 0..PAGES {
        tier.put(key("bench", "v", page), &data, COST);
    }
    eprintln!("wrote {PAGES} pages in {:?}", started.elapsed());
    drop(tier);

    let started = Instant::now();
    let tier = open_paged(dir.path(), 1 << 40, 4096, true);
    let opened = started.elapsed();
    tier.wait_recovered();
    let recovered = started.elapsed();
    assert_eq!(tier.page_count() as u64, PAGES, "{:?}", tier.stats());
    eprintln!("open returned after {opened:?}, recovery of {PAGES} pages took {recovered:?}");
    let started = Instant::now();
    for page in 0..PAGES {
        assert!(tier.get(&key("bench", "v", page)).is_some());
    }
    let one_by_one = started.elapsed();
    let started = Instant::now();
    for first in (0..PAGES).step_by(16) {
        let keys: Vec<PageKey> = (first..(first + 16).min(PAGES)).map(|p| key("bench", "v", p)).collect();
        assert!(tier.get_many(&keys).iter().all(Option::is_some));
    }
    eprintln!(
        "read {PAGES} pages one by one in {one_by_one:?}, 16 at a time in {:?}",
        started.elapsed()
    );
}

#[test]
fn a_directory_is_owned_by_one_tier_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), 1 << 20);
    let err = DiskTier::open(config(dir.path(), 1 << 20, PolicyKind::Lru, false), DiskMetrics::noop())
        .err()
        .expect("a second tier on the same directory must be refused");
    assert!(err.to_string().contains("in use by another process"), "{err}");
    first.wait_recovered();
    drop(first);
    let reopened = DiskTier::open(config(dir.path(), 1 << 20, PolicyKind::Lru, false), DiskMetrics::noop());
    assert!(reopened.is_ok(), "the lock is released when the tier is dropped");
}

/// With `O_DIRECT` in effect the tier's own writes and reads leave nothing
/// in the OS page cache (`mincore` on every region file); buffered I/O, the
/// control, leaves the files resident. Where the filesystem refuses
/// `O_DIRECT`, the tier says so and falls back.
#[test]
fn direct_io_keeps_the_tiers_files_out_of_the_os_page_cache() {
    let resident = |direct: bool| {
        let dir = tempfile::tempdir().unwrap();
        let tier = open_paged(dir.path(), 1 << 30, 300_000, direct);
        tier.wait_recovered();
        for page in 0..8 {
            tier.put(key("a", "v", page), &bytes(page, 300_000), COST);
            assert_eq!(tier.get(&key("a", "v", page)).unwrap().bytes, bytes(page, 300_000));
        }
        let all: Vec<PageKey> = (0..8).map(|p| key("a", "v", p)).collect();
        assert!(tier.get_many(&all).iter().all(Option::is_some));
        let files = region_files(dir.path());
        assert_eq!(files.len(), 1);
        let pages: usize = files.iter().map(|f| super::io::resident_pages(f).unwrap()).sum();
        (tier.direct_io_active(), accepts_o_direct(dir.path()), pages)
    };
    let (active, accepted, pages) = resident(true);
    assert_eq!(
        active, accepted,
        "O_DIRECT in effect exactly where the filesystem takes it"
    );
    if accepted {
        assert_eq!(pages, 0, "region files in the OS page cache despite O_DIRECT");
        let (active, _, buffered) = resident(false);
        assert!(!active);
        assert!(
            buffered > 0,
            "the buffered control left nothing resident: the check cannot tell"
        );
    }
}
