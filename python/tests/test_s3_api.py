"""The S3-compatible read API (`/s3` on the admin listener) of a real `silt serve`,
read by stock S3 clients — boto3 and pyarrow's S3FileSystem — with SigV4-signed
requests. No Silt code runs on the client side.
"""

import os
import tempfile
import urllib.request

import boto3
import botocore
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs
import pyarrow.parquet as pq
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import silt_server

KEY_ID = "reader"
SECRET = "s3cr3t/key+1"
TOKEN = "py-token"


@pytest.fixture(scope="module")
def lake():
    """A folder table `events` (two Parquet files, one in a sub-folder, and a
    non-Parquet marker) and the table it should read as."""
    tmp = tempfile.mkdtemp(prefix="silt-py-s3-")
    root = os.path.join(tmp, "events")
    os.makedirs(os.path.join(root, "day=2"))
    parts = []
    for i, (path, first, n) in enumerate(
        [("part-0.parquet", 0, 30_000), ("day=2/part-1.parquet", 30_000, 5_000)]
    ):
        ids = pa.array(range(first, first + n), pa.int64())
        t = pa.table({"id": ids, "category": pa.array([f"c{v % 7}" for v in range(first, first + n)])})
        pq.write_table(t, os.path.join(root, path), row_group_size=4096)
        parts.append(t)
    with open(os.path.join(root, "_SUCCESS"), "w"):
        pass
    return {"tmp": tmp, "root": root, "table": pa.concat_tables(parts)}


def start_server(lake, name, extra_args, config_text=None):
    """`silt serve` with the table `events`, `extra_args` and, if given, a config file."""
    args = ["--table", f"events=file://{lake['root']}/", *extra_args]
    if config_text is not None:
        config = os.path.join(lake["tmp"], f"{name}.toml")
        with open(config, "w") as f:
            f.write(config_text)
        args += ["--config", config]
    proc, _, admin = silt_server.start(args, os.path.join(lake["tmp"], f"cache-{name}"))
    return proc, admin


@pytest.fixture(scope="module")
def keyed(lake):
    """A server with an `[s3_api]` key pair (and an auth token, which then
    plays no part in S3 requests)."""
    config = f'[s3_api]\naccess_key_id = "{KEY_ID}"\nsecret_access_key = "{SECRET}"\n'
    proc, admin = start_server(lake, "keyed", ["--auth-token", TOKEN], config)
    yield admin
    silt_server.stop(proc)


@pytest.fixture(scope="module")
def token_only(lake):
    """A server with only `--auth-token`: S3 clients sign with `silt` / token."""
    proc, admin = start_server(lake, "token", ["--auth-token", TOKEN])
    yield admin
    silt_server.stop(proc)


def boto(admin, key_id=KEY_ID, secret=SECRET, unsigned=False):
    # SigV4 throughout (boto3 presigns with SigV2 unless told; SigV2 signs
    # the path without the endpoint's `/s3`, which Silt cannot check).
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
    if unsigned:
        config = config.merge(Config(signature_version=botocore.UNSIGNED))
    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{admin}/s3",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=config,
    )


def s3fs(admin, key_id=KEY_ID, secret=SECRET):
    return pyarrow.fs.S3FileSystem(
        access_key=key_id,
        secret_key=secret,
        endpoint_override=f"127.0.0.1:{admin}/s3",
        scheme="http",
        region="us-east-1",
        force_virtual_addressing=False,
        allow_bucket_creation=False,
        allow_bucket_deletion=False,
    )


def error_code(err: ClientError):
    return err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]


def test_boto3_reads_a_table_with_signed_requests(keyed, lake):
    s3 = boto(keyed)
    listed = s3.list_objects_v2(Bucket="events")
    keys = [o["Key"] for o in listed["Contents"]]
    assert keys == ["day=2/part-1.parquet", "part-0.parquet"], "only the Parquet files"
    grouped = s3.list_objects_v2(Bucket="events", Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["day=2/"]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="events", PaginationConfig={"PageSize": 1})
    assert [o["Key"] for page in pages for o in page["Contents"]] == keys

    local = open(os.path.join(lake["root"], "part-0.parquet"), "rb").read()
    head = s3.head_object(Bucket="events", Key="part-0.parquet")
    assert head["ContentLength"] == len(local)
    whole = s3.get_object(Bucket="events", Key="part-0.parquet")
    assert whole["ETag"] == head["ETag"]
    assert whole["Body"].read() == local
    ranged = s3.get_object(Bucket="events", Key="part-0.parquet", Range="bytes=100-4099")
    assert ranged["ContentRange"] == f"bytes 100-4099/{len(local)}"
    assert ranged["Body"].read() == local[100:4100]
    suffix = s3.get_object(Bucket="events", Key="part-0.parquet", Range="bytes=-8")
    assert suffix["Body"].read() == local[-8:]
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "events", "Key": "part-0.parquet"})
    with urllib.request.urlopen(url) as r:
        assert r.read() == local
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["events"]

    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="events", Key="missing.parquet")
    assert error_code(e.value) == ("NoSuchKey", 404)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="events", Key="part-0.parquet", Range=f"bytes={len(local)}-")
    assert error_code(e.value) == ("InvalidRange", 416)
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="nope")
    assert error_code(e.value) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="events", Key="new.parquet", Body=b"x")
    assert error_code(e.value) == ("NotImplemented", 501)


def test_wrong_or_missing_signatures_are_refused(keyed, token_only):
    for admin, creds in [(keyed, ("silt", TOKEN)), (keyed, (KEY_ID, "wrong")), (token_only, ("silt", "wrong"))]:
        with pytest.raises(ClientError) as e:
            boto(admin, *creds).get_object(Bucket="events", Key="part-0.parquet")
        assert error_code(e.value)[1] == 403, creds
    for admin in [keyed, token_only]:
        with pytest.raises(ClientError) as e:
            boto(admin, unsigned=True).list_objects_v2(Bucket="events")
        assert error_code(e.value) == ("AccessDenied", 403)


def test_pyarrow_reads_a_table_through_s3filesystem(keyed, lake):
    fs = s3fs(keyed)
    info = fs.get_file_info("events/part-0.parquet")
    assert info.size == os.path.getsize(os.path.join(lake["root"], "part-0.parquet"))
    one = pq.read_table("events/part-0.parquet", filesystem=fs)
    assert one.equals(pq.read_table(os.path.join(lake["root"], "part-0.parquet")))
    selector = pyarrow.fs.FileSelector("events", recursive=True)
    names = sorted(i.path for i in fs.get_file_info(selector) if i.type == pyarrow.fs.FileType.File)
    assert names == ["events/day=2/part-1.parquet", "events/part-0.parquet"]
    table = ds.dataset("events/", filesystem=fs, format="parquet").to_table()
    assert table.sort_by("id").equals(lake["table"].sort_by("id"))


def test_an_auth_token_is_the_secret_of_key_silt(token_only, lake):
    s3 = boto(token_only, "silt", TOKEN)
    assert len(s3.list_objects_v2(Bucket="events")["Contents"]) == 2
    fs = s3fs(token_only, "silt", TOKEN)
    table = pq.read_table("events/part-0.parquet", filesystem=fs)
    assert table.num_rows == 30_000
