//! A simulated network link between compute (the benchmark's client) and a
//! cache server: `--link BANDWIDTH/RTT` of every `silt bench` suite.
//!
//! The link is applied at the transport, never inside Silt: [`LinkProxy`] is
//! a TCP proxy on loopback that the harness puts in front of a cache server
//! (its Flight SQL listener, or its admin listener for the S3 API), and the
//! client connects to the proxy instead of the server. Every byte of every
//! connection through it crosses the [`Link`].
//!
//! **What it models.** One link per run, like the compute host's NIC: every
//! connection of every proxy built on the same [`Link`] shares its two
//! directions (client to server, server to client), each of
//! `bits_per_second`. The proxy reads a connection's bytes in chunks of at
//! most [`CHUNK_BYTES`] as they come; a chunk read at `now` departs at
//! `max(now, when the direction is free)`, occupies the direction for
//! `len / bandwidth`, and arrives `rtt / 2` after it has fully departed (so
//! a request and its answer cost one `rtt` plus their serialization).
//! Delivery keeps each connection's order. Opening a connection costs one
//! round trip: the proxy connects to the server, and reads the first bytes
//! of either side, `rtt` after it accepted the client (the handshake), so a
//! client's first bytes reach the server 1.5 `rtt` after its `connect`. The
//! reader of a direction keeps reading while earlier chunks are in flight
//! (pipelining), up to a queue of [`WINDOW_BYTES`] per connection and
//! direction (about a TCP window): a reader whose queue is full stops
//! reading, and TCP's flow control on loopback pushes back on the sender.
//!
//! **What it does not model.** No loss and no retransmission, no TCP
//! congestion control (slow start, backoff): a connection gets the whole
//! free link at once; no window limits beyond the queue above; no per-packet
//! header overhead (bytes are payload bytes); no jitter. The loopback hops
//! on either side of the proxy add their own (small) latency and CPU.
//!
//! **Timing.** Each proxied connection runs on four OS threads (a reader and
//! a writer per direction) that wait with `std::thread::sleep` (timer slack
//! set to 1 ns) and a short yielding spin for the last tens of
//! microseconds, so sub-millisecond round trips such as 0.2 ms are honoured;
//! tokio's timer, with its 1 ms granularity, is not used. Waits can only
//! end late, never early.
//!
//! **Accounting.** [`Link::counters`] gives the bytes that crossed each
//! direction and the CPU time of the proxy's threads (each thread adds its
//! own `CLOCK_THREAD_CPUTIME_ID` as it goes), so the harness can take the
//! proxy's CPU out of the client process's CPU figure.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::results::LinkConfig;

/// The largest chunk a proxy reads and schedules at once: small, so the
/// serialization of concurrent connections interleaves finely.
pub const CHUNK_BYTES: usize = 16 * 1024;

/// Bytes a connection may have in flight per direction before the proxy
/// stops reading from its sender (about a TCP window).
pub const WINDOW_BYTES: usize = 4 << 20;

/// Stack of each proxy thread (they hold one chunk buffer on the heap).
const THREAD_STACK: usize = 128 << 10;

/// How long before a deadline a waiting thread stops sleeping and spins.
const SPIN: Duration = Duration::from_micros(50);

/// The shape of a link: bandwidth per direction and round-trip time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Bits per second in each direction (decimal units: 1gbit = 1e9).
    pub bits_per_second: f64,
    /// Round-trip time.
    pub rtt: Duration,
}

impl Shape {
    /// Seconds `len` bytes occupy a direction.
    fn serialization(&self, len: usize) -> Duration {
        Duration::from_secs_f64(len as f64 * 8.0 / self.bits_per_second)
    }
}

/// `--link`: `none` or `BANDWIDTH/RTT`, as given and parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    /// The text as given.
    pub text: String,
    /// `None` for `none`: loopback, no proxy.
    pub shape: Option<Shape>,
}

