"""The S3 API at the root of its own listener (`silt serve --s3-listen`), read
by the S3 clients data teams bring — boto3 (path and virtual-host style),
pyarrow's S3FileSystem, DuckDB's httpfs, polars — and by the requests a
Trino-style client sends (virtual-host style, unsigned payload, ranges).
Each reads TPC-H tables through Silt, signed with the server's key pair, and
must equal the answer from the local files. Bad input gets the S3 error a
client expects, and the server keeps serving.

Spark through S3A is not run here (see the README's "From any S3 client"):
its requests are the Trino-style ones below.
"""

import contextlib
import http.client
import io
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import boto3
import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs
import pyarrow.parquet as pq
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

import silt_server

KEY_ID = "analyst"
SECRET = "tpch/s3cr3t+key"
TABLES = ["lineitem", "orders", "nation"]

# TPC-H Q1 and a join (Q3's shape): what the SQL engines run on both sides.
Q1 = """select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty,
  sum(l_extendedprice * (1 - l_discount)) as sum_disc_price, avg(l_discount) as avg_disc, count(*) as count_order
from {lineitem} where l_shipdate <= date '1998-09-02'
group by l_returnflag, l_linestatus order by l_returnflag, l_linestatus"""
Q_JOIN = """select o_orderpriority, count(*) as n, sum(l_quantity) as qty
from {orders} join {lineitem} on o_orderkey = l_orderkey
where o_orderdate >= date '1995-01-01' and l_commitdate < l_receiptdate
group by o_orderpriority order by o_orderpriority"""


@pytest.fixture(scope="module")
def tpch():
    """TPC-H SF 0.01 (one file per table, small row groups) served by one
    `silt serve` with its S3 API on its own port, signed with a key pair."""
    tmp = tempfile.mkdtemp(prefix="silt-py-s3-clients-")
    data = os.path.join(tmp, "tpch")
    subprocess.run([os.environ.get("SILT_BIN", "silt"), "bench", "gen", "tpch", "--sf", "0.01", "--out", data,
                    "--row-group-rows", "8192"], check=True, capture_output=True)
    # A file in a table's folder that is not the table's.
    Path(data, "nation", "_SUCCESS").write_bytes(b"")
    config = os.path.join(tmp, "silt.toml")
    with open(config, "w") as f:
        f.write(f'[s3_api]\naccess_key_id = "{KEY_ID}"\nsecret_access_key = "{SECRET}"\n')
    s3_port = silt_server.free_port()
    args = [a for t in TABLES for a in ("--table", f"{t}=file://{data}/{t}/")]
    args += ["--config", config, "--s3-listen", f"127.0.0.1:{s3_port}"]
    proc, _, admin = silt_server.start(args, os.path.join(tmp, "cache"))
    yield {"port": s3_port, "admin": admin, "data": data}
    silt_server.stop(proc)
    shutil.rmtree(tmp, ignore_errors=True)


def local_table(tpch, table):
    """The table as read from the local files, in a stable order."""
    return ds.dataset(os.path.join(tpch["data"], table), format="parquet").to_table()


def plain(t: pa.Table) -> pa.Table:
    """`t` with view-typed text as plain text (Arrow sorts no views)."""
    def unview(f):
        if pa.types.is_string_view(f.type):
            return pa.field(f.name, pa.large_string())
        if pa.types.is_binary_view(f.type):
            return pa.field(f.name, pa.large_binary())
        return f
    return t.cast(pa.schema([unview(f) for f in t.schema]))


def same_rows(a: pa.Table, b: pa.Table):
    a, b = plain(a), plain(b.select(a.column_names))
    key = [(c, "ascending") for c in a.column_names]
    assert a.num_rows == b.num_rows and a.num_rows > 0
    assert a.sort_by(key).equals(b.sort_by(key))


@contextlib.contextmanager
def localhost_subdomains():
    """Resolves `*.localhost` to 127.0.0.1 in this process, as RFC 6761 says
    and browsers and curl do (glibc without systemd's resolver does not), so
    virtual-host-style clients reach the server."""
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    socket.getaddrinfo = resolve
    try:
        yield
    finally:
        socket.getaddrinfo = real


