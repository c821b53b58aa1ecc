"""OpenTelemetry traces (execauth.observability.tracing, docs/observability.md "Traces").

In process, spans go to the SDK's in-memory exporter; end to end, a real ``execauth serve``
configured only by ``OTEL_*`` variables exports them over OTLP/HTTP to a receiver started
here (tests/observability/otlp_receiver.py). Tracing has nothing to do with the database,
so these tests run on SQLite only.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from execauth.api.app import create_app
from execauth.config import PlanSettings, Settings
from execauth.observability import tracing
from execauth.serving.runtime import Runtime
from tests.conftest import ADMIN, Database, Tenant, make_tenant
from tests.observability.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.serving import clean_env, free_port, provision_org, running_service, spawn_service

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
STEPS = {"authenticate", "rate_limit", "evaluate", "sign", "commit"}
INCOMING_TRACE = "0af7651916cd43dd8448eb211c80319c"
INCOMING_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"


@pytest.fixture
def database(tmp_path: Path) -> Database:
    """SQLite only: the spans do not depend on the database (conftest's runs both)."""
    return Database(f"sqlite:///{tmp_path / 'execauth.db'}", None)


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    """The default catalog and a plan of one execute a month, to use up."""
    return Settings().plans | {"tiny": PlanSettings(executes_per_month=1, requests_per_minute=60)}


@pytest.fixture(autouse=True)
def no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No OTEL_* from the developer's shell; tracing off again after each test."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    yield
    tracing.uninstall()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    yield memory
    tracing.uninstall()
    provider.shutdown()


@pytest.fixture
async def traced_client(
    runtime: Runtime, exporter: InMemorySpanExporter
) -> AsyncIterator[httpx.AsyncClient]:
    """The in-process app with tracing on; sees the app's 5xx rather than exceptions."""
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


@pytest.fixture
async def tenant(traced_client: httpx.AsyncClient, exporter: InMemorySpanExporter) -> Tenant:
    made = await make_tenant(traced_client)
    exporter.clear()
    return made


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]  # one span per name
    return named


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


# --- when tracing is on and off -------------------------------------------------------------


def test_tracing_is_off_without_otel_variables() -> None:
    assert tracing.plan({}) is None


def test_an_otlp_endpoint_turns_tracing_on() -> None:
    wanted = tracing.plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted == tracing.TracingPlan(("otlp",))


