"""`python -m silt.bench` end to end on TPC-H SF 0.01 against a real
`silt serve`: both reports run, print every line and write complete, sane
measurements (no timing thresholds: the machine's speed is not tested)."""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import silt_server

TABLES = ["lineitem", "orders", "customer", "part", "supplier", "nation", "region"]


@pytest.fixture(scope="module")
def sf001():
    tmp = tempfile.mkdtemp(prefix="silt-py-bench-")
    data = os.path.join(tmp, "tpch")
    subprocess.run([os.environ.get("SILT_BIN", "silt"), "bench", "gen", "tpch", "--sf", "0.01", "--out", data,
                    "--row-group-rows", "16384"], check=True, capture_output=True)
    args = [a for t in TABLES for a in ("--table", f"{t}=file://{data}/{t}/")]
    proc, port, _ = silt_server.start(args, os.path.join(tmp, "cache"))
    yield f"grpc://127.0.0.1:{port}", tmp
    silt_server.stop(proc)
    shutil.rmtree(tmp, ignore_errors=True)


def bench(*args):
    # `python -m silt.bench` of the installed wheel, as a user runs it.
    done = subprocess.run([sys.executable, "-m", "silt.bench", *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def finite_positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_tensor_report(sf001):
    url, tmp = sf001
    path = os.path.join(tmp, "tensor.json")
    out = bench("tensor", "--server", url, "--ranks", "2", "--queries", "3,5,12,14", "--runs", "2",
                "--batch-rows", "8192", "--loopback-mib", "1", "--json", path)
    lines = out.splitlines()
    assert "T_min_s" in out and "overlap" in out
    for q in (3, 5, 12, 14):
        [row] = [line for line in lines if line.split()[:1] == [f"Q{q}"]]
        assert len(row.split()) == 16, row
    report = json.load(open(path))
    assert report["mode"] == "tensor" and report["ranks"] == 2
    assert finite_positive(report["loopback"]["bandwidth"])
    assert set(report["queries"]) == {"3", "5", "12", "14"}
    for q, res in report["queries"].items():
        assert len(res["runs"]) == 2
        for run in res["runs"] + [res["median"]]:
            for key in ("achieved_s", "scanned_bytes", "t_scan_s", "scan_bandwidth", "shuffled_bytes",
                        "t_shuffle_s", "t_min_s", "ratio", "t_exch_s"):
                assert finite_positive(run[key]), (q, key, run)
            assert 0 <= run["overlap"] <= 1
            assert run["scan_wait_s"] >= 0
        for run in res["runs"]:
            # The bare replay read exactly the rows the query scanned.
            assert run["replayed_rows"] == run["scanned_rows"] > 0
            assert run["scans"] >= 2
            assert run["t_min_s"] == max(run["t_scan_s"], run["t_shuffle_s"])
            assert run["ratio"] == pytest.approx(run["achieved_s"] / run["t_min_s"])
            assert run["t_shuffle_s"] == pytest.approx(run["shuffled_bytes"] / report["loopback"]["bandwidth"])


def test_reader_report(sf001):
    url, tmp = sf001
    path = os.path.join(tmp, "reader.json")
    out = bench("reader", "--server", url, "--runs", "2", "--batch-rows", "4096", "--queue-depth", "2",
                "--rss-runs", "1", "--delay", "0.001", "--small-filter", "l_orderkey <= 6000", "--huge-copies", "2", "--json", path)
    assert "throughput ratio (TensorStream / bare)" in out
    assert "peak RSS growth" in out
    report = json.load(open(path))
    assert report["mode"] == "reader" and len(report["runs"]) == 2
    med = report["median"]
    assert med["rows"] == 60175  # lineitem at SF 0.01
    for key in ("bare_s", "tensor_s", "bare_rows_per_s", "tensor_rows_per_s", "ratio"):
        assert finite_positive(med[key]), key
    # As tensors: 3 int64 keys, int32 l_linenumber, 4 decimals as float64, 3 dates as int32 days.
    assert report["batch_bytes"] == 4096 * (3 * 8 + 4 + 4 * 8 + 3 * 4)
    assert report["queue_bound_bytes"] == 2 * report["batch_bytes"]
    rss = report["rss"]
    assert set(rss) == {f"{size}/{how}" for size in ("small", "large", "large_x2") for how in ("tensor", "read_all")}
    assert 0 < rss["small/tensor"]["rows"] < rss["large/tensor"]["rows"] == med["rows"]
    assert rss["large_x2/tensor"]["rows"] == rss["large_x2/read_all"]["rows"] == 2 * med["rows"]
    assert rss["large/read_all"]["rows"] == med["rows"]
    for m in rss.values():
        assert m["growth"] >= 0 and m["peak_hwm"] > 0
    # The slow consumer made the producer wait: the queue filled and held.
    assert 1 <= rss["large/tensor"]["max_outstanding"] <= 2 + 1
