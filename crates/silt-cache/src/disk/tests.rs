//! Tests of the disk tier on real files in temporary directories.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::{DiskConfig, DiskMetrics, DiskTier, recovery};
use crate::page_cache::PageKey;
use crate::policy::PolicyKind;

/// Refetch cost given to pages whose cost does not matter to the test.
const COST: f64 = 1e6;

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
        direct_io,
        policy,
        reservations: None,
    }
}

fn open(dir: &Path, budget_bytes: u64) -> Arc<DiskTier> {
    DiskTier::open(config(dir, budget_bytes, PolicyKind::Lru, false), DiskMetrics::noop()).unwrap()
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

fn page_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for shard in fs::read_dir(dir.join("pages")).unwrap() {
        for f in fs::read_dir(shard.unwrap().path()).unwrap() {
            files.push(f.unwrap().path());
        }
    }
    files
}

fn bytes_on_disk(dir: &Path) -> u64 {
    page_files(dir)
        .iter()
        .map(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
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
    for page in 0..10 {
        tier.put(key("a", "v1", page), &bytes(page, 1000 + page as usize * 3000), COST);
    }
    assert_eq!(tier.get(&key("a", "v1", 3)).unwrap(), bytes(3, 10_000));
    let used = tier.used_bytes();
    tier.wait_recovered();
    drop(tier);

    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!((stats.recovered_pages, stats.pages, stats.used_bytes), (10, 10, used));
    for page in 0..10 {
        assert_eq!(
            tier.get(&key("a", "v1", page)).unwrap(),
            bytes(page, 1000 + page as usize * 3000)
        );
    }
    assert!(tier.get(&key("a", "v1", 10)).is_none());
    assert!(tier.get(&key("a", "v2", 0)).is_none());
    let stats = tier.stats();
    assert_eq!((stats.hits, stats.misses, stats.corrupt_pages), (10, 2, 0));
}

#[test]
fn a_flipped_data_byte_is_a_miss_and_deletes_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let k = key("a", "v1", 0);
    tier.put(k.clone(), &bytes(1, 5000), COST);
    let path = tier.page_path(&k);
    let mut file = fs::read(&path).unwrap();
    file[4096 + 1234] ^= 0x20;
    fs::write(&path, file).unwrap();

    assert!(tier.get(&k).is_none());
    let stats = tier.stats();
    assert_eq!(
        (stats.corrupt_pages, stats.misses, stats.pages, stats.used_bytes),
        (1, 1, 0, 0)
    );
    assert!(!path.exists());
    assert!(page_files(dir.path()).is_empty());
}

#[test]
fn damaged_files_are_dropped_at_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..3 {
        tier.put(key("a", "v1", page), &bytes(page, 9000), COST);
    }
    let truncated = tier.page_path(&key("a", "v1", 0));
    let header_flip = tier.page_path(&key("a", "v1", 1));
    let good = tier.page_path(&key("a", "v1", 2));
    drop(tier);
    let len = fs::metadata(&truncated).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let mut file = fs::read(&header_flip).unwrap();
    file[17] ^= 1; // data length
    fs::write(&header_flip, file).unwrap();
    let garbage = dir.path().join("pages/ab/0123456789abcdef0123456789abcdef.page");
    fs::write(&garbage, bytes(99, 5000)).unwrap();
    let short = dir.path().join("pages/cd/short.page");
    fs::write(&short, b"SILTPAGE").unwrap();
    // A valid page under a name that is not its key's: never found by a read.
    let misplaced = dir.path().join("pages/00/00000000000000000000000000000000.page");
    fs::copy(page_files(dir.path()).iter().find(|p| **p == good).unwrap(), &misplaced).unwrap();

    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!((stats.recovered_pages, stats.pages), (1, 1));
    assert_eq!((stats.recovered_dropped, stats.corrupt_pages), (5, 5));
    for path in [&truncated, &header_flip, &garbage, &short, &misplaced] {
        assert!(!path.exists(), "{} not deleted", path.display());
    }
    assert_eq!(page_files(dir.path()).len(), 1);
    assert_eq!(tier.get(&key("a", "v1", 2)).unwrap(), bytes(2, 9000));
}

