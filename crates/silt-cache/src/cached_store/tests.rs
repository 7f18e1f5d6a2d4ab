//! Tests of `CachedStore`: ranges, versions, freshness, speculation, dedup.

use super::*;
use crate::{CacheMetrics, ColumnCache, PageCache, PageCacheConfig, PageStore};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use silt_store::{MeteredStore, StoreMetrics};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

fn tiers(page: u64, merge_gap: u64) -> Arc<CacheTiers> {
    let cache = PageCache::new(
        PageCacheConfig {
            page_size: page,
            capacity_bytes: 1 << 20,
        },
        CacheMetrics::noop(),
    );
    CacheTiers::new(
        PageStore::builder(cache).merge_gap(merge_gap).build(),
        ColumnCache::new(1 << 20, CacheMetrics::noop()),
    )
}

fn setup(page: u64, freshness: Freshness) -> (Arc<InMemory>, CachedStore) {
    let mem = Arc::new(InMemory::new());
    (mem.clone(), CachedStore::new(mem, tiers(page, 0), "mem", freshness))
}

fn ns(p: &str) -> Path {
    Path::from(format!("mem/{p}"))
}

#[tokio::test]
async fn ranges_match_the_object_across_pages() {
    let (mem, store) = setup(7, Freshness::Always);
    let data: Vec<u8> = (0..100u8).collect();
    mem.put(&Path::from("a/b.bin"), data.clone().into()).await.unwrap();
    let p = ns("a/b.bin");
    for (s, e) in [(0u64, 1u64), (3, 20), (6, 7), (7, 14), (90, 100), (0, 100), (50, 51)] {
        let got = store.get_range(&p, s..e).await.unwrap();
        assert_eq!(&got[..], &data[s as usize..e as usize], "range {s}..{e}");
    }
    let got = store.get_ranges(&p, &[1..2, 95..100]).await.unwrap();
    assert_eq!(&got[1][..], &data[95..100]);
    let listed: Vec<ObjectMeta> = store.list(Some(&ns("a"))).try_collect().await.unwrap();
    assert_eq!(listed[0].location, p, "listings are namespaced");
    assert!(store.get_range(&Path::from("a/b.bin"), 0..1).await.is_err());
}

#[tokio::test]
async fn overwritten_object_is_not_served_stale() {
    let (mem, store) = setup(4, Freshness::Always);
    let p = ns("x");
    mem.put(&Path::from("x"), vec![1u8; 16].into()).await.unwrap();
    let _ = store.list(None).collect::<Vec<_>>().await;
    assert_eq!(&store.get_range(&p, 0..4).await.unwrap()[..], &[1, 1, 1, 1]);
    mem.put(&Path::from("x"), vec![2u8; 16].into()).await.unwrap();
    // A listing after the overwrite validates the new version.
    let _ = store.list(None).collect::<Vec<_>>().await;
    assert_eq!(&store.get_range(&p, 0..4).await.unwrap()[..], &[2, 2, 2, 2]);
}

#[tokio::test]
async fn read_at_never_mixes_versions() {
    let (mem, store) = setup(4, Freshness::Always);
    let p = ns("v");
    mem.put(&Path::from("v"), vec![1u8; 16].into()).await.unwrap();
    let v1 = store.read_version(&p).await.unwrap();
    assert_eq!(&store.read_at(&p, &v1, 0..4).await.unwrap()[..], &[1; 4]);
    mem.put(&Path::from("v"), vec![2u8; 16].into()).await.unwrap();
    // Cached pages of the pinned version are served; a miss fails its
    // If-Match instead of bringing in bytes of the new version.
    assert_eq!(&store.read_at(&p, &v1, 0..4).await.unwrap()[..], &[1; 4]);
    let err = store.read_at(&p, &v1, 8..12).await.unwrap_err();
    assert!(matches!(err, object_store::Error::Precondition { .. }), "{err}");
    assert!(CacheError::find(&err).is_some_and(CacheError::is_changed), "{err}");
    let v2 = store.revalidate(&p).await.unwrap();
    assert_ne!(v1.tag, v2.tag);
    assert_eq!(store.read_version(&p).await.unwrap().tag, v2.tag);
    assert_eq!(&store.read_at(&p, &v2, 0..16).await.unwrap()[..], &[2; 16]);
    assert!(store.read_at(&p, &v2, 17..18).await.is_err(), "past the end");
    assert!(store.read_at(&p, &v2, 8..20).await.is_err(), "partly past the end");
}

