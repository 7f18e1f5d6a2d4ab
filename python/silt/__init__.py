"""Silt's Python client.

Any Flight SQL client (ADBC, JDBC, ...) can query a Silt server; this module
adds what is Silt's own: point lookups answered in one `DoGet` without
planning (`lookup`).
"""

from .lookup import lookup

__all__ = ["lookup"]
