"""OpenTelemetry traces of the execute path, configured only by the standard ``OTEL_*`` variables.

Off unless an exporter is configured (``wanted``; docs/observability.md, "Traces"). When off,
nothing of OpenTelemetry is imported and the execute path meets only a context variable
read per step: ``step`` hands back one shared no-op context manager, ``annotate`` returns at
once, and the ASGI middleware that opens the ``execute`` span is not in the app at all.

When on, every serving process builds its own ``TracerProvider`` in the app's lifespan
(``start``), so a uvicorn worker never inherits a ``BatchSpanProcessor`` thread from its
parent, and flushes it when the lifespan ends (``stop``). The provider is ours, not the API's
global one: a library in the same process cannot replace it, and tests can install an
in-memory one (``install``).

Spans: ``execute`` (SERVER, HTTP attributes of the semantic conventions, the org, surface,
decision and receipt id) with the children ``authenticate``, ``rate_limit``, ``evaluate``,
``sign`` and ``commit``. An incoming W3C ``traceparent``/``tracestate`` is the parent; the
response carries a ``traceparent`` naming the ``execute`` span. Exporting happens on the batch
processor's thread, which drops spans when its queue is full: a slow or dead collector never
holds up or changes a decision.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

# The routes with an ``execute`` span; the others get none (docs/observability.md).
EXECUTE_PATHS = frozenset({"/v1/execute", "/execute"})
INSTRUMENTATION_NAME = "execauth"
DEFAULT_SERVICE_NAME = "execauth"
# How long shutdown waits for the last spans to leave (a dead collector must not hold
# SIGTERM up past uvicorn's graceful shutdown).
SHUTDOWN_FLUSH_SECONDS = 5.0
SUPPORTED_OTLP_PROTOCOLS = ("http/protobuf",)
SUPPORTED_EXPORTERS = ("otlp", "console", "none")

_NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()
# The current request's ``execute`` span; None when tracing is off or outside an execute.
_execute_span: ContextVar[Span | None] = ContextVar("execauth_execute_span", default=None)


class TracingConfigurationError(ValueError):
    """An ``OTEL_*`` variable asks for something this build cannot do."""


@dataclass(frozen=True, slots=True)
class TracingPlan:
    """What the environment asks for, read without importing OpenTelemetry."""

    exporters: tuple[str, ...]  # "otlp" and/or "console"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def plan(environ: Mapping[str, str] | None = None) -> TracingPlan | None:
    """The tracing the environment asks for, or None when tracing is off.

    On when ``OTEL_SDK_DISABLED`` is not ``true`` and either ``OTEL_TRACES_EXPORTER`` names an
    exporter other than ``none``, or (it unset) ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. The SDK's own default exporter is ``otlp``;
    ours is none, so that a service nobody configured sends nothing anywhere.
    """
    env = os.environ if environ is None else environ
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return None
    named = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if named:
        exporters = tuple(name.strip().lower() for name in named.split(",") if name.strip())
    elif env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        exporters = ("otlp",)
    else:
        return None
    unknown = [name for name in exporters if name not in SUPPORTED_EXPORTERS]
    if unknown:
        raise TracingConfigurationError(
            f"OTEL_TRACES_EXPORTER: unsupported exporter(s) {', '.join(unknown)}"
            f" (supported: {', '.join(SUPPORTED_EXPORTERS)})"
        )
    exporters = tuple(name for name in exporters if name != "none")
    if not exporters:
        return None
    if "otlp" in exporters:
        protocol = (
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        ).strip()
        if protocol not in SUPPORTED_OTLP_PROTOCOLS:
            raise TracingConfigurationError(
                f"OTLP protocol {protocol!r} is not supported; use http/protobuf"
                " (OTEL_EXPORTER_OTLP_PROTOCOL / OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)"
            )
    return TracingPlan(exporters)


class _State:
    """The process's tracer; None while tracing is off."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.provider: TracerProvider | None = None
        self.owned = False  # built by ``start`` (so ``stop`` shuts it down)


_state = _State()


def active() -> bool:
    return _state.tracer is not None


def middleware(environ: Mapping[str, str] | None = None) -> list[Middleware]:
    """The ASGI middleware to add to an app: none when tracing is off.

    Reads (and checks) the environment now, at app construction, so a bad ``OTEL_*``
    value stops ``execauth serve`` before it listens.
    """
    if active() or plan(environ) is not None:
        return [Middleware(TracingMiddleware)]
    return []


def start(environ: Mapping[str, str] | None = None) -> None:
    """Build this process's provider from the environment (once; nothing when off)."""
    if active():
        return
    wanted = plan(environ)
    if wanted is None:
        return
    provider = _provider_from_environment(wanted)
    _state.tracer = provider.get_tracer(INSTRUMENTATION_NAME)
    _state.provider = provider
    _state.owned = True


