"""Starting a real `silt serve` (the binary in SILT_BIN, else `silt` on PATH) for a test."""

import json
import os
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, cache_dir, ssl_context=None, listen_host="127.0.0.1"):
    """Runs `silt serve ARGS` on free ports and waits until /health answers;
    returns the process and the Flight and admin ports. With `ssl_context`
    (a server started with --tls-cert) /health is polled over https with it;
    the Flight listener binds `listen_host` (the admin one 127.0.0.1)."""
    silt = os.environ.get("SILT_BIN", "silt")
    port, admin = free_port(), free_port()
    proc = subprocess.Popen(
        [silt, "serve", "--listen", f"{listen_host}:{port}", "--admin", f"127.0.0.1:{admin}",
         "--cache-dir", cache_dir, *args],
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 60
    while True:
        try:
            scheme = "https" if ssl_context is not None else "http"
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{admin}/health", timeout=1,
                                        context=ssl_context) as r:
                if json.load(r)["status"] == "ok":
                    return proc, port, admin
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError("silt serve did not start: " + proc.stderr.read().decode())
            time.sleep(0.2)


def stop(proc):
    proc.terminate()
    proc.wait(timeout=10)
