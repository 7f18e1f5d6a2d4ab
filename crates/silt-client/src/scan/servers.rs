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
    pub(crate) fn owner(&self, group: &RowGroup) -> SiltClient {
        match self {
            Servers::One(client) => client.clone(),
            Servers::Fleet { members, .. } => {
                let i = members.live_owner(&row_group_name(&group.object, group.index));
                members
                    .clients()
                    .nth(i)
                    .cloned()
                    .expect("live_owner names a member of the list")
            }
        }
    }

    /// Runs `call` for row group `group`: on the one server, or on the
    /// group's owner, failing over in its rendezvous order.
    pub(crate) async fn on_owner<T, E, F, Fut>(&self, group: &RowGroup, call: F) -> std::result::Result<T, E>
    where
        E: Unavailable + From<ClientError>,
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        match self {
            Servers::One(client) => call(client.clone()).await,
            Servers::Fleet { members, .. } => {
                members
                    .with_failover(&row_group_name(&group.object, group.index), call)
                    .await
            }
        }
    }

    /// Runs `call` for a request about table `table` as a whole (its
    /// layout): on the one server, or on the owner of the table's name,
    /// failing over.
    pub(crate) async fn on_table<T, E, F, Fut>(&self, table: &str, call: F) -> std::result::Result<T, E>
    where
        E: Unavailable + From<ClientError>,
        F: Fn(SiltClient) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        match self {
            Servers::One(client) => call(client.clone()).await,
            Servers::Fleet { members, .. } => members.with_failover(table, call).await,
        }
    }
}
