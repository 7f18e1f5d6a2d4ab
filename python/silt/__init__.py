"""Silt's Python client (needs only pyarrow).

    import silt
    with silt.connect("grpc://127.0.0.1:50051", token=None) as conn:
        conn.tables()                                   # ['lineitem', ...]
        conn.sql("SELECT count(*) FROM lineitem")       # pyarrow.Table
        for batch in conn.sql_batches("SELECT ..."):    # RecordBatches as they arrive
            ...
        conn.scan("lineitem", ["l_orderkey"], "l_quantity < 10")
        conn.lookup("lineitem", "l_orderkey", [1, 2])   # one DoGet, nothing planned

Errors raise `silt.SiltError` with the server's message. `silt.torch`
(optional, needs torch and numpy) streams scans into tensors.
"""

from .client import Connection, Query, Scan, SiltError, connect, quote_ident, scan_sql, shard_predicate
from .lookup import lookup

__all__ = ["Connection", "Query", "Scan", "SiltError", "connect", "lookup", "quote_ident", "scan_sql",
           "shard_predicate"]
