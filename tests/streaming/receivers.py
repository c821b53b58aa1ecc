"""A webhook receiver for the streaming tests: a real HTTP server on loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class WebhookReceiver:
    """Records each POST (headers, body); can answer 500 for a while, or hold requests."""

    def __init__(self, *, hang: bool = False, port: int = 0) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []  # the acknowledged ones
        self.attempts = 0  # every POST, answered 500 or not
        self._failures = 0
        self._hang = hang
        self._released = threading.Event()
        self._arrived = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                receiver._arrived.set()
                if receiver._hang:
                    receiver._released.wait(60)
                with receiver._lock:
                    receiver.attempts += 1
                    failing = receiver._failures > 0
                    if failing:
                        receiver._failures -= 1
                    else:
                        receiver.requests.append(
                            ({k.lower(): v for k, v in self.headers.items()}, body)
                        )
                self.send_response(500 if failing else 204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def fail_next(self, count: int) -> None:
        """Answer the next ``count`` requests with 500 (and do not record them)."""
        with self._lock:
            self._failures = count

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [body for _, body in self.requests]

    def wait_for_request(self, seconds: float) -> bool:
        return self._arrived.wait(seconds)

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
