//! How a `CachedStore` validates: LIST and HEAD answers (shared by the
//! table's queries through [`Probes`]), trusted for as long as the table's
//! freshness allows (under `notify`: until a change notice or the sweep,
//! [`ChangeNotices`](crate::ChangeNotices)), and under `always` answered
//! speculatively for a gated query (see [`ValidationGate`]). Under `notify`
//! a query that finds the trust gone waits for its validation inline: after
//! a notice the last listing is most likely stale, so speculating on it
//! would mostly buy a restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use object_store::path::Path;
use object_store::{ObjectMeta, Result};

use super::CachedStore;
use crate::ObjectVersion;
use crate::error::{CacheError, CacheResult};
use crate::freshness::Freshness;
use crate::probe::{Answer, Probe};
use crate::validation_gate::ValidationGate;

impl CachedStore {
    /// This store, listing and HEADing for the query that owns `gate`: under
    /// `always`, a LIST or HEAD answered before is answered from the last
    /// validation at once, and the query's gate gets a confirmation to await
    /// before the query releases results. Other modes ignore the gate.
    pub fn gated(&self, gate: Arc<ValidationGate>) -> CachedStore {
        CachedStore {
            gate: Some(gate),
            ..self.clone()
        }
    }

    /// The query this store answers for, if speculation applies to it.
    fn speculating(&self) -> Option<&Arc<ValidationGate>> {
        self.gate.as_ref().filter(|_| self.freshness == Freshness::Always)
    }

    /// This store without a gate (for work that outlives the query).
    fn ungated(&self) -> CachedStore {
        CachedStore {
            gate: None,
            ..self.clone()
        }
    }

    /// The answer of a validation of `probe` sent at or after `since`
    /// (shared with every other query that may use it).
    async fn validated_after(&self, probe: &Probe, since: Instant) -> Answer {
        let this = self.ungated();
        self.probes
            .after(probe, since, || {
                let (this, probe) = (this.clone(), probe.clone());
                Box::pin(async move { this.send_probe(&probe).await })
            })
            .await
    }

    /// Asks the store: LISTs the prefix (recording every version and the
    /// listing) or HEADs the object (recording its version). Under `notify`
    /// the answer is trusted from then on unless a notice arrives meanwhile.
    async fn send_probe(&self, probe: &Probe) -> Answer {
        let ticket = self.notices.ticket();
        let answer = self.ask_store(probe).await;
        if answer.is_ok() && matches!(self.freshness, Freshness::Notify { .. }) {
            self.notices.validated(probe, ticket);
        }
        answer
    }

    async fn ask_store(&self, probe: &Probe) -> Answer {
        match probe {
            Probe::Head(location) => match self.head_inner(location).await {
                Ok(meta) => Ok(Arc::new(vec![meta])),
                Err(e) => Err(CacheError::from_store(location.as_ref(), e)),
            },
            Probe::List(prefix) => {
                let inner_prefix = match prefix {
                    Some(p) => Some(self.strip(p).map_err(|e| CacheError::from_store(p.as_ref(), e))?),
                    None => None,
                };
                let metas: Vec<ObjectMeta> = futures::TryStreamExt::try_collect(self.inner.list(inner_prefix.as_ref()))
                    .await
                    .map_err(|e| CacheError::from_store(&probe.path(), e))?;
                let metas: Vec<ObjectMeta> = metas.into_iter().map(|m| self.qualify_meta(m)).collect();
                for m in &metas {
                    self.remember(m);
                }
                let metas = Arc::new(metas);
                self.listings
                    .lock()
                    .insert(prefix.clone(), (Instant::now(), metas.clone()));
                Ok(metas)
            }
        }
    }

