"""Scans placed across a fleet of Silt servers by rendezvous hashing: the
Python twin of `silt-client`'s fleet (`crates/silt-client/src/fleet.rs`).

Every server of a fleet serves the same tables over the same store. A scan
asks one server for the table's layout (its object versions and their row
groups), then sends each row group to its *owner*: the member with the
highest `weight(member, "object#row_group")` (rendezvous hashing). Every
client, Rust or Python, computes the same owners without talking to the
others, so each server reads and caches its own share of a table. Members are
named by their URL as given, with `grpc://` or `grpc+tcp://` spelled
`http://` (`member_name`): clients must list a fleet's URLs the same way to
agree on owners.

The row groups of one owner go in scans of at most `ROW_GROUPS_PER_SCAN`: a
`silt.ScanRequest` ticket scoped to them (`_proto.scan_request`), the filter
as SQL text parsed by the server. Up to `SCANS_PER_MEMBER` scans per member
run at once (on threads; a pyarrow Flight client is thread-safe), and each
run's rows are yielded once its scan has completed.

Failover: a member that cannot be reached or fails in transport (a
`SiltError` of kind `FlightUnavailableError` or `FlightCancelledError`) is
skipped for `backoff` seconds, and the row groups of its run go one by one to
their next member in rendezvous order (members in back-off last). A run is
held until it has completed, so a retry never duplicates or drops a row.
After the back-off the member is tried again. Errors of the request itself (a
bad filter, an unknown column) raise at once. An object overwritten between
the layout and a run fails the scan with the server's "changed" error
(`SiltError`); it is not retried with a new layout, as earlier runs may
already have been yielded: scan again.

Tables without a layout (views) and scans with a `limit` are scanned whole
by the owner of the table's name, with the same failover. `tables`, `sql`
and `sql_batches` go to the first member in list order that answers.
"""

import concurrent.futures
import functools
import threading
import time
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from . import _proto
from .client import (Connection, Servers, SiltError, TlsRootCerts, _flight_client, _server_message, _servers,
                     read_batches, read_schema)

# Row groups of one owner sent in one scan: a request costs the server a plan
# and a pass over its listing; a run is also the unit of retry.
ROW_GROUPS_PER_SCAN = 8

# Scans in flight per member.
SCANS_PER_MEMBER = 2

# `SiltError.kind`s of a member that failed in transport (not the request).
TRANSPORT_KINDS = ("FlightUnavailableError", "FlightCancelledError")

_MASK = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

T = TypeVar("T")


def _fnv1a(h: int, data: bytes) -> int:
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def _fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK
    return h ^ (h >> 33)


def _server_state(server: str) -> int:
    """FNV-1a of `server` and the zero byte: where every weight of it starts."""
    return _fnv1a(_FNV_OFFSET, server.encode() + b"\0")


def weight(server: str, segment: str) -> int:
    """The rendezvous weight of `server` for `segment`: FNV-1a (64 bit) of
    `server`'s UTF-8, a zero byte and `segment`, then MurmurHash3's fmix64.
    Part of the wire contract: the Rust clients compute the same."""
    return _fmix64(_fnv1a(_server_state(server), segment.encode()))


def _order(states: Sequence[int], segment: str) -> List[int]:
    data = segment.encode()
    weights = [_fmix64(_fnv1a(s, data)) for s in states]
    return sorted(range(len(states)), key=lambda i: (-weights[i], i))


def rendezvous_order(servers: Sequence[str], segment: str) -> List[int]:
    """Indices of `servers` (member names) by descending `weight` for
    `segment`, ties by ascending index: the first is the segment's owner."""
    return _order([_server_state(s) for s in servers], segment)


def member_name(url: str) -> str:
    """The name a fleet member is placed by: its URL as given, trimmed, without
    trailing `/`, with `grpc://` or `grpc+tcp://` spelled `http://` (as Rust's
    `silt_proto::placement::member_name`)."""
    return (url.strip().rstrip("/").replace("grpc://", "http://", 1).replace("grpc+tcp://", "http://", 1)
            .replace("grpc+tls://", "https://", 1))


