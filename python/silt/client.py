"""A Silt connection over Arrow Flight SQL: tables, SQL, scans, lookups.

Only pyarrow is needed. Flight SQL commands and tickets are protobuf `Any`
messages, encoded by hand in `_proto`; every call is one `DoGet` (see the
plumbing notes in `Connection`).
"""

import dataclasses
import os
import re
from typing import Iterator, List, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.flight as flight

from . import _proto
from .lookup import lookup as _lookup

Servers = Union[str, Sequence[str]]


class SiltError(Exception):
    """A failed call to a Silt server. `str(err)` carries the server's message;
    `err.kind` names the Flight status class (e.g. `FlightServerError`,
    `FlightUnauthenticatedError`, `FlightUnavailableError`, or `ArrowInvalid`
    for an invalid argument) and `err.__cause__` is the original exception."""

    def __init__(self, message: str, kind: str = ""):
        super().__init__(message)
        self.kind = kind


_FLIGHT_PREFIX = re.compile(r"^Flight returned [a-z ]+ error, with message: ")


def _server_message(err: Exception) -> str:
    """The server's message without pyarrow's gRPC decoration."""
    text = _FLIGHT_PREFIX.sub("", str(err))
    for marker in (". Detail: ", ". gRPC client debug context: "):
        cut = text.find(marker)
        if cut >= 0:
            text = text[:cut]
    return text


def _wrap(err: Exception) -> SiltError:
    wrapped = SiltError(_server_message(err), type(err).__name__)
    wrapped.__cause__ = err
    return wrapped


def read_batches(reader: flight.FlightStreamReader) -> Iterator[pa.RecordBatch]:
    """The record batches of a Flight stream as they arrive, failures as
    `SiltError`s with the server's message."""
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        except (flight.FlightError, pa.ArrowException) as err:
            raise _wrap(err) from err
        yield chunk.data


def read_schema(reader: flight.FlightStreamReader) -> pa.Schema:
    """The schema of a Flight stream (waits for its first message), a
    failure as a `SiltError`."""
    try:
        return reader.schema
    except (flight.FlightError, pa.ArrowException) as err:
        raise _wrap(err) from err


def quote_ident(name: str) -> str:
    """A SQL identifier, double-quoted (`"` doubled), so any table or column
    name — mixed case, spaces, keywords — reaches the server as written."""
    return '"' + name.replace('"', '""') + '"'


def scan_sql(table: str, columns: Optional[Sequence[str]] = None, filter: Optional[str] = None,
             limit: Optional[int] = None) -> str:
    """The SQL of a scan: `SELECT cols FROM table [WHERE filter] [LIMIT n]`.
    `filter` is SQL text over the table's columns; the server pushes it down
    into the Parquet scan itself (statistics, bloom filters, page index)."""
    cols = "*" if columns is None else ", ".join(quote_ident(c) for c in columns)
    if columns is not None and not columns:
        raise ValueError("columns must name at least one column (None = all)")
    sql = f"SELECT {cols} FROM {quote_ident(table)}"
    if filter:
        sql += f" WHERE {filter}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def shard_predicate(column: str, type: pa.DataType, index: int, count: int) -> str:
    """A SQL predicate true for exactly the rows of shard `index` of `count`,
    computed from the row's value of `column` alone (no row numbers, so any
    server can evaluate it on any file, and it is pushed down with the scan):

    - integer columns (signed, or unsigned up to 32 bits): `value mod count`
      (the non-negative remainder);
    - any other type: the first 7 hex digits of `md5(CAST(value AS VARCHAR))`
      read as an integer, mod `count`;
    - NULL goes to shard 0.

    Each row gets exactly one bucket in `[0, count)`, so the shards partition
    the table. Balance depends on the column: pick a key or another column of
    many distinct values (a low-cardinality column leaves shards empty).
    """
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} not in [0, {count})")
    col = quote_ident(column)
    if pa.types.is_signed_integer(type) or (pa.types.is_unsigned_integer(type) and type.bit_width <= 32):
        bucket = f"((CAST({col} AS BIGINT) % {count}) + {count}) % {count}"
    else:
        digest = f"md5(CAST({col} AS VARCHAR))"
        nibbles = " + ".join(
            f"(strpos('0123456789abcdef', substr({digest}, {k + 1}, 1)) - 1) * {16 ** (6 - k)}"
            for k in range(7))
        bucket = f"({nibbles}) % {count}"
    if index == 0:
        return f"({col} IS NULL OR {bucket} = 0)"
    return f"({bucket} = {index})"


