"""Write an Iceberg table with pyiceberg, in phases, for Silt's server tests.

Usage: iceberg_server_fixture.py WAREHOUSE_DIR PHASE

PHASE `create` makes `db.events` (SQL catalog on SQLite in the warehouse,
partitioned by identity on `cat`) and commits: two appends, a delete
(pyiceberg rewrites the files it touches), an overwrite of one partition.
PHASE `more` commits to the same table: position deletes (a merge-on-read
delete: pyiceberg does not write them, so this script writes the delete
file, its delete manifest and the snapshot to the Iceberg spec, and commits
it through pyiceberg's catalog), an added column and an append that fills it.
PHASE `evolve` (after `create`) renames a column, gives its old name to a
new column and promotes an int column to long, appending between.
PHASE `equality-deletes` (after `create`) commits equality delete files
(written to the spec) and an append; see `equality_deletes`.
PHASE `hidden` (alone) makes `db.trips`, partitioned by transforms of its
columns (see `hidden`); it describes that table. PHASE `append` appends a few rows. PHASE `appends N` commits N appends of
100 rows and prints nothing (for commits made while queries run).

After each phase, every snapshot's rows as pyiceberg's own scan returns them
(which applies position deletes) are written to
`WAREHOUSE_DIR/expected/<snapshot id>.parquet`, and one JSON object is
printed: {"table_location": URL, "current_snapshot_id": N,
"snapshots": [{"snapshot_id": N, "timestamp_ms": T, "rows": R}, ...]}.
"""

import json
import os
import sys
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, LessThan
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, MonthTransform, TruncateTransform
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)


def rows(first, count, extra=False):
    ids = list(range(first, first + count))
    columns = {
        "id": pa.array(ids, pa.int64()),
        "cat": pa.array(["abc"[i % 3] for i in ids], pa.string()),
        "v": pa.array([i * 0.5 for i in ids], pa.float64()),
    }
    if extra:
        columns["note"] = pa.array([f"n{i % 7}" for i in ids], pa.string())
    return pa.table(columns)