impl LinkSpec {
    /// No simulated link (loopback).
    pub fn none() -> LinkSpec {
        LinkSpec {
            text: "none".into(),
            shape: None,
        }
    }

    /// What `results.json` records of it.
    pub fn config(&self) -> LinkConfig {
        LinkConfig {
            given: self.text.clone(),
            bits_per_second: self.shape.map(|s| s.bits_per_second),
            rtt_s: self.shape.map(|s| s.rtt.as_secs_f64()),
        }
    }

    /// A fresh shared link of this shape (`None` for `none`).
    pub fn link(&self) -> Option<Link> {
        self.shape.map(Link::new)
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a `--link` value was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "invalid link '{given}': {why} (expected BANDWIDTH/RTT with BANDWIDTH in kbit, mbit or gbit \
     (bits per second, decimal) and RTT in us, ms or s, e.g. 1gbit/0.5ms, 100mbit/2ms; or none)"
)]
pub struct LinkParseError {
    given: String,
    why: String,
}

impl FromStr for LinkSpec {
    type Err = LinkParseError;

    fn from_str(s: &str) -> Result<LinkSpec, LinkParseError> {
        let err = |why: String| LinkParseError {
            given: s.to_string(),
            why,
        };
        let text = s.trim();
        if text.eq_ignore_ascii_case("none") {
            return Ok(LinkSpec::none());
        }
        let (bandwidth, rtt) = text
            .split_once('/')
            .ok_or_else(|| err("no '/' between bandwidth and round-trip time".into()))?;
        let (value, unit) = number_and_unit(bandwidth).map_err(|why| err(format!("bandwidth: {why}")))?;
        let per_unit = match unit.to_ascii_lowercase().as_str() {
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            _ => return Err(err(format!("unknown bandwidth unit '{unit}'"))),
        };
        let bits_per_second = value * per_unit;
        if bits_per_second <= 0.0 {
            return Err(err("the bandwidth must be more than 0".into()));
        }
        let (value, unit) = number_and_unit(rtt).map_err(|why| err(format!("round-trip time: {why}")))?;
        let seconds = match unit.to_ascii_lowercase().as_str() {
            "us" => value * 1e-6,
            "ms" => value * 1e-3,
            "s" => value,
            _ => return Err(err(format!("unknown round-trip time unit '{unit}'"))),
        };
        if seconds > 3600.0 {
            return Err(err("the round-trip time is over an hour".into()));
        }
        Ok(LinkSpec {
            text: text.to_string(),
            shape: Some(Shape {
                bits_per_second,
                rtt: Duration::from_secs_f64(seconds),
            }),
        })
    }
}

/// `12.5mbit` -> (12.5, "mbit"): a plain decimal number (digits, at most
/// one point) and a unit of letters.
fn number_and_unit(s: &str) -> Result<(f64, &str), String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(format!("'{s}' does not start with a number"));
    }
    if unit.is_empty() {
        return Err(format!("'{s}' has no unit"));
    }
    let value: f64 = number.parse().map_err(|_| format!("'{number}' is not a number"))?;
    Ok((value, unit))
}

/// One direction of a link: when it is next free, and what crossed it.
#[derive(Debug, Default)]
struct Direction {
    free_at: Mutex<Option<Instant>>,
    bytes: AtomicU64,
}

impl Direction {
    /// Schedules `len` bytes read at `now`: they depart when the direction
    /// is free (not before `now`) and hold it for their serialization.
    /// Returns when their last byte has departed.
    fn schedule(&self, shape: &Shape, now: Instant, len: usize) -> Instant {
        let mut free = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
        let start = free.map_or(now, |f| f.max(now));
        let done = start + shape.serialization(len);
        *free = Some(done);
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        done
    }
}

#[derive(Debug)]
struct LinkInner {
    shape: Shape,
    to_server: Direction,
    to_client: Direction,
    /// CPU nanoseconds of every proxy thread on this link.
    proxy_cpu_ns: AtomicU64,
}

