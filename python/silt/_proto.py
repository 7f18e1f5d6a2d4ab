"""Hand-encoded protobuf for the few Flight SQL commands the client sends.

Flight SQL commands travel as `google.protobuf.Any { 1: type_url, 2: value }`
in a `FlightDescriptor.cmd`; tickets the server hands back are opaque bytes
and go back unchanged. Encoding these few messages by hand keeps the package's
only dependency pyarrow (no grpc/protobuf packages).

    CommandStatementQuery { 1: query (string), 2: transaction_id (bytes, optional) }
    TicketStatementQuery  { 1: statement_handle (bytes) }
    CommandGetTables      { 1: catalog, 2: db_schema_filter_pattern,
                            3: table_name_filter_pattern (strings, optional),
                            4: table_types (repeated string), 5: include_schema (bool) }

Silt's own pushdown scan travels the same way, as the ticket of a `DoGet`
(type URL `type.googleapis.com/silt.ScanRequest`; `silt-proto` has the
authoritative definition, fields 3, 5 and 8 are not sent from Python):

    ScanRequest    { 1: table (string), 2: projection (Projection, absent = all columns),
                     4: limit (uint64, optional), 6: scope (SegmentScope, optional),
                     7: layout_only (bool), 9: filter_sql (string, optional: a SQL
                     boolean expression over the table's columns, ANDed to the scan) }
    Projection     { 1: columns (repeated string; present and empty = row counts only) }
    SegmentScope   { 1: objects (repeated ObjectSegments) }
    ObjectSegments { 1: path (string), 2: version (string), 3: row_groups (repeated uint32, packed) }
"""

from typing import Optional, Sequence, Tuple

SQL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."

# Sent with every call: Silt answers SQL in Arrow's view types (string_view,
# binary_view) only to clients that ask (others get string, binary), and
# pyarrow reads the views without a copy. `silt_proto::VIEW_TYPES_HEADER`.
VIEW_TYPES_HEADER = (b"x-silt-view-types", b"true")


def call_headers(token: Optional[str]) -> list:
    """The gRPC headers of a call to Silt: view types asked for, and the
    bearer `token` when there is one."""
    headers = [VIEW_TYPES_HEADER]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers
SCAN_REQUEST = "type.googleapis.com/silt.ScanRequest"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return varint(number << 3) + varint(value)


def any_message(type_url: str, value: bytes) -> bytes:
    return field_bytes(1, type_url.encode()) + field_bytes(2, value)


def statement_query(query: str) -> bytes:
    """`Any{CommandStatementQuery{query}}`."""
    return any_message(SQL_PREFIX + "CommandStatementQuery", field_bytes(1, query.encode()))


def statement_ticket(query: str) -> bytes:
    """`Any{TicketStatementQuery{statement_handle = SQL}}`: Silt's statement
    tickets carry their SQL (a handle naming no kept plan is planned from its
    SQL), so a client can build the ticket itself and skip `GetFlightInfo`."""
    return any_message(SQL_PREFIX + "TicketStatementQuery", field_bytes(1, query.encode()))


def get_tables(catalog: Optional[str] = None, schema_pattern: Optional[str] = None,
               table_pattern: Optional[str] = None, table_types: Sequence[str] = (),
               include_schema: bool = False) -> bytes:
    """`Any{CommandGetTables{...}}`."""
    body = b""
    if catalog is not None:
        body += field_bytes(1, catalog.encode())
    if schema_pattern is not None:
        body += field_bytes(2, schema_pattern.encode())
    if table_pattern is not None:
        body += field_bytes(3, table_pattern.encode())
    for t in table_types:
        body += field_bytes(4, t.encode())
    if include_schema:
        body += field_varint(5, 1)
    return any_message(SQL_PREFIX + "CommandGetTables", body)


def scan_request(table: str, columns: Optional[Sequence[str]] = None, filter_sql: Optional[str] = None,
                 limit: Optional[int] = None, scope: Optional[Sequence[Tuple[str, str, Sequence[int]]]] = None,
                 layout_only: bool = False) -> bytes:
    """`Any{ScanRequest{...}}`, a `DoGet` ticket. `scope` lists
    `(path, version, [row_groups])` of object versions as a layout names
    them; the scan then reads only those row groups (and fails with
    `ABORTED` if an object is no longer at that version)."""
    body = field_bytes(1, table.encode())
    if columns is not None:
        body += field_bytes(2, b"".join(field_bytes(1, c.encode()) for c in columns))
    if limit is not None:
        body += field_varint(4, int(limit))
    if scope is not None:
        objects = b""
        for path, version, row_groups in scope:
            segments = field_bytes(1, path.encode()) + field_bytes(2, version.encode())
            if row_groups:
                segments += field_bytes(3, b"".join(varint(int(g)) for g in row_groups))
            objects += field_bytes(1, segments)
        body += field_bytes(6, objects)
    if layout_only:
        body += field_varint(7, 1)
    if filter_sql is not None:
        body += field_bytes(9, filter_sql.encode())
    return any_message(SCAN_REQUEST, body)
