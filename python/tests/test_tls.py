"""TLS end to end against a real `silt serve --tls-cert --tls-key --auth-token`:
the `silt` package, a generic Flight SQL client (ADBC), the admin endpoint
over https and the Rust CLI (`silt query --tls-ca`), each checked against
DuckDB on the same Parquet file; plaintext and untrusted clients refused; and
the refusal to take a token over plaintext off loopback (`--allow-insecure`).

The server certificate is self-signed for `localhost` (SAN DNS:localhost,
IP:127.0.0.1, CA:FALSE), made with the `openssl` CLI.
"""

import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import adbc_driver_flightsql.dbapi as flight_sql
import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import silt
import silt_server

TOKEN = "tls-test-token"
ROWS = 20_000
SQL = "SELECT grp, count(*) AS n, sum(qty) AS total FROM t WHERE qty < 30 GROUP BY grp"


def make_cert(folder) -> tuple:
    """A self-signed certificate for localhost and its key (PEM files).

    `basicConstraints=CA:FALSE`: `openssl req -x509` otherwise marks the
    certificate CA:TRUE, which gRPC's C++ client (pyarrow) and Go's (ADBC)
    accept as a server certificate but rustls (`silt query`) refuses
    ("invalid peer certificate: ... CaUsedAsEndEntity")."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the `openssl` CLI is needed to make the test's certificate and is not on PATH "
                    "(install openssl)")
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    done = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
         "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:FALSE"],
        capture_output=True, text=True)
    assert done.returncode == 0, f"openssl failed: {done.stderr}"
    return cert, key


def write_data(path: str) -> None:
    ids = range(ROWS)
    pq.write_table(pa.table({
        "id": pa.array(ids, pa.int64()),
        "grp": pa.array([f"g{(i * 31) % 7}" for i in ids], pa.string()),
        "qty": pa.array([(i * 7919) % 50 + 1 for i in ids], pa.int64()),
    }), path, row_group_size=4096)


def rows(table: pa.Table) -> list:
    """A result's rows, sorted, as Python values (ints compare equal to
    DuckDB's HUGEINT sums, which arrive as Decimals)."""
    return sorted(tuple(int(v) if not isinstance(v, str) else v for v in row)
                  for row in zip(*(c.to_pylist() for c in table.columns)))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("silt-tls")
    cert, key = make_cert(str(tmp))
    data = str(tmp / "t.parquet")
    write_data(data)
    ctx = ssl.create_default_context(cafile=cert)
    proc, port, admin = silt_server.start(
        ["--tls-cert", cert, "--tls-key", key, "--auth-token", TOKEN, "--table", f"t=file://{data}"],
        str(tmp / "cache"), ssl_context=ctx)
    with open(cert) as f:
        pem = f.read()
    expected = duckdb.sql(SQL.replace("FROM t", f"FROM read_parquet('{data}')")).fetchall()
    yield {"port": port, "admin": admin, "cert": cert, "pem": pem, "ctx": ctx, "data": data, "tmp": tmp,
           "expected": sorted(tuple(int(v) if not isinstance(v, str) else v for v in r) for r in expected)}
    silt_server.stop(proc)


def test_expected_is_not_trivial(tls_server):
    table = pq.read_table(tls_server["data"])
    assert len(tls_server["expected"]) == 7
    assert sum(n for _, n, _ in tls_server["expected"]) == table.filter(pc.less(table["qty"], 30)).num_rows


def test_silt_package_over_tls(tls_server):
    url = f"grpc+tls://localhost:{tls_server['port']}"
    for roots in (tls_server["pem"], tls_server["pem"].encode()):
        with silt.connect(url, token=TOKEN, tls_root_certs=roots) as conn:
            assert conn.tables() == ["t"]
            assert rows(conn.sql(SQL)) == tls_server["expected"]
            batches = list(conn.sql_batches(SQL))
            assert rows(pa.Table.from_batches(batches)) == tls_server["expected"]


def test_lazy_scans_carry_the_roots(tls_server, monkeypatch):
    """A lazy scan reconnects (in a DataLoader worker, after pickling): it
    keeps the connection's roots, with no SILT_TLS_CA to fall back on."""
    import pickle
    monkeypatch.delenv("SILT_TLS_CA", raising=False)
    url = f"grpc+tls://localhost:{tls_server['port']}"
    with silt.connect(url, token=TOKEN, tls_root_certs=tls_server["pem"]) as conn:
        scan = conn.lazy_scan("t", ["grp", "qty"], "qty < 30")
    scan = pickle.loads(pickle.dumps(scan))
    got = scan.read_all()
    assert got.num_rows == sum(n for _, n, _ in tls_server["expected"])
    assert got.num_rows == sum(b.num_rows for b in scan.batches())
    # Without the roots, the same scan is refused.
    import dataclasses
    bare = dataclasses.replace(scan, tls_root_certs=None)
    with pytest.raises(silt.SiltError):
        bare.read_all()