def segment_name(obj: str, row_group: int) -> str:
    """The name rendezvous hashing places: one row group of one object."""
    return f"{obj}#{row_group}"


class RowGroup(NamedTuple):
    """One row group of a layout answer."""
    object: str
    version: str
    index: int
    rows: int


Scope = List[Tuple[str, str, List[int]]]


def _scope(groups: Iterable[RowGroup]) -> Scope:
    """`groups` as `_proto.scan_request`'s scope, by object in first-seen order."""
    objects: Dict[str, Tuple[str, str, List[int]]] = {}
    for g in groups:
        objects.setdefault(g.object, (g.object, g.version, []))[2].append(g.index)
    return list(objects.values())


class _Stopped(Exception):
    """The consumer of a scan went away; its runs stop (not a failure)."""


def _read_scan(stop: Optional[threading.Event], ticket: bytes,
               conn: Connection) -> Tuple[pa.Schema, List[pa.RecordBatch]]:
    """The schema and (non-empty) batches of one scan, read whole."""
    reader = conn._do_get(ticket)
    try:
        schema = read_schema(reader)
        batches = []
        for batch in read_batches(reader):
            if stop is not None and stop.is_set():
                raise _Stopped()
            if batch.num_rows:
                batches.append(batch)
        return schema, batches
    finally:
        reader.cancel()


def connect_fleet(servers: Servers, token: Optional[str] = None, backoff: float = 15.0,
                  timeout: Optional[float] = 10.0, tls_root_certs: Optional[TlsRootCerts] = None) -> "Fleet":
    """A `Fleet` of Silt servers (`"grpc://host:port"` each) serving the same
    tables: scans are placed per row group on their rendezvous owners (see
    `silt.fleet`). Nothing is connected until first used, so a fleet starts
    while some of its members are down. `token` is sent to every member; a
    member that fails in transport is skipped for `backoff` seconds;
    `timeout` bounds each attempt to connect to a member (None: gRPC's);
    `tls_root_certs` (PEM) verify `grpc+tls://` members, as in
    `silt.connect` (None: `$SILT_TLS_CA`'s file, else gRPC's roots)."""
    return Fleet(servers, token, backoff, timeout, tls_root_certs)