#[tokio::test]
async fn ttl_and_immutable_reuse_listings() {
    for (freshness, sees_new) in [
        (Freshness::Always, true),
        (Freshness::Ttl(std::time::Duration::from_secs(3600)), false),
        (Freshness::Immutable, false),
    ] {
        let (mem, store) = setup(4, freshness);
        mem.put(&Path::from("a"), vec![1u8; 4].into()).await.unwrap();
        assert_eq!(store.list(None).collect::<Vec<_>>().await.len(), 1);
        mem.put(&Path::from("b"), vec![1u8; 4].into()).await.unwrap();
        let n = store.list(None).collect::<Vec<_>>().await.len();
        assert_eq!(n == 2, sees_new, "{freshness}");
    }
}

/// A store over `mem` whose requests take `latency`, counting LISTs.
fn slow_counted(mem: Arc<InMemory>, latency: std::time::Duration) -> (CachedStore, Arc<std::sync::atomic::AtomicU64>) {
    let lists = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let slow: Arc<dyn ObjectStore> = Arc::new(silt_store::FaultyStore::new(
        mem,
        silt_store::FaultConfig {
            latency,
            ..Default::default()
        },
    ));
    let counted = StoreMetrics {
        list_requests: metrics::Counter::from_arc(lists.clone()),
        ..StoreMetrics::noop()
    };
    let metered: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(slow, counted));
    (CachedStore::new(metered, tiers(64, 0), "mem", Freshness::Always), lists)
}

#[tokio::test]
async fn a_gated_warm_listing_is_speculative_and_confirmed_after_the_query_started() {
    let mem = Arc::new(InMemory::new());
    mem.put(&Path::from("o"), vec![1u8; 10].into()).await.unwrap();
    let (store, lists) = slow_counted(mem.clone(), std::time::Duration::ZERO);
    let cold: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
    assert_eq!(cold[0].size, 10);
    // Unchanged: the last listing, confirmed by a new LIST.
    let gate = ValidationGate::new();
    let warm: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    assert_eq!(warm, cold);
    assert!(gate.is_speculative());
    gate.confirm().await.unwrap();
    assert_eq!(lists.load(std::sync::atomic::Ordering::Relaxed), 2);
    // Overwritten: the query starts on the old listing, the gate says changed.
    mem.put(&Path::from("o"), vec![2u8; 20].into()).await.unwrap();
    let gate = ValidationGate::new();
    let stale: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    assert_eq!(stale[0].size, 10);
    assert!(gate.confirm().await.unwrap_err().is_changed());
    // The restart starts on the new listing, confirmed.
    let gate = ValidationGate::new();
    let fresh: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    assert_eq!(fresh[0].size, 20);
    gate.confirm().await.unwrap();
    // Added or deleted objects are changes too.
    mem.put(&Path::from("p"), vec![3u8; 5].into()).await.unwrap();
    let gate = ValidationGate::new();
    let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    assert!(gate.confirm().await.unwrap_err().is_changed(), "added");
    mem.delete(&Path::from("p")).await.unwrap();
    let gate = ValidationGate::new();
    let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    assert!(gate.confirm().await.unwrap_err().is_changed(), "deleted");
}

#[tokio::test]
async fn concurrent_queries_share_one_list_but_not_one_sent_before_they_started() {
    let mem = Arc::new(InMemory::new());
    mem.put(&Path::from("o"), vec![1u8; 10].into()).await.unwrap();
    let (store, lists) = slow_counted(mem, std::time::Duration::from_millis(50));
    let count = || lists.load(std::sync::atomic::Ordering::Relaxed);
    let _: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
    assert_eq!(count(), 1);
    // Queries that all started before any validation was sent share one.
    let gates: Vec<_> = (0..16).map(|_| ValidationGate::new()).collect();
    for gate in &gates {
        let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    }
    for gate in &gates {
        gate.confirm().await.unwrap();
    }
    assert_eq!(count(), 2, "one LIST for 16 queries");
    // A LIST sent before a query started does not confirm it.
    let early = tokio::spawn({
        let store = store.clone();
        async move { store.list(None).try_collect::<Vec<_>>().await }
    });
    while count() < 3 {
        tokio::task::yield_now().await;
    }
    let gate = ValidationGate::new();
    let _: Vec<ObjectMeta> = store.gated(gate.clone()).list(None).try_collect().await.unwrap();
    gate.confirm().await.unwrap();
    early.await.unwrap().unwrap();
    assert_eq!(count(), 4, "the query waited for a LIST of its own");
}

