"""Fixtures of the Python tests, which run against the installed `silt` wheel.

`scripts/python-wheel.sh` builds the package as a wheel and installs it into
the test environment; the check below fails the session when `silt` would be
imported from the source tree instead (e.g. `python/` on `PYTHONPATH`), so the
tests prove what a user's `pip install` gets.
"""

import os
import pathlib

import silt

SOURCE_TREE = pathlib.Path(__file__).resolve().parent.parent / "silt"
if pathlib.Path(silt.__file__).resolve().parent == SOURCE_TREE:
    raise RuntimeError(
        f"the tests import `silt` from the source tree ({SOURCE_TREE}), not from the installed wheel: "
        "install it with scripts/python-wheel.sh and keep python/ off sys.path")


import datetime
import decimal
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import silt_server

LAKE_ROWS = 60_000


def lake_table(first: int, n: int) -> pa.Table:
    """Rows `first .. first + n` of the `items` table: every column type the
    tensor reader converts, no nulls except in `note`."""
    ids = range(first, first + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "qty": pa.array([(i * 7919) % 50 + 1 for i in ids], pa.int32()),
        "price": pa.array([(i % 1000) * 0.25 for i in ids], pa.float64()),
        "flag": pa.array([i % 3 == 0 for i in ids], pa.bool_()),
        "name": pa.array([f"n{(i * 31) % 97}" for i in ids], pa.string()),
        "day": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 400) for i in ids],
                        pa.date32()),
        "amount": pa.array([decimal.Decimal(i % 10_000) / 100 for i in ids], pa.decimal128(12, 2)),
        "Mixed Col": pa.array([-i for i in ids], pa.int64()),
        "note": pa.array([None if i % 10 == 0 else f"x{i % 5}" for i in ids], pa.string()),
    })


@pytest.fixture(scope="session")
def lake():
    """A folder table `items` of two Parquet files (60,000 rows, row groups
    of 8192), served by one `silt serve` for the whole session."""
    tmp = tempfile.mkdtemp(prefix="silt-py-lake-")
    root = os.path.join(tmp, "items")
    os.makedirs(root)
    parts = [lake_table(0, 35_000), lake_table(35_000, LAKE_ROWS - 35_000)]
    for i, part in enumerate(parts):
        pq.write_table(part, os.path.join(root, f"part-{i}.parquet"), row_group_size=8192)
    proc, port, admin = silt_server.start(["--table", f"items=file://{root}/"], os.path.join(tmp, "cache"))
    yield {"url": f"grpc://127.0.0.1:{port}", "admin": admin, "root": root,
           "table": pa.concat_tables(parts), "tmp": tmp}
    silt_server.stop(proc)
    shutil.rmtree(tmp, ignore_errors=True)


TOKEN = "py18-token"


@pytest.fixture(scope="session")
def secured(lake):
    """The lake's `items` served by a server started with `--auth-token TOKEN`."""
    proc, port, _ = silt_server.start(
        ["--table", f"items=file://{lake['root']}/", "--auth-token", TOKEN],
        os.path.join(lake["tmp"], "cache-token"))
    yield f"grpc://127.0.0.1:{port}"
    silt_server.stop(proc)