class Fleet:
    """Servers of one fleet behind one client. Use `silt.connect_fleet`."""

    def __init__(self, servers: Servers, token: Optional[str] = None, backoff: float = 15.0,
                 timeout: Optional[float] = 10.0, tls_root_certs: Optional[TlsRootCerts] = None):
        self.urls: List[str] = _servers(servers)
        self.names: List[str] = [member_name(u) for u in self.urls]
        self.token = token
        self.tls_root_certs = tls_root_certs
        self.backoff = backoff
        self.timeout = timeout
        self._states = [_server_state(n) for n in self.names]
        self._conns: List[Optional[Connection]] = [None] * len(self.urls)
        self._down_until = [0.0] * len(self.urls)
        self._whole: set = set()
        self._lock = threading.Lock()

    # -- members and their health

    def rendezvous(self, segment: str) -> List[int]:
        """Member indices in rendezvous order for `segment` (owner first)."""
        return _order(self._states, segment)

    def is_down(self, i: int) -> bool:
        """Whether member `i` is being skipped after a transport failure."""
        with self._lock:
            return time.monotonic() < self._down_until[i]

    def _connection(self, i: int) -> Connection:
        with self._lock:
            conn = self._conns[i]
            if conn is None:
                options = {}
                if self.timeout is not None:
                    # gRPC's minimum connect timeout (its default is 20 s).
                    options["generic_options"] = [("grpc.min_reconnect_backoff_ms", int(self.timeout * 1000))]
                try:
                    client = _flight_client(self.urls[i], self.tls_root_certs, **options)
                except (flight.FlightError, pa.ArrowException, ValueError) as err:
                    wrapped = SiltError(f"cannot connect to {self.urls[i]}: {_server_message(err)}",
                                        "FlightUnavailableError")
                    raise wrapped from err
                conn = self._conns[i] = Connection(self.urls[i], client, self.token)
            return conn

    def _on_member(self, i: int, call: Callable[[Connection], T]) -> T:
        """`call` on member `i`, keeping its health: back in service when it
        answers, in back-off (its connection dropped, a new one is made on
        the next try) when it fails in transport."""
        conn = None
        try:
            conn = self._connection(i)
            answer = call(conn)
        except SiltError as err:
            if err.kind in TRANSPORT_KINDS:
                with self._lock:
                    self._down_until[i] = time.monotonic() + self.backoff
                    if conn is not None and self._conns[i] is conn:
                        self._conns[i] = None
            raise
        with self._lock:
            self._down_until[i] = 0.0
        return answer

    def _failover(self, order: Sequence[int], call: Callable[[Connection], T]) -> T:
        """`call` on the members of `order`, those in back-off last, until one
        answers or fails with an error of the request (raised as is)."""
        down = [i for i in order if self.is_down(i)]
        errors = []
        for i in [i for i in order if i not in down] + down:
            try:
                return self._on_member(i, call)
            except SiltError as err:
                if err.kind not in TRANSPORT_KINDS:
                    raise
                errors.append(f"{self.urls[i]}: {err}")
        raise SiltError("no member of the fleet answered: " + "; ".join(errors), "FlightUnavailableError")

    def _in_list_order(self, call: Callable[[Connection], T]) -> T:
        return self._failover(range(len(self.urls)), call)

    # -- whole-fleet calls, on the first member that answers

    def tables(self) -> List[str]:
        """The names of the tables and views the fleet serves."""
        return self._in_list_order(lambda c: c.tables())

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of a table or view (nothing is scanned)."""
        return self._in_list_order(lambda c: c.schema(table))

    def sql(self, query: str) -> pa.Table:
        """Runs read-only SQL on one member (the first that answers, in list
        order); nothing is placed."""
        return self._in_list_order(lambda c: c.sql(query))

    def sql_batches(self, query: str) -> Iterator[pa.RecordBatch]:
        """`sql` as a stream of `RecordBatch`es. Fails over until the first
        message arrives; a failure after that raises."""
        ticket = _proto.statement_ticket(query)

        def start(conn: Connection) -> flight.FlightStreamReader:
            reader = conn._do_get(ticket)
            try:
                read_schema(reader)
            except SiltError:
                reader.cancel()
                raise
            return reader

        reader = self._in_list_order(start)
        try:
            yield from read_batches(reader)
        finally:
            reader.cancel()

    # -- placement

    def layout(self, table: str) -> Optional[List[RowGroup]]:
        """The row groups of `table` in the layout's order (asked of the owner
        of the table's name, failing over), or None for a table without a
        layout (a view), which is then scanned whole."""
        with self._lock:
            if table in self._whole:
                return None
        ticket = _proto.scan_request(table, layout_only=True)
        try:
            answer = self._failover(self.rendezvous(table), lambda c: c._read_all(ticket))
        except SiltError as err:
            if err.kind != "ArrowInvalid":
                raise
            with self._lock:
                self._whole.add(table)
            return None
        try:
            columns = [answer[name].to_pylist() for name in ("object", "version", "row_group", "rows")]
        except KeyError as err:
            raise SiltError(f"the layout of {table!r} lacks column {err}", "ProtocolError") from err
        groups: Dict[Tuple[str, str, int], RowGroup] = {}
        for obj, version, index, rows in zip(*columns):
            groups.setdefault((obj, version, index), RowGroup(obj, version, index, rows))
        return list(groups.values())

    def owners(self, table: str) -> Dict[str, int]:
        """Per member URL (as given), how many row groups of `table` it owns
        by rendezvous hashing, whatever its health. A view owns none."""
        owned = {url: 0 for url in self.urls}
        for g in self.layout(table) or []:
            owned[self.urls[self.rendezvous(segment_name(g.object, g.index))[0]]] += 1
        return owned

    def _runs(self, groups: List[RowGroup]) -> List[Tuple[int, List[RowGroup]]]:
        """Row groups by their first live owner, in runs of at most
        `ROW_GROUPS_PER_SCAN`, in the layout's order."""
        runs: List[Tuple[int, List[RowGroup]]] = []
        open_runs: Dict[int, List[RowGroup]] = {}
        for g in groups:
            order = self.rendezvous(segment_name(g.object, g.index))
            owner = next((i for i in order if not self.is_down(i)), order[0])
            run = open_runs.get(owner)
            if run is None or len(run) >= ROW_GROUPS_PER_SCAN:
                run = open_runs[owner] = []
                runs.append((owner, run))
            run.append(g)
        return runs

    def _scan_run(self, owner: int, run: List[RowGroup], request: Dict[str, object],
                  stop: threading.Event) -> Tuple[pa.Schema, List[pa.RecordBatch]]:
        """The rows of `run` in one scan on `owner`; if it fails in transport,
        each row group on its next live owner instead."""
        ticket = _proto.scan_request(**request, scope=_scope(run))
        try:
            return self._on_member(owner, functools.partial(_read_scan, stop, ticket))
        except SiltError as err:
            if err.kind not in TRANSPORT_KINDS:
                raise
        schema, batches = None, []
        for g in run:
            ticket = _proto.scan_request(**request, scope=_scope([g]))
            order = self.rendezvous(segment_name(g.object, g.index))
            got_schema, got = self._failover(order, functools.partial(_read_scan, stop, ticket))
            schema = schema or got_schema
            batches.extend(got)
        return schema, batches

    def _scan(self, table: str, columns: Optional[Sequence[str]], filter: Optional[str],
              limit: Optional[int]) -> Iterator[Tuple[pa.Schema, List[pa.RecordBatch]]]:
        """The scan's runs, each `(schema, batches)`, as they complete."""
        if columns is not None:
            columns = list(columns)
            if not columns:
                raise ValueError("columns must name at least one column (None = all)")
        request = {"table": table, "columns": columns, "filter_sql": filter or None}
        groups = self.layout(table) if limit is None else None
        if not groups:
            # No row groups to place (a view, an empty table) or a limit:
            # the owner of the table's name scans it whole.
            ticket = _proto.scan_request(**request, limit=limit)
            yield self._failover(self.rendezvous(table), functools.partial(_read_scan, None, ticket))
            return
        runs = iter(self._runs(groups))
        parallel = SCANS_PER_MEMBER * len(self.urls)
        stop = threading.Event()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="silt-fleet")
        try:
            pending = set()

            def submit_next() -> None:
                nxt = next(runs, None)
                if nxt is not None:
                    pending.add(pool.submit(self._scan_run, *nxt, request, stop))

            for _ in range(parallel):
                submit_next()
            while pending:
                done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    pending.discard(future)
                    answer = future.result()
                    submit_next()
                    yield answer
        finally:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)

    def scan(self, table: str, columns: Optional[Sequence[str]] = None, filter: Optional[str] = None,
             limit: Optional[int] = None) -> pa.Table:
        """The rows of `table` matching `filter` (SQL text over its columns,
        e.g. `"qty < 10"`), with `columns` (all when None), each row group
        read by its owner. Rows come in no particular order. With a `limit`,
        the owner of the table's name scans it whole."""
        schema, batches = None, []
        for run_schema, run in self._scan(table, columns, filter, limit):
            schema = schema or run_schema
            batches.extend(run)
        return pa.Table.from_batches(batches, schema=schema)

    def scan_batches(self, table: str, columns: Optional[Sequence[str]] = None,
                     filter: Optional[str] = None, limit: Optional[int] = None) -> Iterator[pa.RecordBatch]:
        """`scan` as a stream of `RecordBatch`es, a run's batches once its scan
        has completed. Closing the generator early stops the scans in flight."""
        for _, run in self._scan(table, columns, filter, limit):
            yield from run

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, [None] * len(self.urls)
        for conn in conns:
            if conn is not None:
                conn.close()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"silt.Fleet({self.urls!r})"