    /// Registers on `gate` the confirmation that `used` (the answer the query
    /// got for `probe` without waiting) is what a validation sent after the
    /// query started answers. Runs on its own task from now on.
    fn speculate(&self, gate: &ValidationGate, probe: Probe, used: Arc<Vec<ObjectMeta>>) {
        let this = self.ungated();
        let since = gate.started();
        let task = tokio::spawn(async move {
            match this.validated_after(&probe, since).await {
                Ok(now) => same_answer(&used, &now),
                // The object a HEAD confirmed is gone: a change, so the query
                // restarts (and then reports it not found).
                Err(e) if e.is_not_found() => Err(CacheError::changed(probe.path(), "deleted")),
                Err(e) => Err(e),
            }
        });
        gate.register(Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(CacheError::Store {
                    path: String::new(),
                    source: Arc::new(object_store::Error::Generic {
                        store: "CachedStore",
                        source: Box::new(e),
                    }),
                })
            })
        }));
    }

    /// Whether the last validation of `probe`, made at `at`, may answer
    /// without asking the store.
    fn trusts(&self, probe: &Probe, at: Instant) -> bool {
        match self.freshness {
            Freshness::Notify { sweep } => self.notices.trusts(probe, sweep),
            freshness => freshness.still_valid(at.elapsed()),
        }
    }

    /// The HEAD of `location` (namespaced) as a query sees it: the last
    /// validation while the freshness trusts it; under `always`, for a
    /// gated query, the last validated version speculatively; else a HEAD
    /// sent at or after the call (shared with concurrent callers).
    pub(super) async fn head_meta(&self, location: &Path) -> Result<ObjectMeta> {
        let last = self.tiers.versions().get(location);
        let probe = Probe::Head(location.clone());
        if let Some((v, at)) = &last
            && self.trusts(&probe, *at)
        {
            return Ok(v.meta.clone());
        }
        if let (Some(gate), Some((v, _))) = (self.speculating(), last) {
            self.speculate(gate, probe, Arc::new(vec![v.meta.clone()]));
            return Ok(v.meta);
        }
        let answer = self.validated_inline(&probe).await?;
        answer.first().cloned().ok_or_else(|| object_store::Error::NotFound {
            path: location.to_string(),
            source: "empty HEAD answer".into(),
        })
    }

    /// A validation answered after the query started (now, without one),
    /// waited for here: counted on the query's gate as inline wait.
    async fn validated_inline(&self, probe: &Probe) -> CacheResult<Arc<Vec<ObjectMeta>>> {
        let Some(gate) = &self.gate else {
            return self.validated_after(probe, Instant::now()).await;
        };
        let _waiting = gate.inline_wait_begins();
        self.validated_after(probe, gate.started()).await
    }

    /// Lists through the store, or from a listing the table's freshness
    /// still trusts; under `always`, for a gated query with a previous
    /// listing, that listing speculatively (confirmed through the gate).
    pub(super) async fn listing(&self, prefix: Option<&Path>) -> Result<Arc<Vec<ObjectMeta>>> {
        let probe = Probe::List(prefix.cloned());
        let last = self.listings.lock().get(&prefix.cloned()).cloned();
        if let Some((at, metas)) = &last
            && self.trusts(&probe, *at)
        {
            return Ok(metas.clone());
        }
        if let (Some(gate), Some((_, metas))) = (self.speculating(), last) {
            self.speculate(gate, probe, metas.clone());
            return Ok(metas);
        }
        Ok(self.validated_inline(&probe).await?)
    }
}

/// Whether a validation's answer `now` is what a query used (`used`): the
/// same objects, each at the same version ([`ObjectVersion::same`]). An
/// object added, deleted or overwritten is [`CacheError::Changed`].
fn same_answer(used: &[ObjectMeta], now: &[ObjectMeta]) -> CacheResult<()> {
    let now_by_path: HashMap<&Path, &ObjectMeta> = now.iter().map(|m| (&m.location, m)).collect();
    for u in used {
        match now_by_path.get(&u.location) {
            Some(n) if ObjectVersion::same(u, n) => {}
            Some(n) => return Err(CacheError::changed(&u.location, ObjectVersion::from_meta(n).tag)),
            None => return Err(CacheError::changed(&u.location, "deleted")),
        }
    }
    if now.len() != used.len() {
        let used_paths: std::collections::HashSet<&Path> = used.iter().map(|m| &m.location).collect();
        let added = now.iter().find(|m| !used_paths.contains(&m.location));
        let path = added.map_or_else(String::new, |m| m.location.to_string());
        return Err(CacheError::changed(path, "added"));
    }
    Ok(())
}