def stop() -> None:
    """Flush and shut down the provider ``start`` built, waiting at most a few seconds."""
    provider, owned = _state.provider, _state.owned
    if provider is None or not owned:
        return
    _state.tracer, _state.provider, _state.owned = None, None, False
    # The SDK's shutdown waits up to 30 s per processor for a collector that may be gone.
    flusher = threading.Thread(target=provider.shutdown, name="execauth-trace-flush", daemon=True)
    flusher.start()
    flusher.join(SHUTDOWN_FLUSH_SECONDS)


def install(provider: TracerProvider) -> None:
    """Trace into ``provider`` (tests: an in-memory exporter); the caller shuts it down."""
    _state.tracer = provider.get_tracer(INSTRUMENTATION_NAME)
    _state.provider = provider
    _state.owned = False


def uninstall() -> None:
    """Back to off (tests)."""
    _state.tracer, _state.provider, _state.owned = None, None, False


def _provider_from_environment(wanted: TracingPlan) -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create; only
    # the SDK's "unknown_service" default is replaced by our name.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # The sampler comes from OTEL_TRACES_SAMPLER(_ARG); the processor's queue and delays
    # from OTEL_BSP_*; the exporter's endpoint, headers, timeout and TLS from OTEL_EXPORTER_OTLP_*.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in _exporters(wanted):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporters(wanted: TracingPlan) -> Iterator[SpanExporter]:
    for name in wanted.exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            yield OTLPSpanExporter()
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            yield ConsoleSpanExporter()


# The execute path ----------------------------------------------------------------------


def step(name: str) -> contextlib.AbstractContextManager[object]:
    """A child span of the current ``execute`` span; the shared no-op when there is none.

    An exception leaving the block is recorded on the span and sets its status to ERROR.
    """
    if _execute_span.get() is None or _state.tracer is None:
        return _NOOP
    return _state.tracer.start_as_current_span(name)


def annotate(**attributes: str | bool | int) -> None:
    """Set ``execauth.<name>`` attributes on the current ``execute`` span, if any."""
    span = _execute_span.get()
    if span is None:
        return
    span.set_attributes({f"execauth.{key}": value for key, value in attributes.items()})


def current_trace_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current ``execute`` span; None when there is none."""
    span = _execute_span.get()
    if span is None:
        return None
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


class TracingMiddleware:
    """ASGI middleware: an ``execute`` SERVER span around each execute request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = _state.tracer
        if tracer is None or scope["type"] != "http" or scope["path"] not in EXECUTE_PATHS:
            await self.app(scope, receive, send)
            return
        await _traced(tracer, self.app, scope, receive, send)


async def _traced(tracer: Tracer, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    headers = _headers(scope)
    # The globally configured propagator: W3C trace context and baggage unless
    # OTEL_PROPAGATORS says otherwise.
    parent = propagate.extract(headers)
    span = tracer.start_span(
        "execute", context=parent, kind=SpanKind.SERVER, attributes=_http_attributes(scope, headers)
    )
    span_context = trace.set_span_in_context(span, parent)
    answer: dict[str, str] = {}
    # The response names the execute span in W3C form, whatever OTEL_PROPAGATORS reads.
    TraceContextTextMapPropagator().inject(answer, context=span_context)
    extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.items()]

    async def send_with_trace(message: Message) -> None:
        if message["type"] == "http.response.start":
            status = int(message["status"])
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                # Server spans: 5xx is an error, 4xx is the client's (semantic conventions).
                span.set_attribute("error.type", str(status))
                span.set_status(Status(StatusCode.ERROR))
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    span_token = _execute_span.set(span)
    context_token = otel_context.attach(span_context)
    try:
        await app(scope, receive, send_with_trace)
    except BaseException as exc:
        span.record_exception(exc)
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        otel_context.detach(context_token)
        _execute_span.reset(span_token)
        span.end()


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name; repeated ones joined with a comma."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return headers


def _http_attributes(scope: Scope, headers: Mapping[str, str]) -> dict[str, str | int]:
    """HTTP server span attributes (semantic conventions, stable HTTP names)."""
    attributes: dict[str, str | int] = {
        "http.request.method": str(scope.get("method", "")),
        "http.route": str(scope["path"]),
        "url.path": str(scope["path"]),
        "url.scheme": str(scope.get("scheme", "http")),
        "network.protocol.version": str(scope.get("http_version", "1.1")),
    }
    host = headers.get("host")
    if host:
        address, _, port = host.rpartition(":")
        if port.isdigit():
            attributes["server.address"] = address
            attributes["server.port"] = int(port)
        else:
            attributes["server.address"] = host
    client = scope.get("client")
    if client:
        attributes["client.address"] = str(client[0])
    agent = headers.get("user-agent")
    if agent:
        attributes["user_agent.original"] = agent
    return attributes
