"""Point lookups: `silt.LookupRequest` tickets over Arrow Flight.

The request is a protobuf message wrapped in a `google.protobuf.Any` (the
way Flight SQL commands travel), encoded by hand (`_proto`) so the client
needs nothing but pyarrow:

    LookupRequest { 1: table (string), 2: key_column (string),
                    3: keys (bytes: Arrow IPC stream, one batch, one column),
                    4: projection (message Projection { 1: repeated string }) }
"""

from typing import Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.flight as flight

from ._proto import any_message, call_headers, field_bytes

TYPE_URL = "type.googleapis.com/silt.LookupRequest"


def encode_request(table: str, key_column: str, keys: pa.Array,
                   columns: Optional[Sequence[str]] = None) -> bytes:
    """The ticket bytes of a lookup: `Any { type_url, value: LookupRequest }`."""
    batch = pa.record_batch([keys], names=["key"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    message = (field_bytes(1, table.encode()) + field_bytes(2, key_column.encode())
               + field_bytes(3, sink.getvalue().to_pybytes()))
    if columns is not None:
        projection = b"".join(field_bytes(1, c.encode()) for c in columns)
        message += field_bytes(4, projection)
    return any_message(TYPE_URL, message)


def lookup(location: str, table: str, key_column: str, keys: Iterable,
           columns: Optional[Sequence[str]] = None, token: Optional[str] = None,
           client: Optional[flight.FlightClient] = None) -> pa.Table:
    """The rows of `table` whose `key_column` is one of `keys` (SQL's
    `key_column IN (keys)`), with `columns` (all when None), in one call.

    `location` is the server's Flight URL (`grpc://host:port`); pass a
    `client` to reuse a connection across lookups.
    """
    keys = keys if isinstance(keys, pa.Array) else pa.array(list(keys))
    client = client or flight.FlightClient(location)
    options = flight.FlightCallOptions(headers=call_headers(token))
    ticket = flight.Ticket(encode_request(table, key_column, keys, columns))
    return client.do_get(ticket, options=options).read_all()