def _servers(servers: Servers) -> List[str]:
    if isinstance(servers, str):
        return [servers]
    servers = list(servers)
    if not servers:
        raise ValueError("no server given")
    return servers


# The process that made Flight clients; a fork of it must not use gRPC.
_flight_pid: Optional[int] = None


# Environment variable naming a PEM file of an extra trusted CA (as for the
# Rust client and `silt query`).
TLS_CA_ENV = "SILT_TLS_CA"

TlsRootCerts = Union[bytes, str]


def _tls_root_certs(location: str, tls_root_certs: Optional[TlsRootCerts]) -> Optional[bytes]:
    """The PEM root certificates a `grpc+tls://` location is verified with:
    `tls_root_certs` when given, else the file `$SILT_TLS_CA` names, else
    None (gRPC's default roots). None for other schemes."""
    if not location.lower().startswith("grpc+tls:"):
        return None
    if tls_root_certs is None:
        path = os.environ.get(TLS_CA_ENV)
        if not path:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as err:
            raise SiltError(f"reading {TLS_CA_ENV}={path}: {err}", "TlsError") from err
    return tls_root_certs.encode() if isinstance(tls_root_certs, str) else bytes(tls_root_certs)


def _flight_client(location: str, tls_root_certs: Optional[TlsRootCerts] = None,
                   **options) -> flight.FlightClient:
    """A new `pyarrow.flight.FlightClient` (gRPC connects on first use),
    refused in a process forked after its parent used gRPC. A `grpc+tls://`
    location trusts `tls_root_certs` (PEM), else `$SILT_TLS_CA`'s file,
    else gRPC's default roots."""
    global _flight_pid
    if _flight_pid is not None and _flight_pid != os.getpid():
        raise SiltError(
            "this process was forked after its parent used Silt (gRPC), and gRPC hangs after a fork: start "
            "workers with spawn or forkserver (DataLoader(..., multiprocessing_context='spawn'))", "ForkError")
    roots = _tls_root_certs(location, tls_root_certs)
    if roots is not None:
        options["tls_root_certs"] = roots
    _flight_pid = os.getpid()
    return flight.FlightClient(location, **options)


def connect(servers: Servers, token: Optional[str] = None, timeout: Optional[float] = 10.0,
            tls_root_certs: Optional[TlsRootCerts] = None) -> "Connection":
    """Connects to a Silt server (`"grpc://host:port"`, or `grpc+tls://`).

    `servers` may be a list: the connection uses the first server that
    answers (a `GetTables` call within `timeout` seconds), in list order.
    This is failover only; `silt.connect_fleet` places a table's row
    groups across a fleet of servers.
    `token` is sent as `authorization: Bearer <token>` on every call.
    `tls_root_certs` (PEM, bytes or str) are the root certificates a
    `grpc+tls://` server's certificate is verified with (e.g. a self-signed
    server certificate itself); when None, the PEM file named by the
    environment variable `SILT_TLS_CA`, if set, else gRPC's default roots.
    """
    errors = []
    for location in _servers(servers):
        client = _flight_client(location, tls_root_certs)
        conn = Connection(location, client, token, tls_root_certs)
        try:
            conn._list_tables(timeout=timeout)
            return conn
        except SiltError as err:
            client.close()
            if err.kind in ("FlightUnauthenticatedError", "FlightUnauthorizedError"):
                raise
            errors.append(f"{location}: {err}")
    raise SiltError("no server answered: " + "; ".join(errors), "FlightUnavailableError")