def test_silt_package_reads_silt_tls_ca(tls_server, monkeypatch):
    monkeypatch.setenv("SILT_TLS_CA", tls_server["cert"])
    with silt.connect(f"grpc+tls://localhost:{tls_server['port']}", token=TOKEN) as conn:
        assert rows(conn.sql(SQL)) == tls_server["expected"]
    with silt.connect_fleet([f"grpc+tls://localhost:{tls_server['port']}"], token=TOKEN) as fleet:
        assert rows(fleet.sql(SQL)) == tls_server["expected"]


def test_silt_tls_ca_unreadable(tls_server, monkeypatch):
    monkeypatch.setenv("SILT_TLS_CA", str(tls_server["tmp"] / "missing.pem"))
    with pytest.raises(silt.SiltError, match="SILT_TLS_CA"):
        silt.connect(f"grpc+tls://localhost:{tls_server['port']}", token=TOKEN)


def test_fleet_over_tls(tls_server, monkeypatch):
    monkeypatch.delenv("SILT_TLS_CA", raising=False)
    url = f"grpc+tls://localhost:{tls_server['port']}"
    with silt.connect_fleet([url], token=TOKEN, tls_root_certs=tls_server["pem"]) as fleet:
        assert rows(fleet.sql(SQL)) == tls_server["expected"]
        got = fleet.scan("t", ["grp", "qty"], "qty < 30")
        assert got.num_rows == sum(n for _, n, _ in tls_server["expected"])


def test_adbc_over_tls(tls_server):
    with flight_sql.connect(f"grpc+tls://localhost:{tls_server['port']}", db_kwargs={
        "adbc.flight.sql.client_option.tls_root_certs": tls_server["pem"],
        "adbc.flight.sql.authorization_header": f"Bearer {TOKEN}",
    }) as conn:
        with conn.cursor() as cur:
            cur.execute(SQL)
            got = cur.fetch_arrow_table()
    assert rows(got) == tls_server["expected"]


def test_wrong_or_missing_token_refused_over_tls(tls_server, monkeypatch):
    monkeypatch.delenv("SILT_TLS_CA", raising=False)
    url = f"grpc+tls://localhost:{tls_server['port']}"
    for token in (None, "wrong"):
        with pytest.raises(silt.SiltError) as err:
            silt.connect(url, token=token, tls_root_certs=tls_server["pem"])
        assert err.value.kind in ("FlightUnauthenticatedError", "FlightUnauthorizedError"), err.value


@pytest.mark.parametrize("scheme", ["grpc", "grpc+tcp"])
def test_plaintext_client_fails(tls_server, scheme):
    with pytest.raises(silt.SiltError):
        silt.connect(f"{scheme}://localhost:{tls_server['port']}", token=TOKEN, timeout=5)
    # A raw pyarrow client too (no silt code on the client side).
    client = flight.FlightClient(f"{scheme}://localhost:{tls_server['port']}")
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())], timeout=5)
    with pytest.raises(flight.FlightError):
        list(client.list_flights(options=options))
    client.close()


def test_tls_client_without_the_ca_fails(tls_server, monkeypatch):
    monkeypatch.delenv("SILT_TLS_CA", raising=False)
    with pytest.raises(silt.SiltError) as err:
        silt.connect(f"grpc+tls://localhost:{tls_server['port']}", token=TOKEN, timeout=5)
    assert err.value.kind == "FlightUnavailableError", err.value
    with pytest.raises(Exception):
        with flight_sql.connect(f"grpc+tls://localhost:{tls_server['port']}", db_kwargs={
            "adbc.flight.sql.authorization_header": f"Bearer {TOKEN}",
            "adbc.flight.sql.rpc.timeout_seconds.query": "5",
        }) as conn:
            with conn.cursor() as cur:
                cur.execute(SQL)
                cur.fetchall()


