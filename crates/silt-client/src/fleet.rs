//! A fleet of cache servers behind one client: rendezvous placement per
//! row group and failover (Alluxio's client-side consistent hashing, with no
//! master on the read path).
//!
//! Every server registers the same tables over the same store. A scan asks
//! any server for the table's layout (the validated object versions and
//! their row groups), then sends each row group, in scans scoped to runs
//! of at most [`ROW_GROUPS_PER_SCAN`](crate::scan::fleet::ROW_GROUPS_PER_SCAN) row groups ([`ScanRequest::scope`]),
//! to its *owner*: the member with the highest [`weight`] for the row group's
//! name `object#row_group` ([`row_group_name`]) (rendezvous, or highest-random-weight, hashing). Every client computes the same owners
//! without talking to the others, and a member joining or leaving moves
//! only the row groups it wins or held, ~1/N of them. This file is the
//! fleet's membership, health and layout; its scans are the fleet route
//! ([`crate::scan::fleet`]), the hybrid route over its members when the
//! client keeps a compute-side cache ([`crate::scan::servers`]) and, for a
//! task of a distributed query, the distributed route
//! ([`crate::scan::distributed`]).
//!
//! **Failover.** A member that cannot be reached or fails in transport
//! (connect errors, streams broken in HTTP/2, `UNAVAILABLE`, `UNKNOWN`,
//! `CANCELLED`: see
//! [`ClientError::is_unavailable`]) is skipped for [`BACKOFF`];
//! its row groups go to the next member in their rendezvous order, which
//! reads them from the store and caches them. A run's rows are emitted
//! only once its scan completed, so a member dying mid-scan costs a retry
//! of its run's row groups elsewhere, never a duplicate or missing row.
//! After the back-off the member is tried again and, if it answers, gets
//! its row groups back. Errors of the query itself (a bad filter, an object
//! that changed) fail the query as on one server; unlike a scan of one
//! server, an object overwritten between the layout and a run is not
//! retried with a new layout (runs stream as they complete, so some rows
//! may be out): the query fails with the server's "changed" error, never
//! wrong rows. So it is for the pushed row groups of a hybrid scan over a
//! fleet (a fetch's refusal fails the scan on one server too).
//!
//! Servers are named by their URL as given (`http://` for `grpc://`):
//! clients must spell a fleet's URLs the same way to agree on owners.
//! Tables without a layout (views, nested columns) are scanned whole by the
//! owner of the table's name, with the same failover, and collected before
//! they are emitted. A fleet client with a compute-side cache (the
//! default) chooses per row group as on one server, each row group's
//! requests on its owner ([`crate::scan::servers`]).

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use silt_core::Backoff;
use silt_proto::ScanRequest;
use silt_proto::placement::member_name;

use crate::client::{ClientError, SiltClient};
use crate::membership::{Sources, refresh_while_alive};
use crate::scan::layout::{RowGroup, parse_layout};

/// How long a member that failed is skipped: longer than a connection
/// attempt may take (10 s), so a member that drops packets costs at most
/// one wait per back-off.
pub const BACKOFF: Duration = silt_core::backoff::BACKOFF;

#[derive(Debug)]
struct Member {
    client: SiltClient,
    /// Skipped for a while after a failure.
    backoff: Backoff,
}

/// The fleet's members at one moment ([`Fleet::members`]): a scan places
/// all its row groups on one of these, so a membership change never mixes
/// two lists (member indices are into this list).
#[derive(Debug)]
pub struct Members {
    list: Vec<Arc<Member>>,
    /// How long a member that failed is skipped.
    backoff: Duration,
}

