"""A real OTLP/HTTP trace receiver on loopback for tests: ``POST /v1/traces``, protobuf.

What a collector does at the wire, and no more: decode each ``ExportTraceServiceRequest``
with ``opentelemetry-proto`` and keep its spans with their resource's attributes.
``hold`` makes it accept requests but not answer them until released (a collector that
hangs), to show that exporting never holds up an execute.
"""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass(frozen=True)
class ReceivedSpan:
    span: Span
    resource: dict[str, object]

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_span_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def attributes(self) -> dict[str, object]:
        return {kv.key: _value(kv.value) for kv in self.span.attributes}


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0  # export requests received (answered or held)
        self.hold = threading.Event()  # set: requests wait until ``release``
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 30.0
    ) -> list[ReceivedSpan]:
        """The spans once ``done`` says they are all there; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not done(spans := self.spans()):
            if time.monotonic() > deadline:
                names = sorted(s.name for s in spans)
                raise AssertionError(f"spans did not arrive in {timeout} s; got {names}")
            time.sleep(0.05)
        return spans

    def release(self) -> None:
        self._released.set()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests += 1
                if receiver.hold.is_set():
                    receiver._released.wait(60)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received = [
                    ReceivedSpan(span, {kv.key: _value(kv.value) for kv in rs.resource.attributes})
                    for rs in request.resource_spans
                    for ss in rs.scope_spans
                    for span in ss.spans
                ]
                with receiver._lock:
                    receiver._spans.extend(received)
                answer = ExportTraceServiceResponse().SerializeToString()
                # An exporter that gave up on a held request has closed its end.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: pytest shows failures, not every export

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()
