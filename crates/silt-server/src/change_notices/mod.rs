//! Change notices for `validation = "notify"` tables: the store tells Silt
//! what changed, so a warm query starts on the last validated listing
//! without a LIST or HEAD round trip.
//!
//! Two sources, one effect: a `file://` table's folder is watched by the
//! kernel ([`file_watch`], inotify through the `notify` crate), and any
//! store's S3 event notifications are posted to the admin endpoint
//! `POST /notify/s3` ([`s3_event`]). Either marks the tables it concerns
//! changed ([`Engine::note_change`]); the table's next query then validates
//! once, as under `always`, which records the new versions. A notice drops
//! no cached bytes and moves no running query: queries pin versions at
//! their start. A lost notice is caught by the sweep (`notify,sweep=…`,
//! 5 minutes by default): no validation is trusted for longer.

pub mod file_watch;
pub mod s3_event;

use silt_cache::Freshness;

use crate::engine::Engine;

impl Engine {
    /// Marks registered table `table` changed, if it is a `notify` table:
    /// its next query validates. Returns whether it was marked (a table
    /// not registered yet has nothing to distrust: its registration lists).
    pub fn note_change(&self, table: &str) -> bool {
        match self.table_store(table) {
            Some(store) if matches!(store.freshness(), Freshness::Notify { .. }) => {
                store.change_notices().changed();
                true
            }
            _ => false,
        }
    }
}
