//! Kernel watches on the folders of `file://` tables under `notify`: one
//! watcher (one inotify instance and its thread, whatever the number of
//! tables, so many tables do not exhaust the per-user instance limit) with a
//! recursive watch per folder table and a watch of the parent folder of each
//! one-object table.
//!
//! Only events that can change what a LIST or HEAD answers mark a table:
//! creation, modification (data, metadata, renames), removal, a write
//! closing, and the kernel's "events were lost" signal (which marks every
//! watched table). Opens and reads, which every scan of the table causes,
//! are ignored: they would otherwise void the trust of every warm query.
//! A watch that cannot be set up (a missing folder, the inotify watch
//! limit) is logged and its table falls back to the sweep; the server runs
//! on.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use silt_cache::Freshness;
use silt_store::TableLocation;
use tracing::{debug, info, warn};

use crate::engine::Engine;

/// The kernel watches of a server's `file://` notify tables; they end when
/// this is dropped (their tables then rely on the sweep).
pub struct FileWatches {
    _watcher: RecommendedWatcher,
}

/// What of the file system one table's objects are.
#[derive(Debug, Clone)]
struct WatchedTable {
    name: String,
    path: PathBuf,
    /// A folder (every object under it), else exactly one file.
    folder: bool,
}

impl WatchedTable {
    /// Whether a change at `changed` can change what the table lists.
    fn covers(&self, changed: &Path) -> bool {
        if self.folder {
            changed.starts_with(&self.path)
        } else {
            changed == self.path
        }
    }

    /// The path to watch, and how.
    fn watch(&self) -> (&Path, RecursiveMode) {
        match (self.folder, self.path.parent()) {
            (false, Some(parent)) => (parent, RecursiveMode::NonRecursive),
            _ => (&self.path, RecursiveMode::Recursive),
        }
    }
}

/// Whether an event of `kind` can change a listing (see the module doc).
fn changes_listing(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Any | EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Other => true,
    }
}

/// The `file://` tables of `engine`'s config under `notify`.
fn notify_file_tables(engine: &Engine) -> Vec<WatchedTable> {
    engine
        .config()
        .tables
        .iter()
        .filter(|(_, t)| matches!(t.validation, Freshness::Notify { .. }))
        .filter_map(|(name, t)| {
            let location = TableLocation::parse(&t.url).ok()?;
            if location.url.scheme() != "file" {
                return None;
            }
            match location.url.to_file_path() {
                Ok(path) => Some(WatchedTable {
                    name: name.clone(),
                    path,
                    folder: location.is_prefix,
                }),
                Err(()) => {
                    warn!(table = %name, url = %t.url, "not a local path: no change notices, the sweep alone bounds staleness");
                    None
                }
            }
        })
        .collect()
}

/// Starts watching the `file://` notify tables of `engine`; `None` when it
/// has none or the watcher cannot start (logged: the tables then rely on
/// the sweep).
pub fn start(engine: &Arc<Engine>) -> Option<FileWatches> {
    let tables = notify_file_tables(engine);
    if tables.is_empty() {
        return None;
    }
    let handler = Handler {
        engine: Arc::downgrade(engine),
        tables: tables.clone(),
    };
    let mut watcher = match notify::recommended_watcher(move |event| handler.handle(event)) {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "cannot start the file watcher: file:// notify tables rely on the sweep alone");
            return None;
        }
    };
    for table in &tables {
        let (path, mode) = table.watch();
        match watcher.watch(path, mode) {
            Ok(()) => {
                info!(table = %table.name, path = %path.display(), "watching for changes");
                // A change between the table's registration (its LIST) and
                // this watch sent no event: validate once more.
                engine.note_change(&table.name);
            }
            Err(e) => warn!(
                table = %table.name,
                path = %path.display(),
                error = %e,
                "cannot watch the table's folder: it relies on the sweep alone"
            ),
        }
    }
    Some(FileWatches { _watcher: watcher })
}

/// Turns the watcher's events into change notices (on the watcher's thread).
struct Handler {
    engine: Weak<Engine>,
    tables: Vec<WatchedTable>,
}

impl Handler {
    fn handle(&self, event: notify::Result<Event>) {
        let Some(engine) = self.engine.upgrade() else {
            return;
        };
        let marked = match &event {
            // An error may mean lost events: every table is suspect.
            Err(e) => {
                warn!(error = %e, "file watcher error: marking every watched table changed");
                self.mark(&engine, |_| true)
            }
            Ok(event) if event.need_rescan() => self.mark(&engine, |_| true),
            Ok(event) if changes_listing(&event.kind) => {
                self.mark(&engine, |t| event.paths.iter().any(|p| t.covers(p)))
            }
            Ok(_) => 0,
        };
        if marked > 0 {
            engine.metrics().notices_inotify.increment(1);
            debug!(?event, marked, "file change notice");
        }
    }

    /// Marks the tables `which` selects; returns how many were marked.
    fn mark(&self, engine: &Engine, which: impl Fn(&WatchedTable) -> bool) -> usize {
        self.tables
            .iter()
            .filter(|t| which(t))
            .filter(|t| engine.note_change(&t.name))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, ModifyKind, RenameMode};

    use super::*;

    #[test]
    fn reads_do_not_mark_and_writes_do() {
        assert!(!changes_listing(&EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!changes_listing(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(changes_listing(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes_listing(&EventKind::Create(CreateKind::File)));
        assert!(changes_listing(&EventKind::Modify(ModifyKind::Data(DataChange::Any))));
        assert!(changes_listing(&EventKind::Modify(ModifyKind::Name(RenameMode::To))));
    }

    #[test]
    fn a_folder_covers_what_is_under_it_and_a_file_only_itself() {
        let folder = WatchedTable {
            name: "t".into(),
            path: "/lake/t".into(),
            folder: true,
        };
        assert!(folder.covers(Path::new("/lake/t/a.parquet")));
        assert!(folder.covers(Path::new("/lake/t/k=1/a.parquet")));
        assert!(!folder.covers(Path::new("/lake/t2/a.parquet")));
        assert_eq!(folder.watch(), (Path::new("/lake/t"), RecursiveMode::Recursive));
        let file = WatchedTable {
            name: "f".into(),
            path: "/lake/f.parquet".into(),
            folder: false,
        };
        assert!(file.covers(Path::new("/lake/f.parquet")));
        assert!(!file.covers(Path::new("/lake/f.parquet.tmp")));
        assert_eq!(file.watch(), (Path::new("/lake"), RecursiveMode::NonRecursive));
    }
}
