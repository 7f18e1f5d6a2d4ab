//! Where the hybrid route's requests go ([`Servers`]): one server, or the
//! members of a fleet, each row group on its owner. A leaf: it names
//! clients and owners, and runs nothing of a scan itself.
//!
//! With a fleet, a row group's fetch (its columns into the compute-side
//! cache, the surviving rows of a hybrid run, its chunks as stored) goes to
//! the member the fleet route would push it to ([`Members::live_owner`] of
//! [`row_group_name`]), so the member that caches a row group is the one
//! asked for it whatever path it takes, and fails over to the next members
//! in its rendezvous order as every fleet request does. The layout comes
//! from the owner of the table's name, like the fleet route's.

use std::future::Future;
use std::sync::Arc;

use crate::client::{ClientError, SiltClient};
use crate::fleet::{Fleet, Members, Unavailable, row_group_name};

use super::layout::RowGroup;

/// The servers a hybrid scan asks (module docs).
#[derive(Debug, Clone)]
pub enum Servers {
    /// One server answers everything.
    One(SiltClient),
    /// A fleet: every row group on its owner among `members`, one list for
    /// the whole scan (as [`super::fleet::place`] takes it), so a member
    /// joining meanwhile never splits a scan over two placements.
    Fleet { fleet: Arc<Fleet>, members: Arc<Members> },
}

impl Servers {
    /// The members of `fleet` now.
    pub fn fleet(fleet: Arc<Fleet>) -> Self {
        let members = fleet.members();
        Servers::Fleet { fleet, members }
    }

    /// The client of row group `group`: the one server, or the group's
    /// live owner. Its calibration prices the group's paths.
    pub(crate) fn owner(&self, group: &RowGroup) -> &SiltClient {
        match self {
            Servers::One(client) => client,
            Servers::Fleet { members, .. } => {
                let i = members.live_owner(&placement_name(group));
                members.clients().nth(i).expect("live_owner names a member of the list")
            }
        }
    }

    /// Runs `call` on the server of the placement name `name` (a row
    /// group's [`placement_name`], or a table's name for requests about
    /// the table as a whole, its layout): on the one server, or on the
    /// name's owner, failing over in its rendezvous order.
    pub(crate) async fn on_owner_of<T, E, F, Fut>(&self, name: &str, call: F) -> std::result::Result<T, E>
    where
        E: Unavailable + From<ClientError>,
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        match self {
            Servers::One(client) => call(client.clone()).await,
            Servers::Fleet { members, .. } => members.with_failover(name, call).await,
        }
    }
}

/// The name a fleet places row group `group` by ([`row_group_name`]).
pub(crate) fn placement_name(group: &RowGroup) -> String {
    row_group_name(&group.object, group.index)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A request's outcome as the hybrid route's errors say it.
    #[derive(Debug, PartialEq)]
    enum Outcome {
        /// The member could not be reached.
        Down,
        /// The member refused the request itself.
        Refused,
    }

    impl std::fmt::Display for Outcome {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl Unavailable for Outcome {
        fn is_unavailable(&self) -> bool {
            *self == Outcome::Down
        }
    }

    impl From<ClientError> for Outcome {
        fn from(e: ClientError) -> Self {
            if e.is_unavailable() {
                Outcome::Down
            } else {
                Outcome::Refused
            }
        }
    }

    fn group(index: u32) -> RowGroup {
        RowGroup {
            object: Arc::from("t/a.parquet"),
            version: Arc::from("v1"),
            index,
            rows: 10,
            bytes: HashMap::new(),
            chunks: HashMap::new(),
            server_only: false,
        }
    }

    #[tokio::test]
    async fn a_row_groups_requests_go_to_its_owner_and_fail_over_by_the_routes_own_errors() {
        let urls: Vec<String> = (1..=3).map(|p| format!("http://127.0.0.1:{p}")).collect();
        let fleet = Arc::new(
            Fleet::connect(&urls, None)
                .unwrap()
                .with_backoff(Duration::from_secs(60)),
        );
        let servers = Servers::fleet(fleet.clone());
        let g = group(7);
        let owner = servers.owner(&g).url().to_string();
        let members = fleet.members();
        let first = members.rendezvous(&placement_name(&g))[0];
        assert_eq!(
            owner, urls[first],
            "the owner is the first in the row group's rendezvous order"
        );

        // Each member answers with its URL, but `down`, which cannot be reached.
        let answer = |down: Option<String>| {
            move |c: SiltClient| {
                let down = down.clone();
                async move {
                    match down {
                        Some(d) if d == c.url() => Err(Outcome::Down),
                        _ => Ok::<_, Outcome>(c.url().to_string()),
                    }
                }
            }
        };
        let got = servers.on_owner_of(&placement_name(&g), answer(None)).await;
        assert_eq!(got, Ok(owner.clone()));

        // The owner down: the next member in the order answers, and the
        // owner is skipped for its back-off (the next scan's placement too).
        let got = servers
            .on_owner_of(&placement_name(&g), answer(Some(owner.clone())))
            .await
            .unwrap();
        let second = members.rendezvous(&placement_name(&g))[1];
        assert_eq!(got, urls[second]);
        assert_eq!(Servers::fleet(fleet.clone()).owner(&g).url(), urls[second]);

        // A refusal of the request itself is the answer: asked once, not elsewhere.
        let calls = AtomicUsize::new(0);
        let got = servers
            .on_owner_of(&placement_name(&g), |_c| {
                calls.fetch_add(1, Ordering::Relaxed);
                async { Err::<String, _>(Outcome::Refused) }
            })
            .await;
        assert_eq!(got, Err(Outcome::Refused));
        assert_eq!(calls.load(Ordering::Relaxed), 1);

        // One server: always it.
        let one = Servers::One(fleet.clients()[0].clone());
        assert_eq!(one.owner(&g).url(), urls[0]);
    }
}
