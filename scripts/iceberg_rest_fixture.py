"""Serve the pyiceberg SQL catalog of a warehouse through the Iceberg REST
catalog spec's config and load-table endpoints, for Silt's server tests.

Usage: iceberg_rest_fixture.py WAREHOUSE_DIR [TOKEN]

Listens on 127.0.0.1 (a free port), prints the port on its first line, and
serves until its stdin closes (the test that started it ended or died):
- `GET /v1/config` -> `{"defaults": {}, "overrides": {"prefix": "fixture"}}`
- `GET /v1/fixture/namespaces/{ns}/tables/{table}` -> the table's
  `metadata-location` and `metadata` (404 with an error model if it does
  not exist), as pyiceberg's catalog (`iceberg_server_fixture.py`'s) has it
  now, so commits made meanwhile are seen.
With a TOKEN, requests without `Authorization: Bearer TOKEN` get 401.
Every request's path is appended to WAREHOUSE_DIR/rest-requests.log.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import unquote, urlparse

from iceberg_server_fixture import catalog_of
from pyiceberg.exceptions import NoSuchTableError


def main():
    warehouse = sys.argv[1]
    token = sys.argv[2] if len(sys.argv) > 2 else None
    log = open(f"{warehouse}/rest-requests.log", "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            log.write(self.path + "\n")
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                return self.reply(401, error("NotAuthorizedException", "a bearer token is required", 401))
            parts = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
            if parts == ["v1", "config"]:
                return self.reply(200, {"defaults": {}, "overrides": {"prefix": "fixture"}})
            if len(parts) == 6 and parts[:3] == ["v1", "fixture", "namespaces"] and parts[4] == "tables":
                namespace = tuple(parts[3].split("\x1f"))
                try:
                    table = catalog_of(warehouse).load_table(namespace + (parts[5],))
                except NoSuchTableError as e:
                    return self.reply(404, error("NoSuchTableException", str(e), 404))
                metadata = json.loads(table.metadata.model_dump_json(by_alias=True, exclude_none=True))
                return self.reply(200, {"metadata-location": table.metadata_location, "metadata": metadata})
            self.reply(404, error("NotFoundException", f"no route {self.path}", 404))

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the parent closes it or dies


def error(kind, message, code):
    return {"error": {"message": message, "type": kind, "code": code}}


if __name__ == "__main__":
    main()
