"""The operator dashboard (`GET /` on the admin listener) in headless Chromium
against a real `silt serve` started with `--auth-token`: the page and `/stats`
refuse requests without the token, the page takes the token from `?token=`,
renders the server's own figures (read back from the DOM after its scripts
ran), and a screenshot is kept for a human to look at.

Chromium: `$SILT_CHROMIUM`, else `/usr/bin/chromium` (`scripts/browser-env.sh`
installs it and prints its path). The screenshot goes to `$SILT_TEST_OUT` if
set, else the test's tmp_path."""

import json
import os
import subprocess
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import silt
import silt_server

TOKEN = "dash-token-4711"
ROWS = 40_000


def chromium() -> str:
    path = os.environ.get("SILT_CHROMIUM") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if not path:
        pytest.fail("no Chromium for the dashboard test: run scripts/browser-env.sh and set SILT_CHROMIUM to the "
                    "path it prints")
    if not os.access(path, os.X_OK):
        pytest.fail(f"SILT_CHROMIUM={path} is not an executable; run scripts/browser-env.sh")
    return path


def http(admin: int, path: str, token=None):
    """GET http://127.0.0.1:ADMIN/PATH -> (status, content type, body)."""
    req = urllib.request.Request(f"http://127.0.0.1:{admin}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("content-type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read()


def stats(admin: int) -> dict:
    status, ctype, body = http(admin, "/stats", TOKEN)
    assert status == 200, (status, body[:500])
    assert ctype.startswith("application/json"), ctype
    return json.loads(body)


class Dom(HTMLParser):
    """Every element with an id: its attributes and text; and <body>'s attributes."""

    def __init__(self, html: str):
        super().__init__()
        self.by_id, self.body, self.open = {}, {}, []
        self.feed(html)

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def handle_starttag(self, tag, attrs, closed=False):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        if "id" in attrs:
            self.by_id[attrs["id"]] = {"attrs": attrs, "text": ""}
        if tag not in self.VOID and not closed:
            self.open.append(attrs.get("id"))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs, closed=True)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.open:
            self.open.pop()

    def handle_data(self, data):
        for i in self.open:
            if i is not None:
                self.by_id[i]["text"] += data


def run_chromium(browser: str, profile: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    profile.mkdir(parents=True, exist_ok=True)
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=8000", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@pytest.fixture
def server(tmp_path):
    """`items` (two Parquet files) served with `--auth-token TOKEN`."""
    root = tmp_path / "items"
    root.mkdir()
    ids = range(ROWS)
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "qty": pa.array([(i * 7919) % 50 + 1 for i in ids], pa.int32()),
        "price": pa.array([(i % 1000) * 0.25 for i in ids], pa.float64()),
        "name": pa.array([f"n{(i * 31) % 97}" for i in ids], pa.string()),
    })
    half = ROWS // 2
    pq.write_table(table.slice(0, half), root / "part-0.parquet", row_group_size=8192)
    pq.write_table(table.slice(half), root / "part-1.parquet", row_group_size=8192)
    proc, port, admin = silt_server.start(["--table", f"items=file://{root}/", "--auth-token", TOKEN],
                                          str(tmp_path / "cache"))
    yield {"url": f"grpc://127.0.0.1:{port}", "admin": admin}
    silt_server.stop(proc)


def workload(url: str):
    """A few queries, each twice, so every counter the page shows moves and
    the memory tier has hits."""
    with silt.connect(url, token=TOKEN) as conn:
        for _ in range(2):
            assert conn.sql("SELECT count(*) AS n FROM items")["n"].to_pylist() == [ROWS]
            assert conn.sql("SELECT name, count(*) AS n, sum(qty) AS q FROM items GROUP BY name").num_rows == 97
            conn.sql("SELECT id, price FROM items WHERE qty < 5")
            conn.scan("items", ["id", "name"], "qty > 45")


# id in the page -> where /stats has it; all counters that only grow.
COUNTERS = {
    "queries-total": lambda s: s["metrics"]["silt_queries_total"],
    "memory-hits": lambda s: s["tiers"]["memory"]["hits"],
    "store-get-requests": lambda s: s["store"]["get_requests"],
    "bytes-would-read": lambda s: s["bytes_saved"]["would_read"],
    "bytes-sent": lambda s: s["bytes_saved"]["sent"],
}


