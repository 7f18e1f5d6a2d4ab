"""`silt.torch`: TensorStream and SiltDataset against a real `silt serve`
(the session's `items` table), on CPU — the same code path a GPU takes,
less the pinning."""

import gc
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch
import torch.utils.data

import silt
from silt.torch import SiltDataset, TensorStream

NUMERIC = ["id", "qty", "price", "flag", "day", "amount", "Mixed Col"]


def producers():
    return [t for t in threading.enumerate()
            if t.name in ("silt-tensor-producer", "silt-tensor-receiver") and t.is_alive()]


@pytest.fixture
def scan(lake):
    with silt.connect(lake["url"]) as conn:
        yield conn.lazy_scan("items")


def by_id(table):
    return table.sort_by("id")


def gather(batches, names):
    """Concatenates the batches' tensors per name."""
    return {n: torch.cat([b[n] for b in batches]) for n in names}


def test_values_equal_the_tables_columns_and_batches_are_exact(lake, scan):
    table = by_id(lake["table"])
    with TensorStream(scan, batch_rows=7000, columns=NUMERIC + ["name"], queue_depth=3) as stream:
        batches = list(stream)
        names = stream.dictionaries["name"]
    sizes = [len(b["id"]) for b in batches]
    assert sizes == [7000] * (60_000 // 7000) + [60_000 % 7000]
    for b in batches:
        assert set(b) == set(NUMERIC + ["name"])
        assert all(len(t) == len(b["id"]) for t in b.values())
    got = gather(batches, NUMERIC + ["name"])
    order = torch.argsort(got["id"])  # Silt answers in no particular order
    got = {n: t[order] for n, t in got.items()}
    assert got["id"].dtype == torch.int64 and got["id"].tolist() == list(range(60_000))
    assert got["qty"].dtype == torch.int32
    assert got["qty"].tolist() == table["qty"].to_pylist()
    assert got["price"].dtype == torch.float64
    assert torch.equal(got["price"], torch.from_numpy(table["price"].to_numpy()))
    assert got["flag"].dtype == torch.bool
    assert got["flag"].tolist() == table["flag"].to_pylist()
    assert got["day"].dtype == torch.int32   # days since 1970-01-01
    assert got["day"].tolist() == pc.cast(table["day"], pa.int32()).to_pylist()
    assert got["amount"].dtype == torch.float64
    assert got["amount"].tolist() == pc.cast(table["amount"], pa.float64()).to_pylist()
    assert got["Mixed Col"].tolist() == table["Mixed Col"].to_pylist()
    # Strings: stream-wide codes; the dictionary maps them back.
    assert got["name"].dtype == torch.int64
    assert len(names) == 97
    assert names.take(pa.array(got["name"].numpy())).to_pylist() == table["name"].to_pylist()


def test_exact_decimals_batch_dictionaries_and_a_sql_query(lake):
    table = by_id(lake["table"])
    query = silt.Query(lake["url"], 'SELECT id, amount, name FROM items WHERE id < 1000 ORDER BY id')
    with TensorStream(query, batch_rows=300, decimals="unscaled", dictionaries="batch") as stream:
        batches = list(stream)
    assert [len(b["id"]) for b in batches] == [300, 300, 300, 100]
    assert torch.cat([b["id"] for b in batches]).tolist() == list(range(1000))
    cents = torch.cat([b["amount"] for b in batches])
    assert cents.dtype == torch.int64
    assert cents.tolist() == [int(v * 100) for v in table["amount"].to_pylist()[:1000]]
    names = []
    for b in batches:
        names += b["name.dictionary"].take(pa.array(b["name"].numpy())).to_pylist()
    assert names == table["name"].to_pylist()[:1000]


def test_nulls_are_an_error_or_a_mask(lake, scan):
    with pytest.raises(ValueError, match="'note' has nulls"):
        with TensorStream(scan, batch_rows=5000, columns=["id", "note"]) as stream:
            list(stream)
    assert producers() == []
    with TensorStream(scan, batch_rows=5000, columns=["id", "note"], nulls="mask") as stream:
        batches = list(stream)
        notes = stream.dictionaries["note"]
    got = gather(batches, ["id", "note", "note.valid", "id.valid"])
    assert got["id.valid"].all()
    assert torch.equal(got["note.valid"], got["id"] % 10 != 0)
    assert (got["note"][~got["note.valid"]] == -1).all()
    valid = got["note.valid"]
    values = notes.take(pa.array(got["note"][valid].numpy())).to_pylist()
    assert values == [f"x{i % 5}" for i in got["id"][valid].tolist()]


def test_a_slow_consumer_bounds_what_the_producer_holds(lake, scan):
    """Backpressure: while the consumer holds off, the producer stops at a full
    queue — it has made at most queue_depth + 1 batches beyond those taken,
    and read from the server only what those need."""
    depth, rows = 2, 1000
    with TensorStream(scan, batch_rows=rows, columns=["id"], queue_depth=depth) as stream:
        first = next(stream)
        assert stream.stats.queue_full.wait(60), "the producer never filled the queue"
        stats = stream.stats
        with stats.lock:
            outstanding = stats.produced - stats.consumed
            received = stats.received_rows
            biggest_batch = stats.max_batch_rows
        assert outstanding <= depth + 1
        # Received: the chunks made (queued, taken, being put), the rest of
        # the batch being cut (less than a batch), less than a chunk waiting
        # for the producer plus the batch that crossed that limit, and the
        # batch in the receiver's hand.
        assert received <= (depth + 3) * rows + 3 * biggest_batch
        assert received < 60_000  # it did not read the table ahead of the consumer
        ids = [first["id"]]
        for batch in stream:
            time.sleep(0.002)  # a slow consumer (no time is measured or asserted)
            ids.append(batch["id"])
        assert stats.max_outstanding <= depth + 1
        assert stats.producer_waits > 0
    assert sorted(torch.cat(ids).tolist()) == list(range(60_000))


def test_stopping_early_leaves_no_producer_thread(lake, scan):
    before = producers()
    with TensorStream(scan, batch_rows=1000, queue_depth=2, columns=["id", "qty"]) as stream:
        next(stream)
        assert stream.thread.is_alive()
    assert not stream.thread.is_alive()
    # A stream abandoned in a loop without `with` stops when it is dropped.
    for _ in TensorStream(scan, batch_rows=1000, queue_depth=2, columns=["id"]):
        break
    gc.collect()
    for t in producers():
        t.join(30)
    assert producers() == before == []


def test_producer_errors_reach_the_consumer(lake):
    with pytest.raises(silt.SiltError, match="unknown table 'nope'"):
        list(TensorStream(silt.Query(lake["url"], "SELECT * FROM nope"), batch_rows=10))
    with pytest.raises(silt.SiltError, match="SQL parse error"):
        list(TensorStream(silt.Query(lake["url"], "SELEC 1"), batch_rows=10))
    with pytest.raises(TypeError, match="has no tensor form"):
        list(TensorStream(pa.table({"l": [[1, 2]]}), batch_rows=10))

    def failing():
        yield pa.record_batch({"x": pa.array(range(10))})
        raise RuntimeError("source broke")

    stream = TensorStream(failing, batch_rows=4)
    assert len(next(stream)["x"]) == 4
    assert len(next(stream)["x"]) == 4
    with pytest.raises(RuntimeError, match="source broke"):
        next(stream)
    assert producers() == []


def test_zero_copy_within_one_batch():
    data = np.arange(10_000, dtype=np.int64)
    table = pa.table({"x": data})
    with TensorStream(table, batch_rows=10_000) as stream:
        [batch] = list(stream)
    buffer = table["x"].chunk(0).buffers()[1]
    assert batch["x"].data_ptr() == buffer.address  # the tensor is the Arrow buffer
    assert torch.equal(batch["x"], torch.from_numpy(data))


def test_the_accelerator_path_runs_wherever_it_can(lake, scan):
    """On CUDA: pinned host tensors and non-blocking copies; without a GPU the
    same calls run with device "cpu" (pinning needs CUDA)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with TensorStream(scan, batch_rows=10_000, device=device, columns=["id"]) as stream:
        batches = list(stream)
    assert all(b["id"].device.type == device for b in batches)
    assert sorted(torch.cat([b["id"].cpu() for b in batches]).tolist()) == list(range(60_000))


@pytest.mark.parametrize("shard_by", ["id", "Mixed Col", "name", "price", "note"])
def test_shards_partition_the_scan(lake, scan, shard_by):
    """The shard predicates of every column kind (integers, negative ones, strings,
    floats, a column with NULLs): each row in exactly one shard."""
    seen = []
    for i in range(3):
        got = scan.shard(i, 3, shard_by).read_all()
        assert 0 < got.num_rows < 60_000
        seen += got["id"].to_pylist()
    assert sorted(seen) == list(range(60_000))


def test_dataloader_workers_and_ranks_yield_every_row_once(lake, scan):
    narrow = silt.Scan(lake["url"], "items", ("id", "qty", "name"))
    ids, qty = [], []
    for rank in range(2):  # two ranks, as torch.distributed would give them
        dataset = SiltDataset(narrow, batch_rows=4096, shard_by="id", rank=rank, world_size=2)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                             multiprocessing_context="spawn")
        for batch in loader:
            assert len(batch["id"]) <= 4096
            assert isinstance(batch["name.dictionary"], pa.Array)
            ids.append(batch["id"])
            qty.append(batch["qty"])
    ids, qty = torch.cat(ids), torch.cat(qty)
    assert sorted(ids.tolist()) == list(range(60_000))
    table = lake["table"]
    assert qty[torch.argsort(ids)].tolist() == by_id(table)["qty"].to_pylist()
    # One worker, one rank: the whole scan unsharded.
    total = sum(len(b["id"]) for b in torch.utils.data.DataLoader(
        SiltDataset(narrow, batch_rows=50_000), batch_size=None))
    assert total == 60_000


def test_a_token_reaches_the_producer(secured):
    from conftest import TOKEN
    with TensorStream(silt.Scan(secured, "items", ("id",), "id < 5000", token=TOKEN), batch_rows=1000) as s:
        assert sorted(torch.cat([b["id"] for b in s]).tolist()) == list(range(5000))
    with pytest.raises(silt.SiltError) as err:
        list(TensorStream(silt.Scan(secured, "items", ("id",), token="wrong"), batch_rows=1000))
    assert err.value.kind == "FlightUnauthenticatedError"


def test_forked_dataloader_workers_fail_clearly_instead_of_hanging(lake):
    """gRPC does not survive fork: a worker forked after this process used
    Silt raises a SiltError that says to spawn, rather than hang."""
    silt.connect(lake["url"]).close()  # this process has used gRPC
    dataset = SiltDataset(silt.Scan(lake["url"], "items", ("id",)), batch_rows=4096, shard_by="id")
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork")
    with pytest.raises(silt.SiltError, match="spawn"):
        list(loader)