class Connection:
    """One Flight connection to one server. Use `silt.connect` to make one."""

    def __init__(self, location: str, client: flight.FlightClient, token: Optional[str] = None,
                 tls_root_certs: Optional[TlsRootCerts] = None):
        self.location = location
        self.token = token
        # Kept for the lazy scans this connection describes (they reconnect
        # in other processes).
        self.tls_root_certs = tls_root_certs
        self._client = client
        self._headers = _proto.call_headers(token)

    # -- plumbing
    #
    # Every call is one `DoGet` whose ticket the client builds itself: a SQL
    # statement as `TicketStatementQuery{handle = SQL}` (Silt's tickets carry
    # their SQL and plan it when no kept plan matches), the table list as
    # `CommandGetTables`. One round trip instead of GetFlightInfo + DoGet.
    # (Servers before this package's release sent `FlightInfo` without a
    # flight descriptor, which pyarrow's C++ client refuses; skipping
    # GetFlightInfo also keeps the package working with them.)

    def _options(self, timeout: Optional[float] = None) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self._headers, timeout=timeout)

    def _do_get(self, ticket: bytes, timeout: Optional[float] = None) -> flight.FlightStreamReader:
        try:
            return self._client.do_get(flight.Ticket(ticket), self._options(timeout))
        except (flight.FlightError, pa.ArrowException) as err:
            raise _wrap(err) from err

    def _read_all(self, ticket: bytes, timeout: Optional[float] = None) -> pa.Table:
        reader = self._do_get(ticket, timeout)
        try:
            return reader.read_all()
        except (flight.FlightError, pa.ArrowException) as err:
            raise _wrap(err) from err

    def _list_tables(self, include_schema: bool = False, timeout: Optional[float] = None) -> pa.Table:
        return self._read_all(_proto.get_tables(include_schema=include_schema), timeout)

    # -- the API

    def tables(self) -> List[str]:
        """The names of the tables and views the server serves."""
        return sorted(self._list_tables()["table_name"].to_pylist())

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of a table or view, from `GetTables` (nothing is scanned)."""
        listing = self._list_tables(include_schema=True)
        for name, schema in zip(listing["table_name"].to_pylist(), listing["table_schema"].to_pylist()):
            if name == table:
                return pa.ipc.read_schema(pa.py_buffer(schema))
        raise SiltError(f"unknown table {table!r}", "KeyError")

    def sql(self, query: str) -> pa.Table:
        """Runs read-only SQL on the server; the whole result as a `pyarrow.Table`."""
        return self._read_all(_proto.statement_ticket(query))

    def sql_batches(self, query: str) -> Iterator[pa.RecordBatch]:
        """Runs SQL on the server and yields its `RecordBatch`es as they arrive.
        Closing the generator early (`break` and dropping it, `.close()`)
        cancels the stream."""
        reader = self._do_get(_proto.statement_ticket(query))
        try:
            yield from read_batches(reader)
        finally:
            reader.cancel()

    def sql_schema(self, query: str) -> pa.Schema:
        """The Arrow schema of a query's result (the query is started and
        cancelled after its schema message)."""
        reader = self._do_get(_proto.statement_ticket(query))
        try:
            return read_schema(reader)
        finally:
            reader.cancel()

    def sql_reader(self, query: str) -> flight.FlightStreamReader:
        """The raw `pyarrow.flight.FlightStreamReader` of a query (`.schema`,
        `.read_chunk()`, `.read_all()`, `.to_reader()`, `.cancel()`); its
        errors are pyarrow's, not `SiltError`."""
        return self._do_get(_proto.statement_ticket(query))

    def to_pandas(self, query: str):
        """`sql(query)` as a pandas DataFrame (needs pandas)."""
        return self.sql(query).to_pandas()

    def scan(self, table: str, columns: Optional[Sequence[str]] = None, filter: Optional[str] = None,
             limit: Optional[int] = None) -> pa.Table:
        """The rows of `table` matching `filter` (SQL text, e.g. `"l_quantity < 10"`),
        with `columns` (all when None). Names are quoted as given."""
        return self.sql(scan_sql(table, columns, filter, limit))

    def scan_batches(self, table: str, columns: Optional[Sequence[str]] = None,
                     filter: Optional[str] = None, limit: Optional[int] = None) -> Iterator[pa.RecordBatch]:
        """`scan` as a stream of `RecordBatch`es."""
        return self.sql_batches(scan_sql(table, columns, filter, limit))

    def lazy_scan(self, table: str, columns: Optional[Sequence[str]] = None,
                  filter: Optional[str] = None) -> "Scan":
        """A picklable description of a scan on this server (for `silt.torch`)."""
        return Scan(self.location, table, None if columns is None else tuple(columns), filter, self.token,
                    self.tls_root_certs)

    def lookup(self, table: str, key_column: str, keys, columns: Optional[Sequence[str]] = None) -> pa.Table:
        """Point lookup: the rows whose `key_column` is one of `keys`, in one call
        (see `silt.lookup`)."""
        try:
            return _lookup(self.location, table, key_column, keys, columns, self.token, self._client)
        except (flight.FlightError, pa.ArrowException) as err:
            raise _wrap(err) from err

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"silt.Connection({self.location!r})"