def catalog_of(warehouse):
    return SqlCatalog("fixture", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")


def create(catalog):
    catalog.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "cat", StringType(), required=False),
        NestedField(3, "v", DoubleType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="cat"))
    # Small row groups: position deletes then fall in many row groups of a file.
    properties = {"write.parquet.row-group-limit": "400"}
    table = catalog.create_table("db.events", schema=schema, partition_spec=spec, properties=properties)
    table.append(rows(0, 3000))
    table.append(rows(3000, 3000))
    table.delete(LessThan("id", 100))
    replacement = rows(10000, 600)
    table.overwrite(replacement.filter(pa.compute.equal(replacement["cat"], "a")), overwrite_filter=EqualTo("cat", "a"))


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg writes data manifests only)."""

    def content(self):
        return ManifestContent.DELETES

    @property
    def _meta(self):
        return {**super()._meta, "content": "deletes"}


def local(url):
    return url[len("file://") :]


def commit_position_deletes(table, every):
    """Deletes every `every`-th row (by position) of each data file of the
    current snapshot, as one position delete file per data file."""
    delete_files = []
    for task in table.scan().plan_files():
        data = task.file
        positions = list(range(0, data.record_count, every))
        schema = pa.schema(
            [
                pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": "2147483546"}),
                pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"}),
            ]
        )
        path = write_delete_file(
            table, "pos", pa.table({"file_path": [data.file_path] * len(positions), "pos": positions}, schema=schema)
        )
        delete_files.append(
            DataFile.from_args(
                content=DataFileContent.POSITION_DELETES,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=data.partition,
                record_count=len(positions),
                file_size_in_bytes=os.path.getsize(local(path)),
                spec_id=data.spec_id,
            )
        )
    commit_delete_files(table, delete_files)


def commit_delete_files(table, delete_files):
    """Commits `delete_files` (DataFiles of delete content) as one snapshot:
    a delete manifest beside the parent's manifests (pyiceberg writes data
    manifests only)."""
    metadata = table.metadata
    parent = table.current_snapshot()
    snapshot_id = metadata.new_snapshot_id()
    sequence_number = metadata.next_sequence_number()
    manifest_path = f"{table.location()}/metadata/{uuid.uuid4()}-m-deletes.avro"
    with DeleteManifestWriter(
        metadata.spec(), metadata.schema(), table.io.new_output(manifest_path), snapshot_id, "deflate"
    ) as writer:
        for f in delete_files:
            writer.add(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=snapshot_id,
                    sequence_number=None,
                    file_sequence_number=None,
                    data_file=f,
                )
            )
    manifests = parent.manifests(table.io) + [writer.to_manifest_file()]
    list_path = f"{table.location()}/metadata/snap-{snapshot_id}-0-{uuid.uuid4()}.avro"
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(list_path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence_number,
        avro_compression="deflate",
    ) as list_writer:
        list_writer.add_manifests(manifests)
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        manifest_list=list_path,
        sequence_number=sequence_number,
        summary=Summary(operation=Operation.DELETE),
        schema_id=metadata.current_schema_id,
    )
    with table.transaction() as tx:
        tx._apply(
            (
                AddSnapshotUpdate(snapshot=snapshot),
                SetSnapshotRefUpdate(
                    snapshot_id=snapshot_id,
                    parent_snapshot_id=parent.snapshot_id,
                    ref_name="main",
                    type=SnapshotRefType.BRANCH,
                ),
            ),
            (AssertRefSnapshotId(snapshot_id=parent.snapshot_id, ref="main"),),
        )


def more(catalog):
    table = catalog.load_table("db.events")
    commit_position_deletes(table, 7)
    table = catalog.load_table("db.events")
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table = catalog.load_table("db.events")
    table.append(rows(20000, 900, extra=True))
    # A partition-spec change (files before it keep the old spec), then an
    # append under the new one.
    with catalog.load_table("db.events").update_spec() as update:
        update.add_field("id", BucketTransform(4), "id_bucket")
    catalog.load_table("db.events").append(rows(21000, 400, extra=True))
    # A compaction of partition `b`: its rows rewritten into new files (the
    # old ones, and the deletes against them, leave the snapshot).
    table = catalog.load_table("db.events")
    b = table.scan(row_filter=EqualTo("cat", "b")).to_arrow()
    table.overwrite(b, overwrite_filter=EqualTo("cat", "b"))


def evolve(catalog):
    """Schema changes that only reading by field id gets right: `v` renamed
    to `amount`, a new string column given the old name `v` (older files'
    `v` is another column), an int column `qty` added and then promoted to
    long, with appends between (ids from 50000)."""
    table = catalog.load_table("db.events")
    with table.update_schema() as update:
        update.rename_column("v", "amount")
    with catalog.load_table("db.events").update_schema() as update:
        update.add_column("v", StringType())
        update.add_column("qty", IntegerType())

    def evolved(first, count, qty_type, qty_base):
        ids = list(range(first, first + count))
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "cat": pa.array(["abc"[i % 3] for i in ids], pa.string()),
                "amount": pa.array([i * 0.25 for i in ids], pa.float64()),
                "v": pa.array([f"x{i % 11}" if i % 5 else None for i in ids], pa.string()),
                "qty": pa.array([qty_base + i % 13 for i in ids], qty_type),
            }
        )

    catalog.load_table("db.events").append(evolved(50000, 500, pa.int32(), 0))
    with catalog.load_table("db.events").update_schema() as update:
        update.update_column("qty", LongType())
    catalog.load_table("db.events").append(evolved(51000, 300, pa.int64(), 3_000_000_000))


def equality_deletes(catalog, warehouse):
    """Equality deletes (pyiceberg neither writes nor reads them, so this
    script writes them to the spec): in partition `a`, rows by `id` (keys
    of partition `b` rows too, which must survive: a delete applies to its
    own partition); in partition `b`, rows by (`cat`, `v`); then an append
    of rows with deleted keys (newer files: not deleted). pyiceberg cannot
    scan these snapshots, so their expected rows are computed here from the
    parent's by the spec's rules (`write_expected`)."""
    table = catalog.load_table("db.events")
    parent = table.scan().to_arrow()
    partitions = {}
    for task in table.scan().plan_files():
        partitions[task.file.partition[0]] = (task.file.partition, task.file.spec_id)
    a_keys = list(range(10002, 10600, 9)) + [100, 103]
    b_keys = [("b", i * 0.5) for i in range(202, 1200, 6)] + [("b", None)]
    a_file = write_delete_file(
        table, "eq", pa.table({"id": pa.array(a_keys, pa.int64())}, schema=with_ids(pa.schema([("id", pa.int64())]), [1]))
    )
    b_file = write_delete_file(
        table,
        "eq",
        pa.table(
            {"cat": [k[0] for k in b_keys], "v": pa.array([k[1] for k in b_keys], pa.float64())},
            schema=with_ids(pa.schema([("cat", pa.string()), ("v", pa.float64())]), [2, 3]),
        ),
    )
    delete_files = [
        equality_delete_file(a_file, len(a_keys), [1], *partitions["a"]),
        equality_delete_file(b_file, len(b_keys), [2, 3], *partitions["b"]),
    ]
    commit_delete_files(table, delete_files)
    deleted_a = pa.compute.and_(
        pa.compute.equal(parent["cat"], "a"), pa.compute.is_in(parent["id"], pa.array(a_keys, pa.int64()))
    )
    b_values = pa.array([k[1] for k in b_keys if k[1] is not None], pa.float64())
    deleted_b = pa.compute.and_(pa.compute.equal(parent["cat"], "b"), pa.compute.is_in(parent["v"], b_values))
    after_delete = parent.filter(pa.compute.invert(pa.compute.or_(deleted_a, deleted_b)))
    table = catalog.load_table("db.events")
    write_expected(table, warehouse, after_delete)
    again = pa.concat_tables([rows(10002, 1), rows(10011, 1), rows(202, 1)])
    table.append(again)
    table = catalog.load_table("db.events")
    write_expected(table, warehouse, pa.concat_tables([after_delete, again]))


def with_ids(schema, ids):
    return pa.schema([f.with_metadata({"PARQUET:field_id": str(i)}) for f, i in zip(schema, ids)])


def write_delete_file(table, kind, rows):
    """Writes a delete file of `rows`; its URL. Beside the data folder, not
    in it: the folder stays a plain Parquet table of the data files
    (benchmarks compare the two)."""
    os.makedirs(local(f"{table.location()}/deletes"), exist_ok=True)
    path = f"{table.location()}/deletes/{kind}-deletes-{uuid.uuid4()}.parquet"
    pq.write_table(rows, local(path))
    return path


def equality_delete_file(path, count, ids, partition, spec_id):
    return DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=count,
        file_size_in_bytes=os.path.getsize(local(path)),
        equality_ids=ids,
        spec_id=spec_id,
    )


def write_expected(table, warehouse, rows):
    """The current snapshot's rows, as computed, where `describe` keeps them.
    (DuckDB's iceberg extension 1.4.4 would be the independent reader, but
    it fails on every equality delete file this script writes with an
    internal error, "Expected vector of type INT32, but found vector of type
    INT64", while it reads the position deletes alike.)"""
    os.makedirs(f"{warehouse}/expected", exist_ok=True)
    pq.write_table(rows, f"{warehouse}/expected/{table.current_snapshot().snapshot_id}.parquet")


def hidden(catalog):
    """A second table, `db.trips`, partitioned by transforms of its columns
    (hidden partitioning): `day(ts)` and `truncate(1000, id)`, then, after
    two appends, `month(d)` added to the spec and an append. `ts` keeps no
    column metrics (`write.metadata.metrics.column.ts = none`): a filter on
    it can prune by the `day(ts)` tuples only."""
    import datetime
    import decimal

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "name", StringType(), required=False),
        NestedField(4, "price", DecimalType(10, 2), required=False),
        NestedField(5, "d", DateType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=1, field_id=1001, transform=TruncateTransform(1000), name="id_trunc"),
    )
    properties = {"write.metadata.metrics.column.ts": "none"}
    if ("db",) not in catalog.list_namespaces():
        catalog.create_namespace("db")
    table = catalog.create_table("db.trips", schema=schema, partition_spec=spec, properties=properties)
    start = datetime.datetime(2026, 11, 20, tzinfo=datetime.timezone.utc)
    first_day = datetime.date(2026, 9, 1)

    def trips(first, count):
        ids = list(range(first, first + count))
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "ts": pa.array([start + datetime.timedelta(seconds=100 * i) for i in ids], pa.timestamp("us", "UTC")),
                "name": pa.array([f"n{i:05}" for i in ids], pa.string()),
                "price": pa.array([decimal.Decimal(i - 1000) / 100 for i in ids], pa.decimal128(10, 2)),
                "d": pa.array([first_day + datetime.timedelta(days=i // 50) for i in ids], pa.date32()),
            }
        )

    table.append(trips(0, 2000))
    catalog.load_table("db.trips").append(trips(2000, 2000))
    with catalog.load_table("db.trips").update_spec() as update:
        update.add_field("d", MonthTransform(), "d_month")
    catalog.load_table("db.trips").append(trips(4000, 1000))


def appends(catalog, count):
    """`count` commits of 100 rows each, as fast as the catalog takes them."""
    for _ in range(count):
        table = catalog.load_table("db.events")
        first = 40000 + 100 * len(table.metadata.snapshots)
        table.append(rows(first, 100, extra="note" in [f.name for f in table.schema().fields]))


def append(catalog):
    table = catalog.load_table("db.events")
    first = 30000 + 100 * len(table.metadata.snapshots)
    table.append(rows(first, 30, extra="note" in [f.name for f in table.schema().fields]))


def describe(catalog, warehouse, name="db.events"):
    table = catalog.load_table(name)
    os.makedirs(f"{warehouse}/expected", exist_ok=True)
    snapshots = []
    for snap in table.metadata.snapshots:
        expected = f"{warehouse}/expected/{snap.snapshot_id}.parquet"
        try:
            result = table.scan(snapshot_id=snap.snapshot_id).to_arrow()
            pq.write_table(result, expected)
        except ValueError:
            # Equality deletes: pyiceberg cannot scan them; the rows were
            # computed (and checked) when the snapshot was committed.
            result = pq.read_table(expected)
        snapshots.append({"snapshot_id": snap.snapshot_id, "timestamp_ms": snap.timestamp_ms, "rows": result.num_rows})
    return {
        "table_location": table.metadata.location,
        "current_snapshot_id": table.metadata.current_snapshot_id,
        "snapshots": snapshots,
    }


def main():
    warehouse, phase = sys.argv[1], sys.argv[2]
    catalog = catalog_of(warehouse)
    if phase == "appends":
        appends(catalog, int(sys.argv[3]))
        return
    if phase == "equality-deletes":
        equality_deletes(catalog, warehouse)
        print(json.dumps(describe(catalog, warehouse)))
        return
    if phase == "hidden":
        hidden(catalog)
        print(json.dumps(describe(catalog, warehouse, "db.trips")))
        return
    {"create": create, "more": more, "append": append, "evolve": evolve}[phase](catalog)
    print(json.dumps(describe(catalog, warehouse)))


if __name__ == "__main__":
    main()
