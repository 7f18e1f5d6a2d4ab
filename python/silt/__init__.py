"""Silt's Python client (needs only pyarrow).

    import silt
    with silt.connect("grpc://127.0.0.1:50051", token=None) as conn:
        conn.tables()                                   # ['lineitem', ...]
        conn.sql("SELECT count(*) FROM lineitem")       # pyarrow.Table
        for batch in conn.sql_batches("SELECT ..."):    # RecordBatches as they arrive
            ...
        conn.scan("lineitem", ["l_orderkey"], "l_quantity < 10")
        conn.lookup("lineitem", "l_orderkey", [1, 2])   # one DoGet, nothing planned

    with silt.connect_fleet(["grpc://a:50051", "grpc://b:50051"]) as fleet:
        fleet.scan("lineitem", ["l_orderkey"], "l_quantity < 10")   # each row group on its owner
        fleet.owners("lineitem")                                    # {url: row groups owned}

Errors raise `silt.SiltError` with the server's message. `silt.torch`
(optional, needs torch and numpy) streams scans into tensors.
"""

from .client import Connection, Query, Scan, SiltError, connect, quote_ident, scan_sql, shard_predicate
from .fleet import Fleet, connect_fleet
from .lookup import lookup

__all__ = ["Connection", "Fleet", "Query", "Scan", "SiltError", "connect", "connect_fleet", "lookup", "quote_ident",
           "scan_sql", "shard_predicate"]