def test_dashboard_in_headless_chromium(server, tmp_path):
    browser = chromium()
    admin = server["admin"]
    workload(server["url"])

    # Without the token: the page and the statistics are refused, health is not.
    assert http(admin, "/health")[0] == 200
    assert http(admin, "/stats")[0] == 401
    assert http(admin, "/stats", "wrong-token")[0] == 401
    assert http(admin, "/")[0] == 401
    assert http(admin, "/?token=wrong-token")[0] == 401
    # With it, the page is served, by header and by `?token=` (how a browser opens it).
    for path, token in (("/", TOKEN), (f"/?token={TOKEN}", None)):
        status, ctype, body = http(admin, path, token)
        assert status == 200, (path, status, body[:300])
        assert ctype.startswith("text/html"), ctype
        assert b"assets/uPlot.iife.min.js" in body
    # The page's <script src>/<link href> cannot carry the token (no header;
    # relative URLs drop the query): the vendored assets are public.
    for path, want in (("/assets/uPlot.iife.min.js", "application/javascript"), ("/assets/uPlot.min.css", "text/css")):
        status, ctype, body = http(admin, path)
        assert status == 200, f"{path} must load without a token (the page's script/link tags cannot send one): {status}"
        assert ctype.startswith(want), (path, ctype)
        assert len(body) > 1000, path

    before = stats(admin)
    for key, get in COUNTERS.items():
        assert get(before) > 0, f"the workload left {key} at 0: {before}"

    url = f"http://127.0.0.1:{admin}/?token={TOKEN}"
    dom_run = run_chromium(browser, tmp_path / "chromium-dom", url, "--dump-dom")
    after = stats(admin)
    assert dom_run.returncode == 0, dom_run.stderr[-3000:]
    dom = Dom(dom_run.stdout)
    assert dom.body.get("data-loaded") == "1", (
        f"the page never rendered /stats; body {dom.body}; chromium stderr:\n{dom_run.stderr[-3000:]}\n"
        f"DOM:\n{dom_run.stdout[:3000]}")
    assert 'class="failed"' not in dom_run.stdout, "a section of the page failed to render (see the DOM)"
    assert 'class="uplot' in dom_run.stdout, "no chart: assets/uPlot.iife.min.js did not load or run"

    for key, get in COUNTERS.items():
        assert key in dom.by_id, f"no element id={key!r} in the page"
        node = dom.by_id[key]
        raw = node["attrs"].get("data-value", "")
        assert raw.isdigit(), f"{key}: data-value {raw!r} is not a plain integer"
        value = int(raw)
        assert value > 0, key
        assert get(before) <= value <= get(after), f"{key}: page {value}, /stats {get(before)} .. {get(after)}"
        assert node["text"].strip() not in ("", "—"), f"{key}: no text"
    # Memory held moves both ways (batches transcoded in the background shrink): in range.
    memory = dom.by_id["memory-bytes"]
    raw = memory["attrs"].get("data-value", "")
    assert raw.isdigit(), f"memory-bytes: data-value {raw!r} is not a plain integer"
    assert 0 < int(raw) <= after["tiers"]["memory"]["budget"], (raw, after["tiers"]["memory"])
    assert memory["text"].strip().endswith("B"), memory["text"]

    out = Path(os.environ.get("SILT_TEST_OUT") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "dashboard.png"
    if png.exists():
        png.unlink()
    shot = run_chromium(browser, tmp_path / "chromium-shot", url, f"--screenshot={png}", "--window-size=1400,1800")
    assert shot.returncode == 0, shot.stderr[-3000:]
    print(f"dashboard screenshot: {png}")
    assert png.exists(), f"no screenshot; chromium stderr:\n{shot.stderr[-3000:]}"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
    # A blank 1400x1800 page compresses to a few KB; the dashboard is far more.
    assert len(data) > 30_000, f"screenshot {png} is only {len(data)} bytes"