/// One simulated link, shared by every proxy (and every connection) built on
/// it; cheap to clone (the clones are the same link).
#[derive(Debug, Clone)]
pub struct Link(Arc<LinkInner>);

/// What has crossed a link so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkCounters {
    /// Bytes from the clients to the servers.
    pub to_server: u64,
    /// Bytes from the servers to the clients.
    pub to_client: u64,
    /// CPU seconds the proxies' threads used.
    pub proxy_cpu_s: f64,
}

impl Link {
    pub fn new(shape: Shape) -> Link {
        Link(Arc::new(LinkInner {
            shape,
            to_server: Direction::default(),
            to_client: Direction::default(),
            proxy_cpu_ns: AtomicU64::new(0),
        }))
    }

    pub fn shape(&self) -> Shape {
        self.0.shape
    }

    pub fn counters(&self) -> LinkCounters {
        LinkCounters {
            to_server: self.0.to_server.bytes.load(Ordering::Relaxed),
            to_client: self.0.to_client.bytes.load(Ordering::Relaxed),
            proxy_cpu_s: self.0.proxy_cpu_ns.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }
}

/// The shared state of one proxy.
struct ProxyShared {
    link: Link,
    upstream: SocketAddr,
    stop: AtomicBool,
    /// Open connections' sockets (client side, server side), to shut them
    /// down when the proxy is dropped.
    open: Mutex<HashMap<u64, (TcpStream, Option<TcpStream>)>>,
}

impl ProxyShared {
    fn open_connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (TcpStream, Option<TcpStream>)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A TCP proxy on loopback in front of `upstream`, every connection through
/// `link`. Dropping it stops accepting and shuts every connection down.
pub struct LinkProxy {
    addr: SocketAddr,
    shared: Arc<ProxyShared>,
    accept: Option<JoinHandle<()>>,
}

impl LinkProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream` through `link`.
    pub fn start(link: &Link, upstream: SocketAddr) -> io::Result<LinkProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(ProxyShared {
            link: link.clone(),
            upstream,
            stop: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("silt-link-accept".into())
                .stack_size(THREAD_STACK)
                .spawn(move || accept_loop(listener, shared))?
        };
        Ok(LinkProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// A proxy on `link` in front of the server at `url`
    /// (`scheme://host:port[/path]`), and the same URL pointing at the
    /// proxy: what a client connects to instead.
    pub fn in_front_of(link: &Link, url: &str) -> io::Result<(LinkProxy, String)> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme://"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let upstream = std::net::ToSocketAddrs::to_socket_addrs(authority)?
            .next()
            .ok_or_else(|| bad("names no address"))?;
        let proxy = LinkProxy::start(link, upstream)?;
        let via = format!("{scheme}://{}{}", proxy.local_addr(), path.trim_end_matches('/'));
        Ok((proxy, via))
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn link(&self) -> &Link {
        &self.shared.link
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for (client, server) in self.shared.open_connections().values() {
            let _ = client.shutdown(Shutdown::Both);
            if let Some(server) = server {
                let _ = server.shutdown(Shutdown::Both);
            }
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<ProxyShared>) {
    let mut cpu = CpuMeter::new(&shared.link);
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(client) = conn else { continue };
        let accepted = Instant::now();
        let id = next_id;
        next_id += 1;
        let Ok(registered) = client.try_clone() else { continue };
        shared.open_connections().insert(id, (registered, None));
        let conn = Connection {
            id,
            shared: shared.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("silt-link-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || conn.run(client, accepted));
        if spawned.is_err() {
            shared.open_connections().remove(&id);
        }
        cpu.tick();
    }
}

/// One proxied connection; unregisters itself when its last thread ends.
struct Connection {
    id: u64,
    shared: Arc<ProxyShared>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.open_connections().remove(&self.id);
    }
}

impl Connection {
    /// The handshake's round trip, the connection to the server, then both
    /// directions pumped until each side closes.
    fn run(self, client: TcpStream, accepted: Instant) {
        let link = self.shared.link.clone();
        let mut cpu = CpuMeter::new(&link);
        set_precise_timers();
        sleep_until(accepted + link.shape().rtt);
        let server = match TcpStream::connect(self.shared.upstream) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(upstream = %self.shared.upstream, "link proxy: connecting upstream: {e}");
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        if self.shared.stop.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        match server.try_clone() {
            Ok(s) => {
                if let Some(entry) = self.shared.open_connections().get_mut(&self.id) {
                    entry.1 = Some(s);
                }
            }
            Err(_) => {
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
        }
        let this = Arc::new(self);
        let streams = (|| -> io::Result<_> { Ok((client.try_clone()?, server.try_clone()?)) })();
        let Ok((client_w, server_r)) = streams else {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        };
        // Server to client on its own reader thread; client to server here.
        let back = {
            let this = this.clone();
            std::thread::Builder::new()
                .name("silt-link-read".into())
                .stack_size(THREAD_STACK)
                .spawn(move || this.pump(server_r, client_w, Way::ToClient))
        };
        if back.is_err() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        cpu.tick();
        drop(cpu);
        this.pump(client, server, Way::ToServer);
    }

    /// Reads `from` in chunks, schedules each on the link, and hands them
    /// to a writer thread that delivers each to `to` at its arrival time.
    fn pump(self: Arc<Self>, mut from: TcpStream, to: TcpStream, way: Way) {
        let link = self.shared.link.clone();
        let shape = link.shape();
        let direction = match way {
            Way::ToServer => &link.0.to_server,
            Way::ToClient => &link.0.to_client,
        };
        let mut cpu = CpuMeter::new(&link);
        let (tx, rx) = sync_channel::<(Instant, Vec<u8>)>(WINDOW_BYTES / CHUNK_BYTES);
        let writer = {
            let (this, link, to) = (self.clone(), link.clone(), to.try_clone());
            let Ok(to) = to else {
                let _ = from.shutdown(Shutdown::Both);
                return;
            };
            std::thread::Builder::new()
                .name("silt-link-write".into())
                .stack_size(THREAD_STACK)
                .spawn(move || deliver(rx, to, link, this))
        };
        if writer.is_err() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        let half_rtt = shape.rtt / 2;
        loop {
            let mut buf = vec![0u8; CHUNK_BYTES];
            match from.read(&mut buf) {
                Ok(0) => break, // EOF: the writer delivers what is queued, then half-closes.
                Ok(n) => {
                    buf.truncate(n);
                    let arrival = direction.schedule(&shape, Instant::now(), n) + half_rtt;
                    cpu.tick();
                    if tx.send((arrival, buf)).is_err() {
                        break; // The writer failed; it shut both sockets down.
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // A reset (or the proxy shutting down): no orderly close to deliver.
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    break;
                }
            }
        }
        drop(tx);
        cpu.tick();
    }
}

#[derive(Debug, Clone, Copy)]
enum Way {
    ToServer,
    ToClient,
}

/// The writer of one direction: each chunk written at its arrival time, in
/// order; the write side closed once the reader has ended and the queue is
/// drained.
fn deliver(rx: Receiver<(Instant, Vec<u8>)>, mut to: TcpStream, link: Link, _conn: Arc<Connection>) {
    set_precise_timers();
    let mut cpu = CpuMeter::new(&link);
    for (arrival, chunk) in rx.iter() {
        sleep_until(arrival);
        if to.write_all(&chunk).is_err() {
            // The receiver is gone: end the whole connection (the reader
            // sees its send fail, or its socket shut).
            let _ = to.shutdown(Shutdown::Both);
            cpu.tick();
            return;
        }
        cpu.tick();
    }
    let _ = to.shutdown(Shutdown::Write);
    cpu.tick();
}

/// Adds a thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) to its link's
/// total as it goes, and the rest when dropped.
struct CpuMeter {
    link: Link,
    counted_ns: u64,
}

impl CpuMeter {
    fn new(link: &Link) -> CpuMeter {
        // A new thread's clock starts at 0, so everything it used counts.
        CpuMeter {
            link: link.clone(),
            counted_ns: 0,
        }
    }

    fn tick(&mut self) {
        let now = thread_cpu_ns();
        if now > self.counted_ns {
            self.link
                .0
                .proxy_cpu_ns
                .fetch_add(now - self.counted_ns, Ordering::Relaxed);
            self.counted_ns = now;
        }
    }
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        self.tick();
    }
}

/// CPU nanoseconds of the calling thread.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Timer slack of 1 ns for the calling thread, so `nanosleep` wakes when
/// asked rather than up to 50 us later (Linux's default slack).
fn set_precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Waits until `deadline` with microsecond precision: sleeps until shortly
/// before it, then yields until it has passed. Never returns early.
fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(s: &str) -> Shape {
        s.parse::<LinkSpec>().unwrap().shape.unwrap()
    }

    #[test]
    fn parses_bandwidth_and_rtt() {
        let s = shape("1gbit/0.5ms");
        assert_eq!(s.bits_per_second, 1e9);
        assert_eq!(s.rtt, Duration::from_micros(500));
        let s = shape("10gbit/0.2ms");
        assert_eq!(s.bits_per_second, 1e10);
        assert_eq!(s.rtt, Duration::from_micros(200));
        let s = shape("100mbit/2ms");
        assert_eq!(s.bits_per_second, 1e8);
        assert_eq!(s.rtt, Duration::from_millis(2));
        let s = shape("512kbit/1s");
        assert_eq!(s.bits_per_second, 512e3);
        assert_eq!(s.rtt, Duration::from_secs(1));
        let s = shape("2.5Gbit/250us");
        assert_eq!(s.bits_per_second, 2.5e9);
        assert_eq!(s.rtt, Duration::from_micros(250));
        assert_eq!(shape("1gbit/0ms").rtt, Duration::ZERO);
        let none: LinkSpec = "none".parse().unwrap();
        assert_eq!(none, LinkSpec::none());
        assert!(none.link().is_none());
        let given: LinkSpec = "1gbit/0.5ms".parse().unwrap();
        assert_eq!(given.to_string(), "1gbit/0.5ms");
        let config = given.config();
        assert_eq!(config.given, "1gbit/0.5ms");
        assert_eq!(config.bits_per_second, Some(1e9));
        assert_eq!(config.rtt_s, Some(0.0005));
        assert_eq!(LinkSpec::none().config().bits_per_second, None);
    }

    #[test]
    fn refuses_other_units_and_shapes_with_a_clear_error() {
        for (bad, says) in [
            ("1gbit", "no '/'"),
            ("1gbps/1ms", "unknown bandwidth unit 'gbps'"),
            ("1GB/1ms", "unknown bandwidth unit 'GB'"),
            ("1g/1ms", "unknown bandwidth unit 'g'"),
            ("1/1ms", "has no unit"),
            ("gbit/1ms", "does not start with a number"),
            ("-1gbit/1ms", "does not start with a number"),
            ("0gbit/1ms", "more than 0"),
            ("1.2.3gbit/1ms", "does not start with a number"),
            ("1gbit/1min", "unknown round-trip time unit 'min'"),
            ("1gbit/1", "has no unit"),
            ("1gbit/1ns", "unknown round-trip time unit 'ns'"),
            ("1gbit/inf", "does not start with a number"),
            ("1gbit/1e3ms", "unknown round-trip time unit 'e3ms'"),
            ("", "no '/'"),
        ] {
            let err = bad.parse::<LinkSpec>().unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains(&format!("invalid link '{bad}'")), "{bad}: {err}");
            assert!(err.contains("e.g. 1gbit/0.5ms"), "{bad}: {err}");
        }
    }

    #[test]
    fn chunks_depart_one_after_another_and_share_the_direction() {
        // 8 Mbit/s: 1000 bytes take 1 ms.
        let shape = shape("8mbit/2ms");
        let d = Direction::default();
        let t0 = Instant::now();
        // Two chunks read at once: the second departs when the first is done.
        assert_eq!(d.schedule(&shape, t0, 1000), t0 + Duration::from_millis(1));
        assert_eq!(d.schedule(&shape, t0, 1000), t0 + Duration::from_millis(2));
        // Read after the direction went idle: departs at once.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(d.schedule(&shape, later, 500), later + Duration::from_micros(500));
        assert_eq!(d.bytes.load(Ordering::Relaxed), 2500);
    }

    /// A server that reads `expect` bytes of pattern `a`, checks them, then
    /// sends `reply` bytes of pattern `b` and closes.
    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
            .collect()
    }