def get(url, ctx, token=None):
    """(status, body) of a GET."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_admin_over_https(tls_server):
    base, ctx = f"https://127.0.0.1:{tls_server['admin']}", tls_server["ctx"]
    # A query first, so the counter is above zero.
    with silt.connect(f"grpc+tls://localhost:{tls_server['port']}", token=TOKEN,
                      tls_root_certs=tls_server["pem"]) as conn:
        conn.sql(SQL)
    status, body = get(f"{base}/health", ctx)
    assert status == 200 and '"ok"' in body
    for path in ("/metrics", "/stats", "/"):
        assert get(f"{base}{path}", ctx)[0] == 401, path
        assert get(f"{base}{path}", ctx, "wrong")[0] == 401, path
        assert get(f"{base}{path}", ctx, TOKEN)[0] == 200, path
    status, body = get(f"{base}/metrics", ctx, TOKEN)
    values = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values.get("silt_queries_total", 0) > 0, body[:2000]
    # Also by the name on the certificate.
    assert get(f"https://localhost:{tls_server['admin']}/health", ctx)[0] == 200


def test_admin_https_untrusted_or_plaintext_fails(tls_server):
    with pytest.raises(urllib.error.URLError) as err:
        get(f"https://127.0.0.1:{tls_server['admin']}/health", ssl.create_default_context())
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError), err.value
    with pytest.raises(Exception):
        get(f"http://127.0.0.1:{tls_server['admin']}/health", None)


def silt_cli(args, env_extra=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k not in ("SILT_TLS_CA", "SILT_AUTH_TOKEN")}
    env.update(env_extra or {})
    return subprocess.run([os.environ.get("SILT_BIN", "silt"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def csv_count(stdout: str) -> int:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return int(lines[-1])


def test_rust_cli_over_tls(tls_server):
    server = f"grpc+tls://localhost:{tls_server['port']}"
    count_sql = "SELECT count(*) FROM t WHERE qty < 30"
    want = sum(n for _, n, _ in tls_server["expected"])
    # --tls-ca and --token on the command line.
    done = silt_cli(["query", "--server", server, "--tls-ca", tls_server["cert"], "--token", TOKEN,
                     "--format", "csv", count_sql])
    assert done.returncode == 0, done.stderr
    assert csv_count(done.stdout) == want, done.stdout
    # SILT_TLS_CA and SILT_AUTH_TOKEN from the environment.
    done = silt_cli(["query", "--server", server, "--format", "csv", count_sql],
                    {"SILT_TLS_CA": tls_server["cert"], "SILT_AUTH_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    assert csv_count(done.stdout) == want, done.stdout
    # The grouped query, as DuckDB answers it.
    done = silt_cli(["query", "--server", server, "--tls-ca", tls_server["cert"], "--token", TOKEN,
                     "--format", "csv", SQL])
    assert done.returncode == 0, done.stderr
    got = sorted((g, int(n), int(s)) for g, n, s in
                 (line.split(",") for line in done.stdout.splitlines()[1:] if line.strip()))
    assert got == tls_server["expected"], done.stdout


def test_rust_cli_refusals(tls_server):
    server = f"grpc+tls://localhost:{tls_server['port']}"
    # No CA: the self-signed certificate is not trusted.
    done = silt_cli(["query", "--server", server, "--token", TOKEN, "--format", "csv", "SELECT 1"], timeout=60)
    assert done.returncode != 0, done.stdout
    # Plaintext to the TLS listener.
    done = silt_cli(["query", "--server", f"http://localhost:{tls_server['port']}", "--token", TOKEN,
                     "--format", "csv", "SELECT 1"], timeout=60)
    assert done.returncode != 0, done.stdout
    # The CA but no token.
    done = silt_cli(["query", "--server", server, "--tls-ca", tls_server["cert"], "--format", "csv",
                     "SELECT 1"], timeout=60)
    assert done.returncode != 0, done.stdout


@pytest.mark.parametrize("exposed", ["listen", "admin"])
def test_token_over_plaintext_off_loopback_refused(tmp_path, exposed):
    data = str(tmp_path / "t.parquet")
    write_data(data)
    port, admin = silt_server.free_port(), silt_server.free_port()
    listen_host = "0.0.0.0" if exposed == "listen" else "127.0.0.1"
    admin_host = "0.0.0.0" if exposed == "admin" else "127.0.0.1"
    proc = subprocess.Popen(
        [os.environ.get("SILT_BIN", "silt"), "serve", "--listen", f"{listen_host}:{port}",
         "--admin", f"{admin_host}:{admin}", "--cache-dir", str(tmp_path / "cache"),
         "--auth-token", TOKEN, "--table", f"t=file://{data}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"silt serve with a token on plaintext {exposed} 0.0.0.0 started instead of refusing")
    assert proc.returncode != 0
    assert "--allow-insecure" in stderr, stderr
    assert "0.0.0.0" in stderr, stderr


def test_allow_insecure_starts(tmp_path):
    data = str(tmp_path / "t.parquet")
    write_data(data)
    proc, port, _ = silt_server.start(
        ["--auth-token", TOKEN, "--allow-insecure", "--table", f"t=file://{data}"],
        str(tmp_path / "cache"), listen_host="0.0.0.0")
    try:
        with silt.connect(f"grpc://127.0.0.1:{port}", token=TOKEN) as conn:
            assert conn.tables() == ["t"]
    finally:
        silt_server.stop(proc)