#[test]
fn leftover_temporary_files_are_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("tmp")).unwrap();
    let leftover = dir.path().join("tmp/1234-5.tmp");
    fs::write(&leftover, b"half a page").unwrap();
    let tier = open(dir.path(), 1 << 20);
    assert!(!leftover.exists());
    tier.put(key("a", "v", 0), b"x", COST);
    assert_eq!(
        fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0,
        "writes leave no temporary files"
    );
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
                Some(got) => assert_eq!(got, bytes(page, len), "{policy}: wrong bytes"),
                None => tier.put(k, &bytes(page, len), COST),
            }
            assert!(tier.used_bytes() <= BUDGET, "{policy}: over budget");
            if i % 10 == 0 {
                assert!(bytes_on_disk(dir.path()) <= BUDGET, "{policy}: files over budget");
                assert_eq!(
                    page_files(dir.path()).len(),
                    tier.page_count(),
                    "{policy}: files vs index"
                );
            }
        }
        let stats = tier.stats();
        assert!(stats.evictions > 0 && stats.hits > 0, "{policy}: {stats:?}");
        let mapped = tier.lock().mapped_pages();
        assert_eq!(mapped, tier.page_count());

        // A page larger than the budget is not written and evicts nothing.
        let before = tier.page_count();
        tier.put(key("big", "v", 0), &vec![0; BUDGET as usize], COST);
        assert!(tier.get(&key("big", "v", 0)).is_none());
        assert_eq!(tier.page_count(), before);
    }
}

#[test]
fn recovery_evicts_down_to_a_smaller_budget() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..20 {
        tier.put(key("a", "v", page), &bytes(page, 4096), COST);
    }
    drop(tier);
    let tier = open(dir.path(), 5 * 8192);
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!((stats.pages, stats.used_bytes, stats.evictions), (5, 5 * 8192, 15));
    assert_eq!(page_files(dir.path()).len(), 5);
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
    assert_eq!(tier.get(&key("a", "v2", 1)).unwrap(), bytes(11, 100));
    assert_eq!(tier.get(&key("b", "v1", 2)).unwrap(), bytes(2, 100));
    assert_eq!((tier.page_count(), page_files(dir.path()).len()), (5, 5));
    assert_eq!(tier.used_bytes(), 5 * 8192);
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
    assert_eq!((tier.page_count(), page_files(dir.path()).len()), (1, 1));
    assert_eq!(tier.get(&key("a", "v2", 0)).unwrap(), bytes(7, 100));
}

#[test]
fn direct_io_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [0, 1, 4095, 4096, 4097, 100_000, 1 << 20];
    let tier = DiskTier::open(
        config(dir.path(), 1 << 30, PolicyKind::Sieve, true),
        DiskMetrics::noop(),
    )
    .unwrap();
    tier.wait_recovered();
    for (page, len) in lens.iter().enumerate() {
        tier.put(key("a", "v", page as u64), &bytes(page as u64, *len), COST);
    }
    for (page, len) in lens.iter().enumerate() {
        assert_eq!(tier.get(&key("a", "v", page as u64)).unwrap(), bytes(page as u64, *len));
    }
    // The tier reads with O_DIRECT exactly where the filesystem takes it.
    assert_eq!(
        tier.direct_io_active(),
        accepts_o_direct(dir.path()),
        "O_DIRECT on {}",
        dir.path().display()
    );
    drop(tier);
    let tier = DiskTier::open(
        config(dir.path(), 1 << 30, PolicyKind::Sieve, true),
        DiskMetrics::noop(),
    )
    .unwrap();
    for (page, len) in lens.iter().enumerate() {
        assert_eq!(tier.get(&key("a", "v", page as u64)).unwrap(), bytes(page as u64, *len));
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
            tier.get(&key("a", "v", page)).unwrap(),
            bytes(page, 5000 * page as usize)
        );
    }
    assert_eq!(
        tier.direct_io_active(),
        accepts_o_direct(dir.path()),
        "O_DIRECT on /dev/shm"
    );
}

/// Whether files in `dir` can be opened with `O_DIRECT` (probed on a file
/// of its own, the way the tier's first read finds out).
fn accepts_o_direct(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join("o_direct_probe");
    std::fs::write(&probe, vec![0u8; 4096]).unwrap();
    let accepted = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    std::fs::remove_file(probe).unwrap();
    accepted
}