impl Members {
    /// The members' clients, in the fleet's order.
    pub fn clients(&self) -> impl Iterator<Item = &SiltClient> {
        self.list.iter().map(|m| &m.client)
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Members in rendezvous order for the placement name `name` (highest weight first).
    pub fn rendezvous(&self, name: &str) -> Vec<usize> {
        let urls: Vec<&str> = self.clients().map(SiltClient::url).collect();
        rendezvous_order(&urls, name)
    }

    /// Whether member `i` is being skipped after a failure.
    pub fn is_down(&self, i: usize) -> bool {
        self.list[i].backoff.is_down()
    }

    /// The member that takes `name` now: its first owner in rendezvous
    /// order that is not in back-off (the first owner when all are).
    pub fn live_owner(&self, name: &str) -> usize {
        let order = self.rendezvous(name);
        order.iter().copied().find(|&i| !self.is_down(i)).unwrap_or(order[0])
    }

    /// Runs `call` on the members in `name`'s rendezvous order, members
    /// in back-off last, until one answers or fails with an error of the
    /// request itself (returned as is). Members that fail in transport are
    /// put in back-off.
    pub async fn with_failover<T, E, F, Fut>(&self, name: &str, call: F) -> std::result::Result<T, E>
    where
        E: Unavailable + From<ClientError>,
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let order = self.rendezvous(name);
        let (up, down): (Vec<usize>, Vec<usize>) = order.into_iter().partition(|&i| !self.is_down(i));
        let mut last = None;
        for i in up.into_iter().chain(down) {
            match self.on_member(i, &call).await {
                Err(e) if e.is_unavailable() => last = Some(e),
                answer => return answer,
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Url("a fleet needs at least one server".into()).into()))
    }

    /// Runs `call` on member `i`, keeping its health: back in service when
    /// it answers, in back-off when it fails in transport.
    pub(crate) async fn on_member<T, E, F, Fut>(&self, i: usize, call: &F) -> std::result::Result<T, E>
    where
        E: Unavailable,
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let member = &self.list[i];
        let answer = call(member.client.clone()).await;
        match &answer {
            Ok(_) => member.backoff.recover(),
            Err(e) if e.is_unavailable() => {
                tracing::warn!(server = member.client.url(), error = %e, "fleet member failed; its work goes to the next one");
                member.backoff.fail_for(self.backoff);
            }
            Err(_) => {}
        }
        answer
    }
}

/// An error that may say its server could not be reached or failed in
/// transport, so another member may answer ([`ClientError::is_unavailable`]):
/// what [`Members::with_failover`] moves on by. The hybrid route's fetches
/// fail with errors of their own that carry a [`ClientError`].
pub trait Unavailable: std::fmt::Display {
    fn is_unavailable(&self) -> bool;
}

impl Unavailable for ClientError {
    fn is_unavailable(&self) -> bool {
        ClientError::is_unavailable(self)
    }
}

/// The list a fleet's scans take their members from, and what refreshes it.
#[derive(Debug)]
struct Membership {
    current: RwLock<Arc<Members>>,
    sources: Mutex<Sources>,
    token: Option<String>,
}

impl Membership {
    /// Re-reads the dynamic entries and, when the list changed, makes it
    /// current: members that stay keep their connection and health.
    fn refresh(&self) {
        let urls = {
            let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
            if !sources.refresh() {
                return;
            }
            sources.members()
        };
        let old = self.current.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut list = Vec::with_capacity(urls.len());
        for url in &urls {
            let name = member_name(url);
            match old.list.iter().find(|m| m.client.url() == name) {
                Some(kept) => list.push(kept.clone()),
                None => match member(url, &self.token) {
                    Ok(m) => list.push(Arc::new(m)),
                    Err(e) => tracing::warn!(url, error = %e, "fleet membership: not a server URL; left out"),
                },
            }
        }
        if list.is_empty() {
            return;
        }
        let names = |l: &[Arc<Member>]| l.iter().map(|m| m.client.url().to_string()).collect::<Vec<_>>();
        let (before, after) = (names(&old.list), names(&list));
        let joined: Vec<&String> = after.iter().filter(|u| !before.contains(u)).collect();
        let left: Vec<&String> = before.iter().filter(|u| !after.contains(u)).collect();
        tracing::info!(?joined, ?left, members = after.len(), "fleet membership changed");
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Members {
            list,
            backoff: old.backoff,
        });
    }
}

