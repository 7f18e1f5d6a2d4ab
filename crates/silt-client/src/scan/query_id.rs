//! Which execution of a client query a scan belongs to: the id a scan's
//! request names in its [`silt_proto::QueryContext`], so the server
//! validates the query's tables once ([`crate::query_context`]). A leaf.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use datafusion::execution::TaskContext;

/// Executions seen, by their `TaskContext` (dead ones are dropped).
type Executions = Mutex<Vec<(Weak<TaskContext>, String)>>;

/// The id of the execution `context` belongs to: the same for every scan
/// of one execution of a plan, different for every other execution (in
/// this process or another).
pub fn execution_id(context: &Arc<TaskContext>) -> String {
    static EXECUTIONS: OnceLock<Executions> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PROCESS: OnceLock<u64> = OnceLock::new();
    let process = *PROCESS.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    let executions = EXECUTIONS.get_or_init(Executions::default);
    let mut executions = executions.lock().unwrap_or_else(|p| p.into_inner());
    executions.retain(|(w, _)| w.strong_count() > 0);
    if let Some((_, id)) = executions
        .iter()
        .find(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(context)))
    {
        return id.clone();
    }
    let id = format!("{process:016x}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    executions.push((Arc::downgrade(context), id.clone()));
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_id_per_execution() {
        let a = Arc::new(TaskContext::default());
        let b = Arc::new(TaskContext::default());
        assert_eq!(execution_id(&a), execution_id(&a.clone()));
        assert_ne!(execution_id(&a), execution_id(&b));
        let first = execution_id(&a);
        drop(a);
        let c = Arc::new(TaskContext::default());
        assert_ne!(execution_id(&c), first);
    }
}