#[test]
fn reads_during_recovery_find_pages_not_recovered_yet() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 30);
    tier.wait_recovered();
    for page in 0..200 {
        tier.put(key("a", "v", page), &bytes(page, 300), COST);
    }
    drop(tier);

    // Recovery not started: every read goes to the file and indexes it.
    let tier = DiskTier::create(config(dir.path(), 1 << 30, PolicyKind::Lru, false), DiskMetrics::noop()).unwrap();
    for page in 0..100 {
        assert_eq!(tier.get(&key("a", "v", page)).unwrap(), bytes(page, 300));
    }
    assert!(tier.get(&key("a", "v", 1000)).is_none());
    assert_eq!((tier.page_count(), tier.stats().recovered_pages), (100, 100));
    recovery::spawn(&tier).unwrap();
    tier.wait_recovered();
    let stats = tier.stats();
    assert_eq!(
        (stats.pages, stats.recovered_pages, stats.used_bytes),
        (200, 200, 200 * 8192)
    );
    drop(tier);

    // With recovery running: reads right after open still hit.
    let tier = open(dir.path(), 1 << 30);
    for page in (0..200).rev() {
        assert_eq!(tier.get(&key("a", "v", page)).unwrap(), bytes(page, 300));
    }
    tier.wait_recovered();
    assert_eq!((tier.page_count(), tier.stats().recovered_pages), (200, 200));
}

#[test]
fn concurrent_puts_and_gets_never_return_wrong_bytes() {
    const BUDGET: u64 = 40 * 12288;
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
                    let k = key("a", "v", page);
                    match tier.get(&k) {
                        Some(got) => assert_eq!(got, bytes(page, len_of(page)), "wrong bytes for page {page}"),
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
    // Every file on disk is accounted for (no orphans once writers are done).
    assert!(page_files(dir.path()).len() <= tier.page_count());
    let mapped = tier.lock().mapped_pages();
    assert_eq!(mapped, tier.page_count());
    assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
}

#[test]
fn refetch_costs_survive_a_restart() {
    // Three pages of 4 KiB (8 KiB charged each) fill the budget; the one
    // cheapest to refetch must be the victim after a restart too, which only
    // the costs stored in the headers can tell (by the model they are equal).
    let dir = tempfile::tempdir().unwrap();
    let open_wlfu = || {
        let tier = DiskTier::open(
            config(dir.path(), 3 * 8192, PolicyKind::WeightedLfu, false),
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
    assert_eq!(&tier.get(&key("a", "v", 0)).unwrap()[..], b"abc");
    tier.record_miss_bytes(10);
    assert_eq!(tier.stats().miss_bytes, 10);
}

/// Times recovery of 100k small pages (not asserted; run with
/// `cargo test -p silt-cache --release -- --ignored --nocapture recovery_of_100k`).
#[test]
#[ignore]
fn recovery_of_100k_pages_timing() {
    const PAGES: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 40);
    tier.wait_recovered();
    let started = Instant::now();
    let data = bytes(1, 1000);
    for page in 0..PAGES {
        tier.put(key("bench", "v", page), &data, COST);
    }
    eprintln!("wrote {PAGES} pages in {:?}", started.elapsed());
    drop(tier);

    let started = Instant::now();
    let tier = open(dir.path(), 1 << 40);
    let opened = started.elapsed();
    assert_eq!(&tier.get(&key("bench", "v", PAGES - 1)).unwrap()[..], &data[..]);
    let first_get = started.elapsed();
    tier.wait_recovered();
    let recovered = started.elapsed();
    assert_eq!(tier.page_count() as u64, PAGES);
    eprintln!(
        "open returned after {opened:?}, first get after {first_get:?}, recovery of {PAGES} pages took {recovered:?}"
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
/// in the OS page cache (`mincore` on every page file); buffered I/O, the
/// control, leaves the files resident. Where the filesystem refuses
/// `O_DIRECT`, the tier says so and falls back.
#[test]
fn direct_io_keeps_the_tiers_files_out_of_the_os_page_cache() {
    let resident = |direct: bool| {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(
            config(dir.path(), 1 << 30, PolicyKind::Lru, direct),
            DiskMetrics::noop(),
        )
        .unwrap();
        tier.wait_recovered();
        for page in 0..8 {
            tier.put(key("a", "v", page), &bytes(page, 300_000), COST);
            assert_eq!(tier.get(&key("a", "v", page)).unwrap(), bytes(page, 300_000));
        }
        let files = page_files(dir.path());
        assert_eq!(files.len(), 8);
        let pages: usize = files.iter().map(|f| super::io::resident_pages(f).unwrap()).sum();
        (tier.direct_io_active(), accepts_o_direct(dir.path()), pages)
    };
    let (active, accepted, pages) = resident(true);
    assert_eq!(
        active, accepted,
        "O_DIRECT in effect exactly where the filesystem takes it"
    );
    if accepted {
        assert_eq!(pages, 0, "page files in the OS page cache despite O_DIRECT");
        let (active, _, buffered) = resident(false);
        assert!(!active);
        assert!(
            buffered > 0,
            "the buffered control left nothing resident: the check cannot tell"
        );
    }
}
