//! Plans made for `GetFlightInfo`, kept until the `DoGet` that runs them, so
//! a Flight SQL statement is planned once, not once per call.
//!
//! The ticket still carries the SQL (`TicketStatementQuery.statement_handle`
//! = `<PLAN_MARK><id>\n<SQL>`), so a `DoGet` whose plan is gone (expired,
//! evicted, sent to another server, or after a restart) plans the SQL again:
//! tickets stay valid, the plan is only a shortcut. A plan is taken (removed)
//! by the first `DoGet`, so a ticket redeemed twice is planned again the
//! second time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use silt_cache::ValidationGate;

use super::plan::PlannedQuery;
use super::trace::QueryTrace;

/// A plan made by `GetFlightInfo`, with the validation gate its speculative
/// listings registered on (confirmed before its `DoGet` answers) and the
/// trace its `DoGet` goes on adding to.
pub struct KeptPlan {
    pub plan: PlannedQuery,
    pub gate: std::sync::Arc<ValidationGate>,
    pub trace: QueryTrace,
}

/// Marks a statement handle that names a kept plan.
pub const PLAN_MARK: &str = "silt-plan:";
/// Plans not redeemed within this long are dropped.
const KEEP_FOR: Duration = Duration::from_secs(60);
/// At most this many plans are kept (a client that never calls `DoGet`
/// cannot grow the map); the oldest go first.
const MAX_PLANS: usize = 256;

/// Plans awaiting their `DoGet`.
#[derive(Default)]
pub struct PendingPlans {
    next: AtomicU64,
    plans: Mutex<HashMap<u64, (Instant, KeptPlan)>>,
}

impl PendingPlans {
    /// Keeps `plan` of `sql`; returns the statement handle naming both.
    pub fn keep(&self, sql: &str, plan: KeptPlan) -> String {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut plans = self.plans.lock();
        plans.retain(|_, (at, plan)| keep_or_abandon(at, plan));
        while plans.len() >= MAX_PLANS {
            let Some(oldest) = plans.iter().min_by_key(|(_, (at, _))| *at).map(|(id, _)| *id) else {
                break;
            };
            if let Some((_, plan)) = plans.remove(&oldest) {
                plan.trace
                    .failed(&"abandoned: evicted before a DoGet redeemed its ticket");
            }
        }
        plans.insert(id, (Instant::now(), plan));
        format!("{PLAN_MARK}{id}\n{sql}")
    }

    /// The SQL of `handle`, and its kept plan if it is still here (taken).
    pub fn redeem(&self, handle: &str) -> (String, Option<KeptPlan>) {
        let Some((id, sql)) = handle.strip_prefix(PLAN_MARK).and_then(|rest| rest.split_once('\n')) else {
            return (handle.to_string(), None);
        };
        let plan = id
            .parse::<u64>()
            .ok()
            .and_then(|id| self.plans.lock().remove(&id))
            .filter(|(at, _)| at.elapsed() < KEEP_FOR)
            .map(|(_, plan)| plan);
        (sql.to_string(), plan)
    }

    /// Drops the plans not redeemed in time, so their queries leave the
    /// query log's running list (marked abandoned). Run periodically.
    pub fn expire(&self) {
        self.plans.lock().retain(|_, (at, plan)| keep_or_abandon(at, plan));
    }

    /// Plans kept now.
    pub fn len(&self) -> usize {
        self.plans.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a plan kept since `at` is still wanted; if not, its query is
/// marked abandoned (recorded when the plan is dropped).
fn keep_or_abandon(at: &Instant, plan: &KeptPlan) -> bool {
    let keep = at.elapsed() < KEEP_FOR;
    if !keep {
        plan.trace
            .failed(&"abandoned: no DoGet redeemed its ticket within 60 s");
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_handle_is_its_sql() {
        let plans = PendingPlans::default();
        let (sql, plan) = plans.redeem("SELECT 1");
        assert_eq!(sql, "SELECT 1");
        assert!(plan.is_none());
        let (sql, plan) = plans.redeem(&format!("{PLAN_MARK}42\nSELECT 2"));
        assert_eq!(sql, "SELECT 2");
        assert!(plan.is_none(), "no plan 42 was kept");
    }
}
