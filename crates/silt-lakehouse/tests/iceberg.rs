//! The Iceberg reader against pyiceberg: a table written by pyiceberg
//! (`scripts/iceberg_fixture.py`: appends, a copy-on-write delete, a
//! partition overwrite) read back snapshot by snapshot; every snapshot's
//! live data files must be exactly those pyiceberg plans for it, and their
//! record counts must add up to the rows pyiceberg's scan returns.

use std::path::{Path as FsPath, PathBuf};

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use silt_lakehouse::ObjectLocator;
use silt_lakehouse::iceberg::{IcebergTable, MetadataMemo, SnapshotChoice};
use url::Url;

/// This checkout's folder.
fn repo() -> PathBuf {
    silt_bench::files::source_dir(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// pyiceberg's table in `warehouse` and its description of every snapshot.
fn write_fixture(warehouse: &FsPath) -> serde_json::Value {
    let out = silt_bench::files::run_python_script(&repo(), "iceberg_fixture.py", &[warehouse.as_os_str()]);
    serde_json::from_slice(&out).expect("the fixture's JSON")
}

/// pyiceberg's table in a fresh warehouse, and how to read it.
struct Fixture {
    _dir: tempfile::TempDir,
    warehouse: PathBuf,
    /// The fixture script's description of the table.
    fixture: serde_json::Value,
    store: LocalFileSystem,
    locator: ObjectLocator,
}

impl Fixture {
    fn write() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().canonicalize().unwrap();
        let fixture = write_fixture(&warehouse);
        Fixture {
            _dir: dir,
            warehouse,
            fixture,
            store: LocalFileSystem::new(),
            locator: ObjectLocator::new(Url::parse("file:///").unwrap()),
        }
    }
}

fn local_path(url: &str) -> Path {
    ObjectLocator::new(Url::parse("file:///").unwrap()).path(url).unwrap()
}

#[tokio::test]
async fn every_snapshot_has_the_files_pyiceberg_plans_for_it() {
    let Fixture {
        _dir,
        warehouse,
        fixture,
        store,
        locator,
    } = Fixture::write();
    let memo = MetadataMemo::default();

    // By folder: the highest-numbered metadata file is the current one.
    let folder = local_path(fixture["table_location"].as_str().unwrap());
    let table = IcebergTable::load(&store, &folder, &memo).await.unwrap();
    assert_eq!(
        table.metadata_path,
        local_path(fixture["metadata_location"].as_str().unwrap())
    );
    // By the metadata file itself: the same table.
    let named = IcebergTable::load(&store, &table.metadata_path, &memo).await.unwrap();
    assert_eq!(named.metadata.snapshots.len(), table.metadata.snapshots.len());

    let snapshots = fixture["snapshots"].as_array().unwrap();
    assert!(snapshots.len() >= 5, "{fixture}");
    let mut replaced_files = 0;
    let mut previous: Vec<String> = Vec::new();
    for expected in snapshots {
        let id = expected["snapshot_id"].as_i64().unwrap();
        let files = table
            .files(&store, &locator, SnapshotChoice::Id(id), &memo)
            .await
            .unwrap();
        let paths: Vec<String> = files.data.iter().map(|f| f.path.clone()).collect();
        let want: Vec<String> = expected["data_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(paths, want, "snapshot {id} ({})", expected["operation"]);
        assert!(files.deletes.is_empty(), "pyiceberg writes copy-on-write deletes");
        let rows: i64 = files.data.iter().map(|f| f.record_count).sum();
        assert_eq!(rows, expected["rows"].as_i64().unwrap(), "snapshot {id}");
        for f in &files.data {
            let on_disk = std::fs::metadata(FsPath::new("/").join(local_path(&f.path).as_ref())).unwrap();
            assert_eq!(f.size, on_disk.len(), "{}", f.path);
            assert_eq!(f.format, "PARQUET");
            assert!(f.partition["cat"].is_string(), "{}", f.partition);
        }
        replaced_files += previous.iter().filter(|p| !paths.contains(p)).count();
        previous = paths;

        // Time travel by timestamp: the snapshot current at its own commit.
        let at = expected["timestamp_ms"].as_i64().unwrap();
        let as_of = table.metadata.snapshot(SnapshotChoice::AsOf(at)).unwrap().unwrap();
        assert_eq!(as_of.snapshot_id, id);
    }
    assert!(replaced_files > 0, "the delete and the overwrite replaced files");

    let current = table
        .files(&store, &locator, SnapshotChoice::Current, &memo)
        .await
        .unwrap();
    let last = snapshots.last().unwrap();
    assert_eq!(
        table.metadata.current_snapshot_id,
        fixture["current_snapshot_id"].as_i64()
    );
    assert_eq!(current.data.len(), last["data_files"].as_array().unwrap().len());
    // Every file ever written is still in the folder: listing it would be wrong.
    let written = std::fs::read_dir(warehouse.join("db/events/data"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .count();
    assert!(
        written > current.data.len(),
        "{written} files written, {} live",
        current.data.len()
    );
}

#[tokio::test]
async fn damaged_or_missing_metadata_is_an_error_naming_the_file() {
    let Fixture {
        _dir,
        warehouse,
        fixture,
        store,
        locator,
    } = Fixture::write();
    let memo = MetadataMemo::default();

    let nothing = local_path(&format!("file://{}/db", warehouse.display()));
    let err = IcebergTable::load(&store, &nothing, &memo)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an Iceberg table folder"), "{err}");

    let table = IcebergTable::load(&store, &local_path(fixture["table_location"].as_str().unwrap()), &memo)
        .await
        .unwrap();
    // Truncate the current snapshot's manifest list: a clear error, no panic.
    let snapshot = table.metadata.snapshot(SnapshotChoice::Current).unwrap().unwrap();
    let list = FsPath::new("/").join(local_path(snapshot.manifest_list.as_ref().unwrap()).as_ref());
    let bytes = std::fs::read(&list).unwrap();
    std::fs::write(&list, &bytes[..bytes.len() / 2]).unwrap();
    let err = table
        .files(&store, &locator, SnapshotChoice::Current, &memo)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("manifest list"), "{err}");
    let err = table
        .files(&store, &locator, SnapshotChoice::Id(42), &memo)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no snapshot 42"), "{err}");
}
