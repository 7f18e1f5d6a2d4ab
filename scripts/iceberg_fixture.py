"""Write an Iceberg table with pyiceberg and describe every snapshot of it.

Usage: iceberg_fixture.py WAREHOUSE_DIR

Creates `db.events` through pyiceberg's SQL catalog (SQLite, in the
warehouse), partitioned by identity on `cat`, then commits: two appends, a
delete (pyiceberg rewrites the files it touches: copy-on-write), an overwrite
of one partition, and a third append. Prints one JSON object on stdout:

    {"metadata_location": "file:///.../metadata/0000N-....metadata.json",
     "table_location": "file:///...",
     "current_snapshot_id": N,
     "snapshots": [{"snapshot_id": N, "timestamp_ms": T, "operation": "append",
                    "data_files": [URL, ...], "delete_files": [URL, ...],
                    "rows": R}, ...]}

`data_files` are the files pyiceberg itself plans for a full scan of that
snapshot (sorted), `rows` the rows that scan returns: the reference the Rust
reader (`silt-lakehouse`) is compared with.
"""

import json
import sys

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo, LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType


def rows(first, count):
    ids = list(range(first, first + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array(["abc"[i % 3] for i in ids], pa.string()),
            "v": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def main():
    warehouse = sys.argv[1]
    catalog = SqlCatalog(
        "fixture",
        uri=f"sqlite:///{warehouse}/catalog.db",
        warehouse=f"file://{warehouse}",
    )
    catalog.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "cat", StringType(), required=False),
        NestedField(3, "v", DoubleType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="cat"))
    table = catalog.create_table("db.events", schema=schema, partition_spec=spec)
    table.append(rows(0, 300))
    table.append(rows(300, 300))
    table.delete(LessThan("id", 100))
    table.overwrite(rows(1000, 60).filter(pa.compute.equal(rows(1000, 60)["cat"], "a")), overwrite_filter=EqualTo("cat", "a"))
    table.append(rows(2000, 90))
    table = catalog.load_table("db.events")

    snapshots = []
    for snap in table.metadata.snapshots:
        scan = table.scan(snapshot_id=snap.snapshot_id)
        tasks = list(scan.plan_files())
        snapshots.append(
            {
                "snapshot_id": snap.snapshot_id,
                "timestamp_ms": snap.timestamp_ms,
                "operation": snap.summary.operation.value if snap.summary else None,
                "data_files": sorted(t.file.file_path for t in tasks),
                "delete_files": sorted({d.file_path for t in tasks for d in t.delete_files}),
                "rows": scan.to_arrow().num_rows,
            }
        )
    print(
        json.dumps(
            {
                "metadata_location": table.metadata_location,
                "table_location": table.metadata.location,
                "current_snapshot_id": table.metadata.current_snapshot_id,
                "snapshots": snapshots,
            }
        )
    )


if __name__ == "__main__":
    main()
