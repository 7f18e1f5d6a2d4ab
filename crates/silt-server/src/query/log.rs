//! The queries a server is running and the ones it finished lately, for an
//! operator: the dashboard's "running" and "slow queries" panels, `/stats`
//! and `silt_system.queries`.
//!
//! A [`super::trace::QueryTrace`] registers its query here when it is
//! made and moves it to the finished list when its last clone drops (the
//! result stream ended, failed or was abandoned), with its stage times, rows
//! and bytes sent. The finished list keeps the last [`KEEP_FINISHED`]
//! queries of the last [`KEEP_FOR`]; older ones are dropped as new ones end,
//! so memory stays bounded whatever the query rate.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::stage::Stage;

/// Finished queries kept, at most.
pub const KEEP_FINISHED: usize = 1000;
/// Finished queries older than this are dropped.
pub const KEEP_FOR: Duration = Duration::from_secs(3600);
/// Longest query text kept (longer texts are cut, marked with `…`).
const MAX_TEXT: usize = 4096;

/// A query still running.
#[derive(Debug, Clone)]
pub struct RunningQuery {
    pub id: u64,
    /// `sql`, `scan` or `lookup`.
    pub kind: &'static str,
    /// The SQL, or a scan's table and columns.
    pub text: Arc<str>,
    /// Wall-clock start.
    pub started: SystemTime,
    /// How long it has run.
    pub elapsed: Duration,
}

/// A query that ended.
#[derive(Debug, Clone)]
pub struct FinishedQuery {
    /// When it ended (what retention goes by).
    pub ended: Instant,
    pub id: u64,
    pub kind: &'static str,
    pub text: Arc<str>,
    pub started: SystemTime,
    /// From its start to its end (the result stream's end or its failure).
    pub total: Duration,
    /// Server time per stage, in [`Stage::ALL`] order.
    pub stages: [Duration; 5],
    /// Rows and Arrow IPC bytes sent.
    pub rows: u64,
    pub bytes: u64,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl FinishedQuery {
    /// Time in `stage`.
    pub fn stage(&self, stage: Stage) -> Duration {
        self.stages[stage as usize]
    }
}

struct Running {
    kind: &'static str,
    text: Arc<str>,
    started: SystemTime,
    start: Instant,
}

/// The running and lately finished queries of one server.
#[derive(Default)]
pub struct QueryLog {
    next_id: AtomicU64,
    running: Mutex<BTreeMap<u64, Running>>,
    finished: Mutex<VecDeque<FinishedQuery>>,
}

/// What a query sent and how it ended, reported when it finishes.
pub struct Outcome {
    pub stages: [Duration; 5],
    pub rows: u64,
    pub bytes: u64,
    pub error: Option<String>,
}

impl QueryLog {
    /// Registers a query starting now; its id and its text as kept (cut
    /// at [`MAX_TEXT`] bytes).
    pub fn begin(&self, kind: &'static str, text: &str) -> (u64, Arc<str>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let text: Arc<str> = if text.len() > MAX_TEXT {
            let mut cut = MAX_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            Arc::from(format!("{}…", &text[..cut]))
        } else {
            Arc::from(text)
        };
        self.running.lock().insert(
            id,
            Running {
                kind,
                text: text.clone(),
                started: SystemTime::now(),
                start: Instant::now(),
            },
        );
        (id, text)
    }

    /// Moves query `id` to the finished list.
    pub fn end(&self, id: u64, outcome: Outcome) {
        let Some(r) = self.running.lock().remove(&id) else {
            return;
        };
        let done = FinishedQuery {
            ended: Instant::now(),
            id,
            kind: r.kind,
            text: r.text,
            started: r.started,
            total: r.start.elapsed(),
            stages: outcome.stages,
            rows: outcome.rows,
            bytes: outcome.bytes,
            error: outcome.error,
        };
        let mut finished = self.finished.lock();
        finished.push_back(done);
        while finished.len() > KEEP_FINISHED {
            finished.pop_front();
        }
        prune(&mut finished);
    }

    /// The queries running now, oldest first.
    pub fn running(&self) -> Vec<RunningQuery> {
        self.running
            .lock()
            .iter()
            .map(|(&id, r)| RunningQuery {
                id,
                kind: r.kind,
                text: r.text.clone(),
                started: r.started,
                elapsed: r.start.elapsed(),
            })
            .collect()
    }

    /// The queries that finished in the last [`KEEP_FOR`] (at most
    /// [`KEEP_FINISHED`]), in the order they ended.
    pub fn finished(&self) -> Vec<FinishedQuery> {
        let mut finished = self.finished.lock();
        prune(&mut finished);
        finished.iter().cloned().collect()
    }

    /// The `n` slowest finished queries kept, slowest first.
    pub fn slowest(&self, n: usize) -> Vec<FinishedQuery> {
        let mut all = self.finished();
        all.sort_by_key(|q| std::cmp::Reverse(q.total));
        all.truncate(n);
        all
    }
}

/// Drops the queries that ended more than [`KEEP_FOR`] ago (the list is
/// in the order they ended).
fn prune(finished: &mut VecDeque<FinishedQuery>) {
    while finished.front().is_some_and(|q| q.ended.elapsed() > KEEP_FOR) {
        finished.pop_front();
    }
}

/// Milliseconds since the Unix epoch of `t`.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(rows: u64) -> Outcome {
        Outcome {
            stages: [Duration::ZERO; 5],
            rows,
            bytes: 0,
            error: None,
        }
    }

    #[test]
    fn queries_move_from_running_to_finished_and_stay_bounded() {
        let log = QueryLog::default();
        let (a, _) = log.begin("sql", "SELECT 1");
        let (b, _) = log.begin("scan", "scan t");
        assert_eq!(log.running().len(), 2);
        log.end(a, outcome(1));
        log.end(a, outcome(1)); // twice is harmless
        let running = log.running();
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].id, b);
        assert_eq!(log.finished().len(), 1);
        assert_eq!(log.finished()[0].rows, 1);
        for i in 0..KEEP_FINISHED + 10 {
            let (id, _) = log.begin("sql", &format!("SELECT {i}"));
            log.end(id, outcome(0));
        }
        assert_eq!(log.finished().len(), KEEP_FINISHED);
        assert_eq!(log.slowest(5).len(), 5);
        let long = "x".repeat(MAX_TEXT * 2);
        let (_, kept) = log.begin("sql", &long);
        assert!(kept.len() <= MAX_TEXT + 4);
        assert!(log.running().iter().all(|q| q.text.len() <= MAX_TEXT + 4));
    }
}