@dataclasses.dataclass(frozen=True)
class Scan:
    """What to read — server(s), table, columns, SQL filter, token — without an
    open connection, so it can be sent to DataLoader worker processes.
    `batches()` connects, streams the record batches and closes."""

    servers: Servers
    table: str
    columns: Optional[Sequence[str]] = None
    filter: Optional[str] = None
    token: Optional[str] = None
    # PEM roots for `grpc+tls://` servers (else `$SILT_TLS_CA`), see `connect`.
    tls_root_certs: Optional[TlsRootCerts] = None

    def to_sql(self) -> str:
        return scan_sql(self.table, self.columns, self.filter)

    def where(self, predicate: str) -> "Scan":
        """This scan with `predicate` ANDed to its filter."""
        combined = predicate if not self.filter else f"({self.filter}) AND ({predicate})"
        return dataclasses.replace(self, filter=combined)

    def shard(self, index: int, count: int, by: str, type: Optional[pa.DataType] = None) -> "Scan":
        """Shard `index` of `count`: this scan with `shard_predicate` ANDed to
        its filter. The shards of one scan are disjoint and their union is
        the scan (each row lands in exactly one), as long as the table does
        not change between the shards' scans. `type` is `by`'s Arrow type
        (looked up when None)."""
        if count == 1:
            return self
        if type is None:
            type = self.table_schema().field(by).type
        return self.where(shard_predicate(by, type, index, count))

    def table_schema(self) -> pa.Schema:
        with connect(self.servers, self.token, tls_root_certs=self.tls_root_certs) as conn:
            return conn.schema(self.table)

    def batches(self) -> Iterator[pa.RecordBatch]:
        with connect(self.servers, self.token, tls_root_certs=self.tls_root_certs) as conn:
            yield from conn.sql_batches(self.to_sql())

    def schema(self) -> pa.Schema:
        with connect(self.servers, self.token, tls_root_certs=self.tls_root_certs) as conn:
            return conn.sql_schema(self.to_sql())

    def read_all(self) -> pa.Table:
        with connect(self.servers, self.token, tls_root_certs=self.tls_root_certs) as conn:
            return conn.sql(self.to_sql())


@dataclasses.dataclass(frozen=True)
class Query:
    """Like `Scan`, for arbitrary read-only SQL (not shardable)."""

    servers: Servers
    sql: str
    token: Optional[str] = None
    tls_root_certs: Optional[TlsRootCerts] = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        with connect(self.servers, self.token, tls_root_certs=self.tls_root_certs) as conn:
            yield from conn.sql_batches(self.sql)

    def schema(self) -> pa.Schema:
        with connect(self.servers, self.token, tls_root_certs=self.tls_root_certs) as conn:
            return conn.sql_schema(self.sql)
