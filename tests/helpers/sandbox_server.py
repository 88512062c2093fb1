"""A small local HTTP server speaking SandboxFusion's `/run_code` API, for the sandbox tool's tests.

It runs no code: each POST's JSON is recorded, and the answer is what the test's `respond(payload)`
returns, `(HTTP status, JSON body)` (default: a finished run whose stdout names the code). A GET of
/run_code is answered 405 (`get_status`) and any other path 404, as SandboxFusion's FastAPI app
answers them.
Requests are served each in its own thread, so concurrency can be measured (`max_in_flight`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def finished(stdout: str = "", stderr: str = "", return_code: int = 0) -> dict:
    """SandboxFusion's response to a run that finished (status Failed when it exited non-zero)."""
    return {
        "status": "Success" if return_code == 0 else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": {
            "status": "Finished",
            "execution_time": 0.01,
            "return_code": return_code,
            "stdout": stdout,
            "stderr": stderr,
        },
        "executor_pod_name": None,
        "files": {},
    }


def _default(payload: dict) -> tuple[int, dict]:
    return 200, finished(stdout=f"ran {payload['language']}: {payload['code']}\n")


class SandboxServer:
    """`with SandboxServer(respond) as server:` serves at `server.url` (…/run_code) until the block ends."""

    def __init__(self, respond: Callable[[dict], tuple[int, dict]] = _default, delay_s: float = 0.0):
        self.respond, self.delay_s = respond, delay_s
        self.requests: list[dict] = []
        self.gets = 0
        self.get_status = 405  # what a GET of /run_code is answered (a gateway may say 404)
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/run_code"

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with server._lock:
                    server.gets += 1
                status = server.get_status if self.path == "/run_code" else 404
                self._send(status, {"detail": "Method Not Allowed" if status == 405 else "Not Found"})

            def do_POST(self):
                if self.path != "/run_code":
                    return self._send(404, {"detail": "Not Found"})
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(payload)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay_s)
                    answer = server.respond(payload)
                finally:
                    # a call is in flight until it is answered: counted out before the answer is
                    # sent, since the client may send its next call as soon as it has read it
                    with server._lock:
                        server.in_flight -= 1
                self._send(*answer)

            def _send(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet: the tests read what was recorded
                pass

        return Handler

    def __enter__(self) -> SandboxServer:
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def closed_url() -> str:
    """A /run_code URL on a local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/run_code"