def boto(tpch, style, secret=SECRET):
    return boto3.client(
        "s3",
        endpoint_url=f"http://localhost:{tpch['port']}",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": style}, retries={"max_attempts": 1}, signature_version="s3v4"),
    )


def error_code(err: ClientError):
    return err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]


def read_with_boto(s3, table):
    """Every object of `table` listed and downloaded with `s3`, as one table."""
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=table)["Contents"]]
    assert keys == [f"{table}.parquet"]
    parts = [pq.read_table(io.BytesIO(s3.get_object(Bucket=table, Key=k)["Body"].read())) for k in keys]
    return pa.concat_tables(parts)


@pytest.mark.parametrize("style", ["path", "virtual"])
def test_boto3_reads_tpch(tpch, style):
    with localhost_subdomains():
        s3 = boto(tpch, style)
        assert sorted(b["Name"] for b in s3.list_buckets()["Buckets"]) == sorted(TABLES)
        for table in ["orders", "nation"]:
            same_rows(local_table(tpch, table), read_with_boto(s3, table))


def test_pyarrow_s3filesystem_reads_tpch(tpch):
    fs = pyarrow.fs.S3FileSystem(access_key=KEY_ID, secret_key=SECRET, endpoint_override=f"127.0.0.1:{tpch['port']}",
                                 scheme="http", region="us-east-1", force_virtual_addressing=False)
    table = ds.dataset("lineitem/", filesystem=fs, format="parquet").to_table()
    same_rows(local_table(tpch, "lineitem"), table)


def duckdb_with_httpfs():
    """A DuckDB connection with httpfs loaded from the `duckdb-ext-httpfs` wheel."""
    import duckdb_ext  # the wheel's namespace package: the extension files

    con = duckdb.connect()
    con.execute("SET threads = 1")  # one summation order: both sides' floats agree bit for bit
    con.execute("SET autoinstall_known_extensions = false")
    extensions = Path(list(duckdb_ext.__path__)[0]) / "extensions"
    con.execute(f"SET extension_directory = '{extensions}'")
    con.execute("LOAD httpfs")
    return con


def test_duckdb_httpfs_runs_tpch_through_silt(tpch):
    con = duckdb_with_httpfs()
    con.execute(f"""CREATE SECRET silt (TYPE s3, KEY_ID '{KEY_ID}', SECRET '{SECRET}', REGION 'us-east-1',
                    ENDPOINT '127.0.0.1:{tpch["port"]}', URL_STYLE 'path', USE_SSL false)""")
    for query in [Q1, Q_JOIN]:
        remote = {t: f"read_parquet('s3://{t}/*.parquet')" for t in TABLES}
        local = {t: f"read_parquet('{tpch['data']}/{t}/*.parquet')" for t in TABLES}
        got = con.execute(query.format(**remote)).fetchall()
        want = con.execute(query.format(**local)).fetchall()
        assert len(want) > 1 and got == want


def test_polars_scans_tpch_through_silt(tpch):
    options = {"aws_endpoint_url": f"http://127.0.0.1:{tpch['port']}", "aws_access_key_id": KEY_ID,
               "aws_secret_access_key": SECRET, "aws_region": "us-east-1", "aws_allow_http": "true",
               "aws_virtual_hosted_style_request": "false"}

    def q1(frame):
        return (frame.filter(pl.col("l_shipdate") <= pl.date(1998, 9, 2))
                .group_by("l_returnflag", "l_linestatus")
                .agg(pl.col("l_quantity").sum(), pl.len().alias("count_order"))
                .sort("l_returnflag", "l_linestatus").collect())

    got = q1(pl.scan_parquet("s3://lineitem/*.parquet", storage_options=options))
    want = q1(pl.scan_parquet(os.path.join(tpch["data"], "lineitem", "*.parquet")))
    assert want.height > 1 and got.equals(want)