    fn serve_once(listener: TcpListener, expect: usize, reply: usize) -> JoinHandle<bool> {
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            // Reads until the client half-closes.
            s.read_to_end(&mut got).unwrap();
            let right = got.len() == expect && got == pattern(1, expect);
            s.write_all(&pattern(2, reply)).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            right
        })
    }

    #[test]
    fn forwards_bytes_intact_both_ways_and_counts_them() {
        let link = Link::new(shape("1gbit/0.2ms"));
        let (up, down) = (1_000_003, 2_000_029);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = serve_once(listener.try_clone().unwrap(), up, down);
        let proxy = LinkProxy::start(&link, listener.local_addr().unwrap()).unwrap();
        let mut c = TcpStream::connect(proxy.local_addr()).unwrap();
        c.write_all(&pattern(1, up)).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert!(server.join().unwrap(), "the server got other bytes than were sent");
        assert_eq!(got.len(), down);
        assert!(got == pattern(2, down), "the client got other bytes than were sent");
        let counters = link.counters();
        assert_eq!((counters.to_server, counters.to_client), (up as u64, down as u64));
        assert!(counters.proxy_cpu_s > 0.0, "{counters:?}");
    }

    #[test]
    fn connections_of_two_proxies_share_one_link() {
        let link = Link::new(shape("10gbit/0.1ms"));
        let mut servers = Vec::new();
        let mut proxies = Vec::new();
        for i in 0..2 {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            servers.push(serve_once(listener.try_clone().unwrap(), 1000 * (i + 1), 300_000));
            proxies.push(LinkProxy::start(&link, listener.local_addr().unwrap()).unwrap());
        }
        let clients: Vec<_> = proxies
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let addr = p.local_addr();
                std::thread::spawn(move || {
                    let mut c = TcpStream::connect(addr).unwrap();
                    c.write_all(&pattern(1, 1000 * (i + 1))).unwrap();
                    c.shutdown(Shutdown::Write).unwrap();
                    let mut got = Vec::new();
                    c.read_to_end(&mut got).unwrap();
                    got == pattern(2, 300_000)
                })
            })
            .collect();
        for c in clients {
            assert!(c.join().unwrap());
        }
        for s in servers {
            assert!(s.join().unwrap());
        }
        let counters = link.counters();
        assert_eq!((counters.to_server, counters.to_client), (3000, 600_000));
    }

    #[test]
    fn a_dead_upstream_closes_the_client_and_dropping_the_proxy_ends_connections() {
        let link = Link::new(shape("1gbit/0.1ms"));
        // A port nothing listens on.
        let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let proxy = LinkProxy::start(&link, free).unwrap();
        let mut c = TcpStream::connect(proxy.local_addr()).unwrap();
        let mut buf = [0u8; 16];
        // EOF or a reset, not a hang.
        assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));

        // A server that never answers: dropping the proxy ends the connection.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = LinkProxy::start(&link, listener.local_addr().unwrap()).unwrap();
        let mut c = TcpStream::connect(proxy.local_addr()).unwrap();
        c.write_all(b"hello").unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let mut got = [0u8; 5];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        drop(proxy);
        assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
        assert_eq!(link.counters().to_server, 5);
    }
}