#[tokio::test]
async fn concurrent_misses_fetch_each_page_once() {
    let mem = Arc::new(InMemory::new());
    let got_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = StoreMetrics {
        get_bytes: metrics::Counter::from_arc(got_bytes.clone()),
        ..StoreMetrics::noop()
    };
    let metered: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(mem.clone(), counted));
    let store = CachedStore::new(metered, tiers(64, 0), "mem", Freshness::Always);
    let data: Vec<u8> = (0..=255u8).cycle().take(64 * 40).collect();
    mem.put(&Path::from("o"), data.clone().into()).await.unwrap();
    let p = ns("o");
    store.head(&p).await.unwrap();
    let reads = (0..32).map(|i| {
        let store = store.clone();
        let p = p.clone();
        tokio::spawn(async move {
            let start = (i * 37) % 1000;
            store.get_range(&p, start..start + 1500).await.unwrap()
        })
    });
    for (i, r) in futures::future::join_all(reads).await.into_iter().enumerate() {
        let start = (i * 37) % 1000;
        assert_eq!(&r.unwrap()[..], &data[start..start + 1500]);
    }
    let fetched = got_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        fetched <= data.len() as u64,
        "fetched {fetched} bytes of a {} byte object",
        data.len()
    );
}

/// `store` behind a counter of the GETs and of the bytes they return.
fn counted(store: Arc<InMemory>) -> (Arc<dyn ObjectStore>, Arc<AtomicU64>, Arc<AtomicU64>) {
    let (gets, got_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let metrics = StoreMetrics {
        get_bytes: metrics::Counter::from_arc(got_bytes.clone()),
        get_requests: metrics::Counter::from_arc(gets.clone()),
        ..StoreMetrics::noop()
    };
    (Arc::new(MeteredStore::new(store, metrics)), gets, got_bytes)
}

/// One 100-byte object (bytes 0..100) behind a [`CachedStore`] of 16-byte
/// pages, with the GETs and bytes that reached the store counted.
struct CountedReads {
    store: CachedStore,
    path: Path,
    version: ObjectVersion,
    data: Vec<u8>,
    gets: Arc<AtomicU64>,
    got_bytes: Arc<AtomicU64>,
}

impl CountedReads {
    async fn of_100_bytes_in_16_byte_pages() -> Self {
        let mem = Arc::new(InMemory::new());
        let (metered, gets, got_bytes) = counted(mem.clone());
        let store = CachedStore::new(metered, tiers(16, 0), "mem", Freshness::Always);
        let data: Vec<u8> = (0..100u8).collect();
        mem.put(&Path::from("o"), data.clone().into()).await.unwrap();
        let path = ns("o");
        let version = store.read_version(&path).await.unwrap();
        CountedReads {
            store,
            path,
            version,
            data,
            gets,
            got_bytes,
        }
    }

    async fn read(&self, range: Range<u64>) -> Bytes {
        self.store.read_at(&self.path, &self.version, range).await.unwrap()
    }

    /// GETs and bytes fetched so far.
    fn fetched(&self) -> (u64, u64) {
        (
            self.gets.load(Ordering::Relaxed),
            self.got_bytes.load(Ordering::Relaxed),
        )
    }
}

/// Reads fetch the bytes they need, not whole pages; what a page's part
/// lacks is fetched, not the page again; a repeated read fetches nothing.
#[tokio::test]
async fn reads_fetch_exact_ranges_and_pages_fill_in() {
    let reads = CountedReads::of_100_bytes_in_16_byte_pages().await;
    let (data, fetched) = (&reads.data, || reads.fetched());
    let read = |range| reads.read(range);

    assert_eq!(&read(5..37).await[..], &data[5..37]);
    assert_eq!(fetched(), (1, 32), "pages 0 and 2 are partial");
    assert_eq!(&read(5..37).await[..], &data[5..37]);
    assert_eq!(&read(20..30).await[..], &data[20..30]);
    assert_eq!(fetched(), (1, 32), "warm reads fetch nothing");
    // Page 2 holds 32..37: its rest up to 45 is fetched, then page 0's start.
    assert_eq!(&read(33..45).await[..], &data[33..45]);
    assert_eq!(fetched(), (2, 40));
    assert_eq!(&read(0..48).await[..], &data[0..48]);
    assert_eq!(fetched(), (4, 48), "0..5 and 45..48, each once");
    assert_eq!(&read(0..100).await[..], &data[..]);
    assert_eq!(fetched().1, 100, "every byte fetched once");
    assert_eq!(&read(0..100).await[..], &data[..]);
    assert_eq!(fetched().1, 100);
}

/// A read of a part of a page apart from the part held fetches the gap
/// between them too, so the page holds both: neither is fetched again (a
/// page keeps one part; before, of two apart the larger won, the newer on a
/// tie, and the other was fetched again on its next read).
#[tokio::test]
async fn a_part_apart_from_the_held_part_of_its_page_joins_it() {
    let reads = CountedReads::of_100_bytes_in_16_byte_pages().await;
    let (data, fetched) = (&reads.data, || reads.fetched());
    let read = |range| reads.read(range);

    assert_eq!(&read(2..4).await[..], &data[2..4]);
    assert_eq!(fetched(), (1, 2));
    // Page 0 holds 2..4: reading 10..12 fetches 4..12.
    assert_eq!(&read(10..12).await[..], &data[10..12]);
    assert_eq!(fetched(), (2, 10));
    assert_eq!(&read(2..4).await[..], &data[2..4]);
    assert_eq!(&read(10..12).await[..], &data[10..12]);
    assert_eq!(&read(3..11).await[..], &data[3..11]);
    assert_eq!(fetched(), (2, 10), "both parts are held");
    // Before the held part, the same: page 1 holds 28..30, then 17..19 is read.
    assert_eq!(&read(28..30).await[..], &data[28..30]);
    assert_eq!(&read(17..19).await[..], &data[17..19]);
    assert_eq!(fetched(), (4, 23));
    assert_eq!(&read(28..30).await[..], &data[28..30]);
    assert_eq!(fetched(), (4, 23));
}

/// Two reads at once of neighbouring ranges that share a page (a column
/// chunk's end and the next one's start) each fetch their own part in one
/// GET; neither waits for the other and then fetches again. Where their
/// ranges overlap, the second takes the overlap from the first's fetch.
#[tokio::test]
async fn reads_of_neighbouring_parts_of_a_page_fetch_alongside() {
    let mem = Arc::new(InMemory::new());
    let (metered, gets, got_bytes) = counted(mem.clone());
    let slow: Arc<dyn ObjectStore> = Arc::new(silt_store::FaultyStore::new(
        metered,
        silt_store::FaultConfig {
            latency: std::time::Duration::from_millis(100),
            ..Default::default()
        },
    ));
    let store = CachedStore::new(slow, tiers(64, 0), "mem", Freshness::Always);
    let data: Vec<u8> = (0..=255u8).collect();
    mem.put(&Path::from("o"), data.clone().into()).await.unwrap();
    let p = ns("o");
    let v = store.read_version(&p).await.unwrap();
    let read = |range: Range<u64>| {
        let (store, p, v) = (store.clone(), p.clone(), v.clone());
        tokio::spawn(async move { store.read_at(&p, &v, range).await.unwrap() })
    };
    let (a, b) = (read(10..100), read(100..150));
    assert_eq!(&a.await.unwrap()[..], &data[10..100]);
    assert_eq!(&b.await.unwrap()[..], &data[100..150]);
    assert_eq!(gets.load(Ordering::Relaxed), 2);
    assert_eq!(got_bytes.load(Ordering::Relaxed), 140);
    // The two parts of page 1 were merged: reading across them fetches nothing.
    assert_eq!(&read(64..128).await.unwrap()[..], &data[64..128]);
    assert_eq!(gets.load(Ordering::Relaxed), 2);

    // Overlapping: the second read fetches 200..230 and takes 180..200 from the first.
    let (a, b) = (read(150..200), read(180..230));
    assert_eq!(&a.await.unwrap()[..], &data[150..200]);
    assert_eq!(&b.await.unwrap()[..], &data[180..230]);
    assert_eq!(gets.load(Ordering::Relaxed), 4);
    assert_eq!(got_bytes.load(Ordering::Relaxed), 140 + 80, "no byte fetched twice");
    assert_eq!(&read(128..192).await.unwrap()[..], &data[128..192]);
    assert_eq!(&read(192..230).await.unwrap()[..], &data[192..230]);
    assert_eq!(gets.load(Ordering::Relaxed), 4, "the parts were joined");
}

#[tokio::test]
async fn small_gaps_merge_into_one_get() {
    let mem = Arc::new(InMemory::new());
    let store = CachedStore::new(mem.clone(), tiers(10, 20), "mem", Freshness::Always);
    let data: Vec<u8> = (0..100u8).collect();
    mem.put(&Path::from("o"), data.clone().into()).await.unwrap();
    let p = ns("o");
    // Cache pages 2 and 3, then read 0..100: pages 0-1 and 4-9 are missing,
    // separated by a 20-byte gap, so they come back in one GET.
    store.get_range(&p, 20..40).await.unwrap();
    assert_eq!(&store.get_range(&p, 0..100).await.unwrap()[..], &data[..]);
}

#[tokio::test]
async fn a_deleted_object_is_not_found_for_the_fetcher_and_its_waiters() {
    let mem = Arc::new(InMemory::new());
    mem.put(&Path::from("o"), vec![7u8; 64].into()).await.unwrap();
    let slow: Arc<dyn ObjectStore> = Arc::new(silt_store::FaultyStore::new(
        mem.clone(),
        silt_store::FaultConfig {
            latency: std::time::Duration::from_millis(50),
            ..Default::default()
        },
    ));
    let store = CachedStore::new(slow, tiers(16, 0), "mem", Freshness::Always);
    let p = ns("o");
    let v = store.read_version(&p).await.unwrap();
    mem.delete(&Path::from("o")).await.unwrap();
    let reads = (0..8).map(|_| {
        let (store, p, v) = (store.clone(), p.clone(), v.clone());
        tokio::spawn(async move { store.read_at(&p, &v, 0..16).await })
    });
    for r in futures::future::join_all(reads).await {
        let e = r.unwrap().unwrap_err();
        assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
        assert!(CacheError::find(&e).is_some_and(CacheError::is_not_found), "{e}");
    }
}

#[tokio::test]
async fn writes_are_refused() {
    let (mem, store) = setup(4, Freshness::Always);
    let err = store.put(&ns("w"), vec![1u8].into()).await.unwrap_err();
    assert!(matches!(err, object_store::Error::NotSupported { .. }), "{err}");
    assert!(mem.head(&Path::from("w")).await.is_err(), "nothing reached the store");
    assert!(mem.head(&ns("w")).await.is_err());
}

/// Under `notify`, a LIST or HEAD is trusted until a change notice: warm
/// listings and HEADs send nothing, a notice makes the next one validate
/// (and see the change), and a read that found a version gone does too.
#[tokio::test]
async fn notify_trusts_a_validation_until_a_notice() {
    let (mem, store) = setup(4, Freshness::NOTIFY);
    let (lists, heads) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let counted = StoreMetrics {
        list_requests: metrics::Counter::from_arc(lists.clone()),
        head_requests: metrics::Counter::from_arc(heads.clone()),
        ..StoreMetrics::noop()
    };
    let metered: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(mem.clone(), counted));
    let store = CachedStore::new(metered, store.tiers().clone(), "mem", Freshness::NOTIFY);
    mem.put(&Path::from("a"), vec![1u8; 4].into()).await.unwrap();
    let p = ns("a");
    for _ in 0..3 {
        assert_eq!(store.list(None).try_collect::<Vec<_>>().await.unwrap().len(), 1);
        assert_eq!(store.head(&p).await.unwrap().size, 4);
    }
    assert_eq!((lists.load(Ordering::Relaxed), heads.load(Ordering::Relaxed)), (1, 1));

    // Changed without a notice: still trusted (the sweep is the bound).
    mem.put(&Path::from("a"), vec![2u8; 8].into()).await.unwrap();
    mem.put(&Path::from("b"), vec![2u8; 4].into()).await.unwrap();
    assert_eq!(store.list(None).try_collect::<Vec<_>>().await.unwrap().len(), 1);
    assert_eq!(store.head(&p).await.unwrap().size, 4);

    store.change_notices().changed();
    assert_eq!(store.list(None).try_collect::<Vec<_>>().await.unwrap().len(), 2);
    assert_eq!(store.head(&p).await.unwrap().size, 8);
    assert_eq!((lists.load(Ordering::Relaxed), heads.load(Ordering::Relaxed)), (2, 2));
    assert_eq!(&store.get_range(&p, 4..8).await.unwrap()[..], &[2; 4]);
    assert_eq!((lists.load(Ordering::Relaxed), heads.load(Ordering::Relaxed)), (2, 2));
}

#[tokio::test]
async fn notify_with_a_short_sweep_validates_again_without_a_notice() {
    let sweep = std::time::Duration::from_millis(50);
    let (mem, store) = setup(4, Freshness::Notify { sweep });
    mem.put(&Path::from("a"), vec![1u8; 4].into()).await.unwrap();
    assert_eq!(store.list(None).collect::<Vec<_>>().await.len(), 1);
    mem.put(&Path::from("b"), vec![1u8; 4].into()).await.unwrap();
    assert_eq!(store.list(None).collect::<Vec<_>>().await.len(), 1, "trusted");
    tokio::time::sleep(sweep * 2).await;
    assert_eq!(store.list(None).collect::<Vec<_>>().await.len(), 2, "swept");
}