def raw_request(tpch, method, host, path, headers=None, secret=SECRET, sign=True):
    """One request sent to the S3 listener as a Trino- or S3A-style client
    sends it: `Host` as given (virtual-host style when it names the bucket),
    SigV4 over an unsigned payload. Returns (status, headers, body)."""
    url = f"http://{host}{path}"
    request = AWSRequest(method=method, url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD",
                                                           **(headers or {})})
    if sign:
        SigV4Auth(Credentials(KEY_ID, secret), "s3", "us-east-1").add_auth(request)
    conn = http.client.HTTPConnection("127.0.0.1", tpch["port"], timeout=30)
    try:
        conn.request(method, path, headers={"Host": host, **dict(request.headers.items())})
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


def test_trino_style_requests_name_the_bucket_in_the_host(tpch):
    port = tpch["port"]
    first = "orders.parquet"
    local = Path(tpch["data"], "orders", first).read_bytes()
    for host in [f"orders.localhost:{port}", f"orders.silt.internal:{port}"]:
        status, headers, body = raw_request(tpch, "GET", host, f"/{first}", {"Range": "bytes=4-1003"})
        assert (status, body) == (206, local[4:1004]), host
        assert headers["content-range"] == f"bytes 4-1003/{len(local)}"
        status, headers, _ = raw_request(tpch, "HEAD", host, f"/{first}")
        assert (status, int(headers["content-length"])) == (200, len(local))
        status, _, body = raw_request(tpch, "GET", host, "/?list-type=2&prefix=")
        assert status == 200 and f"<Key>{first}</Key>".encode() in body
    # Path style on the same listener, by name or by address.
    for host in [f"localhost:{port}", f"127.0.0.1:{port}"]:
        status, _, body = raw_request(tpch, "GET", host, f"/orders/{first}")
        assert (status, body) == (200, local), host


def s3_error(body: bytes):
    text = body.decode()
    return text.split("<Code>")[1].split("</Code>")[0]


def test_bad_requests_get_s3_errors_and_the_server_keeps_serving(tpch):
    port = tpch["port"]
    first = "nation.parquet"
    size = os.path.getsize(os.path.join(tpch["data"], "nation", first))
    for host, path, headers, secret, sign, want in [
        # A wrong signature, and none at all.
        (f"localhost:{port}", f"/nation/{first}", {}, "guess", True, (403, "SignatureDoesNotMatch")),
        (f"nation.localhost:{port}", f"/{first}", {}, "guess", True, (403, "SignatureDoesNotMatch")),
        (f"localhost:{port}", f"/nation/{first}", {}, SECRET, False, (403, "AccessDenied")),
        # An unknown bucket, by path and by host.
        (f"localhost:{port}", f"/nope/{first}", {}, SECRET, True, (404, "NoSuchBucket")),
        (f"nope.localhost:{port}", "/?list-type=2", {}, SECRET, True, (404, "NoSuchBucket")),
        # A range past the end.
        (f"localhost:{port}", f"/nation/{first}", {"Range": f"bytes={size}-"}, SECRET, True, (416, "InvalidRange")),
        # Paths that are no object of the table.
        (f"localhost:{port}", "/nation/missing.parquet", {}, SECRET, True, (404, "NoSuchKey")),
        (f"localhost:{port}", "/nation/../orders/x.parquet", {}, SECRET, True, (400, "InvalidArgument")),
        (f"nation.localhost:{port}", "/a//b.parquet", {}, SECRET, True, (400, "InvalidArgument")),
        (f"localhost:{port}", "/nation/_SUCCESS", {}, SECRET, True, (404, "NoSuchKey")),
    ]:
        status, _, body = raw_request(tpch, "GET", host, path, headers, secret=secret, sign=sign)
        assert (status, s3_error(body)) == want, (host, path, body)
    with localhost_subdomains():
        for style in ["path", "virtual"]:
            with pytest.raises(ClientError) as e:
                boto(tpch, style, secret="guess").get_object(Bucket="nation", Key=first)
            assert error_code(e.value) == ("SignatureDoesNotMatch", 403)
            with pytest.raises(ClientError) as e:
                boto(tpch, style).get_object(Bucket="nation", Key=first, Range=f"bytes={size + 10}-")
            assert error_code(e.value) == ("InvalidRange", 416)
        # Still serving, both styles.
        same_rows(local_table(tpch, "nation"), read_with_boto(boto(tpch, "virtual"), "nation"))