fn member(url: &str, token: &Option<String>) -> std::result::Result<Member, ClientError> {
    Ok(Member {
        client: SiltClient::connect_lazy(url)?.with_token(token.clone()),
        backoff: Backoff::default(),
    })
}

/// The servers of a fleet (see the module docs).
#[derive(Debug)]
pub struct Fleet {
    membership: Arc<Membership>,
    /// Whether the list can change (a file or DNS entry, [`crate::membership`]).
    dynamic: bool,
    /// Tables scanned whole, without a layout: views, and tables whose
    /// server refused a layout (nested columns).
    whole: Mutex<HashSet<String>>,
}

impl Fleet {
    /// A fleet of `entries` (at least one member): server URLs, and
    /// `file:///path` or `dns://name:port` entries whose members follow the
    /// cluster ([`crate::membership`]). Connections are made on first use,
    /// so a fleet starts even while some of its servers are down. Dynamic
    /// entries are refreshed by a background thread while the fleet lives,
    /// when it is made inside a Tokio runtime (else they are read once).
    pub fn connect(entries: &[String], token: Option<String>) -> std::result::Result<Self, ClientError> {
        if entries.is_empty() {
            return Err(ClientError::Url("a fleet needs at least one server".into()));
        }
        let sources = Sources::parse(entries)?;
        let list = sources
            .members()
            .iter()
            .map(|url| member(url, &token).map(Arc::new))
            .collect::<std::result::Result<Vec<_>, ClientError>>()?;
        let dynamic = sources.is_dynamic();
        let membership = Arc::new(Membership {
            current: RwLock::new(Arc::new(Members { list, backoff: BACKOFF })),
            sources: Mutex::new(sources),
            token,
        });
        if dynamic && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // New members' clients are made inside the runtime (tonic's
            // channels need one).
            refresh_while_alive(
                Arc::downgrade(&membership),
                "silt-fleet-membership",
                move |m: &Membership| {
                    let _entered = runtime.enter();
                    m.refresh();
                },
            );
        }
        Ok(Fleet {
            membership,
            dynamic,
            whole: Mutex::new(HashSet::new()),
        })
    }

    /// This fleet with failed members skipped for `backoff`.
    pub fn with_backoff(self, backoff: Duration) -> Self {
        {
            let mut current = self.membership.current.write().unwrap_or_else(|p| p.into_inner());
            let list = current.list.clone();
            *current = Arc::new(Members { list, backoff });
        }
        self
    }

    /// The members now: what one scan places its row groups on.
    pub fn members(&self) -> Arc<Members> {
        self.membership
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The members' clients now, in the fleet's order.
    pub fn clients(&self) -> Vec<SiltClient> {
        self.members().clients().cloned().collect()
    }

    /// Members now.
    pub fn len(&self) -> usize {
        self.members().len()
    }

    pub fn is_empty(&self) -> bool {
        self.members().is_empty()
    }

    /// Whether the members can change while the fleet lives.
    pub fn is_dynamic(&self) -> bool {
        self.dynamic
    }

    /// Re-reads the membership entries now (a refresh also runs every
    /// [`REFRESH_EVERY`](crate::membership::REFRESH_EVERY) in the background).
    pub fn refresh(&self) {
        self.membership.refresh();
    }

    /// Scans of `table` go whole to the owner of its name (a view: its
    /// rows are computed, it has no row groups to place).
    pub fn scan_whole(&self, table: &str) {
        self.whole
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(table.to_string());
    }

    fn scans_whole(&self, table: &str) -> bool {
        self.whole.lock().unwrap_or_else(|p| p.into_inner()).contains(table)
    }

    /// [`Members::with_failover`] on the members now.
    pub async fn with_failover<T, E, F, Fut>(&self, name: &str, call: F) -> std::result::Result<T, E>
    where
        E: Unavailable + From<ClientError>,
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        self.members().with_failover(name, call).await
    }

    /// The row groups of `table` (a layout from its name's owner, failing
    /// over), or `None` when it has none to place (a view, nested columns):
    /// its scans then go whole to that owner.
    pub(crate) async fn layout(
        &self,
        table: &str,
        query: Option<silt_proto::QueryContext>,
    ) -> std::result::Result<Option<Vec<RowGroup>>, ClientError> {
        if self.scans_whole(table) {
            return Ok(None);
        }
        let request = ScanRequest {
            table: table.to_string(),
            // Every column: a row group is listed under each column its
            // file has, so none is missed whatever columns a file lacks.
            projection: None,
            layout_only: true,
            // Members scan every row group themselves (deletes applied).
            honors_server_only: true,
            query,
            ..Default::default()
        };
        let layout = self
            .with_failover(table, |c| {
                let request = request.clone();
                async move { c.scan_all(&request).await }
            })
            .await;
        match layout {
            Ok(batches) => parse_layout(&batches).map(Some).map_err(|e| ClientError::Protocol {
                url: table.to_string(),
                message: e.to_string(),
            }),
            Err(ClientError::Server {
                code: tonic::Code::InvalidArgument,
                ..
            }) => {
                self.scan_whole(table);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl Fleet {
    /// Per member (of [`Fleet::members`] now, in its order), how many row groups of the fleet's
    /// tables it owns by rendezvous hashing, whatever its health: what
    /// `silt stats` shows across a fleet. Views and tables without a layout
    /// have no row groups to own.
    pub async fn owned_row_groups(&self) -> std::result::Result<Vec<usize>, ClientError> {
        let entries = self
            .with_failover("", |c| async move { c.list_entries().await })
            .await?;
        let members = self.members();
        let mut owned = vec![0; members.len()];
        for (table, kind) in entries {
            if kind == "VIEW" {
                continue;
            }
            for g in self.layout(&table, None).await?.unwrap_or_default() {
                owned[members.rendezvous(&row_group_name(&g.object, g.index))[0]] += 1;
            }
        }
        Ok(owned)
    }
}

impl Fleet {
    /// Preloads `table` across the fleet: each member warms only the row
    /// groups it owns (its live owner's, by rendezvous hashing, as scans
    /// place them), all members at once. Per member (URL), its last progress
    /// report or its error; a member that owns none is not asked.
    pub async fn preload(
        &self,
        table: &str,
        columns: Option<Vec<String>>,
        memory: bool,
    ) -> std::result::Result<Vec<(String, std::result::Result<serde_json::Value, ClientError>)>, ClientError> {
        let members = self.members();
        let Some(groups) = self.layout(table, None).await? else {
            return Err(ClientError::Url(format!(
                "{table} has no row groups to place (a view, or nested columns): preload it on one server"
            )));
        };
        let mut owned: Vec<Vec<RowGroup>> = (0..members.len()).map(|_| Vec::new()).collect();
        for g in groups {
            owned[members.live_owner(&row_group_name(&g.object, g.index))].push(g);
        }
        let preloads = owned
            .into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .map(|(i, groups)| {
                let (members, columns) = (members.clone(), columns.clone());
                async move {
                    let scope = crate::scan::layout::scope_of(groups.iter());
                    let answer = members
                        .on_member(i, &|c: SiltClient| {
                            let (columns, scope) = (columns.clone(), scope.clone());
                            async move { c.preload_scoped(table, columns, memory, Some(&scope), |_| {}).await }
                        })
                        .await;
                    let url = members.list[i].client.url().to_string();
                    (url, answer)
                }
            });
        Ok(futures::future::join_all(preloads).await)
    }
}

pub use silt_proto::placement::{rendezvous_order, row_group_name, weight};

/// The share of a scan's row groups that one task of a distributed query
/// reads ([`crate::distributed`]): the tasks are placed beside fleet
/// members (their *homes*), and a row group goes to a task whose home is
/// the first member in the row group's rendezvous order that is any task's
/// home; among several tasks with that home, to the one with the highest
/// [`weight`] of `task-N`. Every task computes this alone from the same
/// inputs, so the shares are disjoint and cover every row group, and a
/// task's row groups are (when its home has no tasks beside other members
/// to lose them to) the ones its home member owns: its scans stay local.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskShare {
    /// This task's index.
    pub task: usize,
    /// Per task (in task order), the fleet member beside its worker, as the
    /// fleet names it ([`SiltClient::url`]).
    pub homes: Vec<String>,
}

impl TaskShare {
    /// The task that reads `name` among `members` (the fleet's URLs).
    pub fn task_of<S: AsRef<str>>(&self, members: &[S], name: &str) -> usize {
        // No task beside any member (homes outside the fleet): every task
        // is a candidate, spread by task alone.
        let home = rendezvous_order(members, name)
            .into_iter()
            .map(|i| members[i].as_ref())
            .find(|m| self.homes.iter().any(|h| h == m));
        (0..self.homes.len())
            .filter(|&t| home.is_none_or(|home| self.homes[t] == home))
            .max_by_key(|t| weight(&format!("task-{t}"), name))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://10.0.0.{i}:50051")).collect()
    }

    #[test]
    fn a_joining_server_takes_about_its_share_and_only_from_others() {
        let three = servers(3);
        let four = servers(4);
        let three: Vec<&str> = three.iter().map(String::as_str).collect();
        let four: Vec<&str> = four.iter().map(String::as_str).collect();
        let segments = 20_000;
        let mut moved = 0;
        let mut owned = [0usize; 3];
        for s in 0..segments {
            let name = row_group_name(&format!("t/part-{}.parquet", s / 16), (s % 16) as u32);
            let before = rendezvous_order(&three, &name)[0];
            let after = rendezvous_order(&four, &name)[0];
            owned[before] += 1;
            if before != after {
                moved += 1;
                assert_eq!(after, 3, "a segment moves only to the new server");
            }
        }
        let fraction = moved as f64 / segments as f64;
        assert!((fraction - 0.25).abs() < 0.15, "{fraction}");
        assert!(
            (fraction - 0.25).abs() < 0.02,
            "well within, at this many segments: {fraction}"
        );
        for o in owned {
            assert!((o as f64 / segments as f64 - 1.0 / 3.0).abs() < 0.02, "{owned:?}");
        }
    }

    #[test]
    fn task_shares_follow_their_home_members_and_cover_every_segment_once() {
        let members = servers(3);
        let m: Vec<&str> = members.iter().map(String::as_str).collect();
        // Two workers beside members 0 and 1; member 2 has none.
        let share = TaskShare {
            task: 0,
            homes: vec![members[0].clone(), members[1].clone()],
        };
        let mut per_task = [0usize; 2];
        for s in 0..3000 {
            let name = row_group_name(&format!("t/part-{}.parquet", s / 16), (s % 16) as u32);
            let task = share.task_of(&m, &name);
            let owner = rendezvous_order(&m, &name)[0];
            if owner < 2 {
                assert_eq!(task, owner, "a segment its home owns stays beside it");
            } else {
                // Member 2's segments go to the next home in their order.
                let next = rendezvous_order(&m, &name)[1];
                assert_eq!(task, next);
            }
            per_task[task] += 1;
        }
        for n in per_task {
            assert!((n as f64 / 3000.0 - 0.5).abs() < 0.05, "{per_task:?}");
        }
        // Two tasks beside one member split its segments between them.
        let doubled = TaskShare {
            task: 0,
            homes: vec![members[0].clone(), members[0].clone()],
        };
        let first = (0..3000)
            .filter(|s| doubled.task_of(&m, &row_group_name("t/a.parquet", *s)) == 0)
            .count();
        assert!((first as f64 / 3000.0 - 0.5).abs() < 0.05, "{first}");
    }

    #[test]
    fn the_order_is_a_permutation_and_stable() {
        let s = servers(5);
        let s: Vec<&str> = s.iter().map(String::as_str).collect();
        let order = rendezvous_order(&s, "t/a.parquet#3");
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
        assert_eq!(order, rendezvous_order(&s, "t/a.parquet#3"));
        // Fixed values: other clients (Python) must compute the same.
        assert_eq!(weight("http://a:1", "x#0"), weight("http://a:1", "x#0"));
        assert_ne!(weight("http://a:1", "x#0"), weight("http://a:1", "x#1"));
    }
}