def test_a_traces_endpoint_turns_tracing_on() -> None:
    wanted = tracing.plan({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert wanted == tracing.TracingPlan(("otlp",))


def test_a_named_exporter_turns_tracing_on() -> None:
    assert tracing.plan({"OTEL_TRACES_EXPORTER": "console"}) == tracing.TracingPlan(("console",))


def test_exporter_none_keeps_tracing_off_despite_an_endpoint() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert tracing.plan(environ) is None


def test_sdk_disabled_keeps_tracing_off() -> None:
    environ = {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}
    assert tracing.plan(environ) is None


def test_an_unsupported_protocol_is_refused_by_name() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    with pytest.raises(tracing.TracingConfigurationError, match="http/protobuf"):
        tracing.plan(environ)


def test_an_unknown_exporter_is_refused_by_name() -> None:
    with pytest.raises(tracing.TracingConfigurationError, match="zipkin"):
        tracing.plan({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_a_bad_otel_variable_stops_the_app_from_being_built(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    with pytest.raises(tracing.TracingConfigurationError):
        create_app(runtime)


def test_current_trace_ids_is_none_outside_a_traced_execute() -> None:
    assert tracing.current_trace_ids() is None


# --- the span tree (in-memory exporter) ---------------------------------------------------


async def test_an_execute_is_a_server_span_with_the_five_steps_as_children(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    response = await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"execute", *STEPS}
    execute = spans["execute"]
    assert execute.kind is SpanKind.SERVER
    assert execute.parent is None
    for name in STEPS:
        assert spans[name].parent is not None
        assert spans[name].parent.span_id == execute.context.span_id, name  # type: ignore[union-attr]


async def test_the_steps_run_in_order(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    steps = [s for s in exporter.get_finished_spans() if s.name in STEPS]
    ordered = sorted(steps, key=lambda span: span.start_time or 0)
    assert [s.name for s in ordered] == ["authenticate", "rate_limit", "evaluate", "sign", "commit"]


async def test_the_execute_span_carries_http_and_decision_attributes(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    response = await traced_client.post(
        "/v1/execute", json=PERMIT, headers={**tenant.auth, "User-Agent": "deployer/1.0"}
    )
    receipt = response.json()
    attributes = dict(by_name(exporter.get_finished_spans())["execute"].attributes or {})
    assert attributes == {
        "http.request.method": "POST",
        "http.route": "/v1/execute",
        "url.path": "/v1/execute",
        "url.scheme": "https",
        "network.protocol.version": "1.1",
        "server.address": "execauth.test",
        "client.address": "127.0.0.1",
        "user_agent.original": "deployer/1.0",
        "http.response.status_code": 200,
        "execauth.org_id": tenant.org_id,
        "execauth.surface": "deploy.production",
        "execauth.decision": "PERMIT",
        "execauth.repeated": False,
        "execauth.receipt_id": receipt["receipt_id"],
        "execauth.execution_id": receipt["execution_id"],
    }


async def test_a_deny_is_a_decision_not_an_error(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    denied = {**PERMIT, "context": {"branch": "feature"}}
    await traced_client.post("/v1/execute", json=denied, headers=tenant.auth)
    execute = by_name(exporter.get_finished_spans())["execute"]
    assert execute.attributes is not None
    assert execute.attributes["execauth.decision"] == "DENY"
    assert execute.status.status_code is StatusCode.UNSET


async def test_an_incoming_traceparent_is_the_parent_of_the_execute_span(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    headers = {**tenant.auth, "traceparent": TRACEPARENT, "tracestate": "vendor=opaque"}
    await traced_client.post("/v1/execute", json=PERMIT, headers=headers)
    execute = by_name(exporter.get_finished_spans())["execute"]
    assert execute.parent is not None
    assert execute.parent.is_remote
    assert f"{execute.parent.span_id:016x}" == INCOMING_SPAN
    assert hex_ids(execute)[0] == INCOMING_TRACE
    assert execute.context is not None
    assert execute.context.trace_state.get("vendor") == "opaque"


async def test_the_response_traceparent_names_the_execute_span(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    headers = {**tenant.auth, "traceparent": TRACEPARENT, "tracestate": "vendor=opaque"}
    response = await traced_client.post("/v1/execute", json=PERMIT, headers=headers)
    trace_id, span_id = hex_ids(by_name(exporter.get_finished_spans())["execute"])
    assert response.headers["traceparent"] == f"00-{trace_id}-{span_id}-01"
    assert response.headers["tracestate"] == "vendor=opaque"


async def test_an_error_response_names_its_execute_span_too(
    traced_client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    response = await traced_client.post("/v1/execute", json=PERMIT)
    assert response.status_code == 401
    execute = by_name(exporter.get_finished_spans())["execute"]
    trace_id, span_id = hex_ids(execute)
    assert execute.context is not None
    flags = f"{int(execute.context.trace_flags):02x}"  # a new trace: sampled (and random)
    assert response.headers["traceparent"] == f"00-{trace_id}-{span_id}-{flags}"


async def test_a_malformed_traceparent_starts_a_new_trace(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    headers = {**tenant.auth, "traceparent": "00-not-a-trace-01"}
    response = await traced_client.post("/v1/execute", json=PERMIT, headers=headers)
    assert response.status_code == 200
    execute = by_name(exporter.get_finished_spans())["execute"]
    assert execute.parent is None


async def test_a_failing_commit_is_an_error_on_commit_and_on_execute(
    traced_client: httpx.AsyncClient,
    tenant: Tenant,
    exporter: InMemorySpanExporter,
    runtime: Runtime,
) -> None:
    runtime.writer.stop()
    try:
        response = await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    finally:
        runtime.writer.start()
    assert response.status_code == 503
    spans = by_name(exporter.get_finished_spans())
    commit, execute = spans["commit"], spans["execute"]
    assert commit.status.status_code is StatusCode.ERROR
    assert [event.name for event in commit.events] == ["exception"]
    assert execute.status.status_code is StatusCode.ERROR
    assert execute.attributes is not None
    assert execute.attributes["http.response.status_code"] == 503
    assert execute.attributes["error.type"] == "503"
    assert "execauth.decision" not in execute.attributes


async def test_a_refused_key_is_an_error_on_authenticate_not_on_the_server_span(
    traced_client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    bad_key = {"Authorization": "Bearer service_live_" + "x" * 40}
    response = await traced_client.post("/v1/execute", json=PERMIT, headers=bad_key)
    assert response.status_code == 401
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"execute", "authenticate"}
    assert spans["authenticate"].status.status_code is StatusCode.ERROR
    # A 4xx is the client's doing (semantic conventions for server spans).
    assert spans["execute"].status.status_code is StatusCode.UNSET


async def test_a_quota_known_used_up_is_an_error_on_evaluate_with_no_sign_or_commit(
    traced_client: httpx.AsyncClient, tenant: Tenant, exporter: InMemorySpanExporter
) -> None:
    plan = await traced_client.patch(
        f"/console/v1/orgs/{tenant.org_id}", json={"plan": "tiny"}, headers=ADMIN
    )
    assert plan.status_code == 200, plan.text
    answers = [
        (await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code
        for _ in range(3)
    ]
    exporter.clear()

    response = await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)

    assert (answers, response.status_code) == ([200, 429, 429], 429)
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"execute", "authenticate", "rate_limit", "evaluate"}
    assert spans["evaluate"].status.status_code is StatusCode.ERROR
    assert spans["execute"].status.status_code is StatusCode.UNSET


async def test_an_unexpected_exception_is_recorded_on_the_execute_span(
    traced_client: httpx.AsyncClient,
    tenant: Tenant,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import execauth.usecases.execute as service_module

    def exploding_evaluate(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(service_module, "evaluate", exploding_evaluate)
    response = await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 500
    spans = by_name(exporter.get_finished_spans())
    assert spans["evaluate"].status.status_code is StatusCode.ERROR
    assert spans["execute"].status.status_code is StatusCode.ERROR
    assert "sign" not in spans


async def test_current_trace_ids_name_the_execute_span_during_the_request(
    traced_client: httpx.AsyncClient,
    tenant: Tenant,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import execauth.usecases.execute as service_module
    from execauth.policy.engine import evaluate as original

    seen: list[tuple[str, str] | None] = []

    def observing_evaluate(*args: Any, **kwargs: Any) -> Any:
        seen.append(tracing.current_trace_ids())
        return original(*args, **kwargs)

    monkeypatch.setattr(service_module, "evaluate", observing_evaluate)
    await traced_client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert seen == [hex_ids(by_name(exporter.get_finished_spans())["execute"])]


async def test_other_routes_have_no_spans(
    traced_client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    response = await traced_client.get("/healthz")
    assert response.status_code == 200
    assert "traceparent" not in response.headers
    assert exporter.get_finished_spans() == ()


# --- a collector that is down or hangs ------------------------------------------------------


@pytest.fixture
def otlp_to(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Configure tracing the way an operator does, by OTEL_* variables only."""

    def configure(endpoint: str, timeout_seconds: int = 2) -> None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")  # export at once
        monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")  # overflow quickly
        monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(timeout_seconds))

    yield configure
    tracing.stop()


async def execute_many(runtime: Runtime, count: int, during: Any = None) -> list[int]:
    """``count`` executes through an app built now; their status codes."""
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        assert tracing.active()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            tenant = await make_tenant(c)
            first = await c.post("/v1/execute", json=PERMIT, headers=tenant.auth)
            if during is not None:
                during()
            rest = [await c.post("/v1/execute", json=PERMIT, headers=tenant.auth)
                    for _ in range(count - 1)]  # fmt: skip
            return [first.status_code, *(r.status_code for r in rest)]


async def test_an_unreachable_collector_does_not_fail_executes(
    runtime: Runtime, otlp_to: Any
) -> None:
    otlp_to(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert await execute_many(runtime, 20) == [200] * 20


async def test_a_hanging_collector_does_not_hold_up_executes(
    runtime: Runtime, otlp_to: Any
) -> None:
    with otlp_receiver() as receiver:
        receiver.hold.set()
        otlp_to(receiver.endpoint, timeout_seconds=120)  # the export waits, never gives up

        def export_is_stuck() -> None:
            deadline = time.monotonic() + 30
            while receiver.requests == 0:
                assert time.monotonic() < deadline, "the first spans were never exported"
                time.sleep(0.01)

        statuses = await execute_many(runtime, 20, during=export_is_stuck)
        # Nineteen executes answered while the one export waited for the collector
        # (and the spans beyond the queue's 8 were dropped).
        assert receiver.requests == 1
        receiver.release()
    assert statuses == [200] * 20


# --- off: nothing imported -------------------------------------------------------------------

APP_IN_A_FRESH_PROCESS = textwrap.dedent(
    """
    import asyncio, sys
    import httpx
    from execauth.api.app import create_app
    from execauth.config import Settings
    from execauth.serving.runtime import bootstrap

    async def main() -> None:
        runtime = bootstrap(Settings())
        app = create_app(runtime)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                response = await client.post("/v1/execute", json={"surface": "x"})
                assert response.status_code == 401, response.text
        runtime.stop()

    asyncio.run(main())
    print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
    """
)


def modules_loaded_by_an_app(tmp_path: Path, **otel: str) -> str:
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{tmp_path / 'execauth.db'}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN="service_admin_" + secrets.token_urlsafe(32),
        EXECAUTH_STREAMING_ENABLED="false",
    )
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")} | otel
    done = subprocess.run(
        [sys.executable, "-c", APP_IN_A_FRESH_PROCESS], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_without_otel_variables_no_opentelemetry_module_is_imported(tmp_path: Path) -> None:
    assert modules_loaded_by_an_app(tmp_path) == "[]"


def test_with_an_endpoint_the_sdk_is_imported(tmp_path: Path) -> None:
    """The counterpart of the test above: it shows that test could fail."""
    loaded = modules_loaded_by_an_app(
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    assert "'opentelemetry.sdk.trace'" in loaded


# --- end to end: execauth serve → OTLP/HTTP → a receiver -------------------------------------


def serve_env(workdir: Path, receiver: OtlpReceiver, **otel: str) -> dict[str, str]:
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN="service_admin_" + secrets.token_urlsafe(32),
    )
    return {k: v for k, v in env.items() if not k.startswith("OTEL_")} | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "execauth-under-test",
        **otel,
    }


def one_trace(spans: list[ReceivedSpan]) -> bool:
    return {s.name for s in spans} >= {"execute", *STEPS}


def assert_tree(spans: list[ReceivedSpan]) -> None:
    named = {s.name: s for s in spans if s.trace_id == INCOMING_TRACE}
    assert set(named) == {"execute", *STEPS}
    execute = named["execute"]
    assert execute.parent_span_id == INCOMING_SPAN
    assert execute.resource["service.name"] == "execauth-under-test"
    for name in STEPS:
        assert named[name].parent_span_id == execute.span_id, name


@pytest.mark.e2e
def test_spans_of_a_served_execute_reach_an_otlp_http_receiver(tmp_path: Path) -> None:
    """Two uvicorn workers: each builds its own exporter after it is spawned."""
    with otlp_receiver() as receiver:
        env = serve_env(tmp_path, receiver, OTEL_BSP_SCHEDULE_DELAY="100")
        with running_service(env, tmp_path, free_port(), workers=2) as url:
            _, _, api_key = provision_org(url, env["EXECAUTH_ADMIN_TOKEN"])
            response = httpx.post(
                f"{url}/v1/execute",
                json=PERMIT,
                headers={"Authorization": f"Bearer {api_key}", "traceparent": TRACEPARENT},
            )
            assert response.status_code == 200
            spans = receiver.wait_for(one_trace)
        assert_tree(spans)
        execute = next(s for s in spans if s.name == "execute")
        assert response.headers["traceparent"] == f"00-{INCOMING_TRACE}-{execute.span_id}-01"


@pytest.mark.e2e
def test_a_stopping_service_flushes_its_spans(tmp_path: Path) -> None:
    with otlp_receiver() as receiver:
        # A minute between exports: the spans can only arrive by the flush at shutdown.
        env = serve_env(tmp_path, receiver, OTEL_BSP_SCHEDULE_DELAY="60000")
        port = free_port()
        process = spawn_service(env, tmp_path, port)
        try:
            url = f"http://127.0.0.1:{port}"
            _, _, api_key = provision_org(url, env["EXECAUTH_ADMIN_TOKEN"])
            response = httpx.post(
                f"{url}/v1/execute",
                json=PERMIT,
                headers={"Authorization": f"Bearer {api_key}", "traceparent": TRACEPARENT},
            )
            assert response.status_code == 200
            assert receiver.spans() == []
        finally:
            process.terminate()
            process.wait(timeout=40)
        assert_tree(receiver.wait_for(one_trace, timeout=5))
