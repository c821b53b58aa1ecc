"""The contract file (docs/api.md): ``GET /openapi.yaml`` against the gateway's real answers.

Every answer the gateway gives must have a status documented for its operation, carry
the headers documented as required, and have a body that validates against the schema
documented for that status. Schemas are validated with Draft 2020-12 (the dialect of
OpenAPI 3.1), resolving ``$ref`` through a registry that holds the whole document.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from execauth.errors import ExecauthError
from execauth.keyring import ROTATION_OVERLAP, generate_signing_key
from execauth.serving.runtime import Runtime
from tests.conftest import ADMIN, Tenant, make_tenant, small_plans

pytestmark = pytest.mark.anyio

PACKAGED = files("execauth.api").joinpath("openapi.yaml").read_bytes()
SPEC: dict[str, Any] = yaml.safe_load(PACKAGED)
SPEC_URI = "urn:execauth:openapi"
REGISTRY: Registry[Any] = Registry().with_resource(SPEC_URI, DRAFT202012.create_resource(SPEC))
EXECUTE_PATHS = ("/v1/execute", "/execute")

POLICY = """
description: OpenAPI contract fixtures
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main"
        ttl: 10m
      - id: wrong-branch
        deny: context.branch != "main"
        reason: SERVICE_POLICY_WRONG_BRANCH
        message: Only main can be deployed
  - match: payments.transfer
    require: [payload.amount]
    rules:
      - id: small
        permit: payload.amount <= 100
      - id: large
        deny: payload.amount > 100
        reason: SERVICE_POLICY_AMOUNT_LIMIT
"""
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


# ---- reading the document ---------------------------------------------------------------


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def lookup(pointer: str) -> Any:
    """The node at a JSON pointer (``/a/b``) of the document."""
    node: Any = SPEC
    for token in pointer.lstrip("/").split("/"):
        node = node[token.replace("~1", "/").replace("~0", "~")]
    return node


def follow(pointer: str) -> tuple[str, dict[str, Any]]:
    """Follow local ``$ref``s from ``pointer``; return the final pointer and node."""
    node = lookup(pointer)
    while isinstance(node, dict) and "$ref" in node:
        pointer = node["$ref"].removeprefix("#")
        node = lookup(pointer)
    return pointer, node


def operation_pointer(path: str, method: str) -> str:
    return f"/paths/{_escape(path)}/{method}"


def documented_statuses(path: str, method: str) -> set[int]:
    return {int(s) for s in lookup(operation_pointer(path, method))["responses"]}


def schema_errors(pointer: str, instance: Any) -> list[str]:
    """Why ``instance`` fails the schema at ``pointer`` (empty when it validates)."""
    validator = Draft202012Validator(
        {"$ref": f"{SPEC_URI}#{pointer}"},
        registry=REGISTRY,
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator.iter_errors(instance)
    ]


def component(name: str) -> str:
    return f"/components/schemas/{name}"


def assert_documented(response: httpx.Response, path: str, method: str = "post") -> None:
    """Status, required headers, header values and body all as documented for the operation."""
    status = response.status_code
    responses = lookup(operation_pointer(path, method))["responses"]
    assert str(status) in responses, f"{status} is not documented for {method.upper()} {path}"
    pointer, documented = follow(f"{operation_pointer(path, method)}/responses/{status}")
    for name in documented.get("headers", {}):
        header_pointer, header = follow(f"{pointer}/headers/{_escape(name)}")
        if header.get("required"):
            assert name in response.headers, f"{status} answer lacks required header {name}"
        if name in response.headers:
            errors = schema_errors(f"{header_pointer}/schema", response.headers[name])
            assert not errors, f"header {name}: {errors}"
    content = documented.get("content", {})
    if not content:
        assert response.content == b""
        return
    media_type = response.headers["content-type"].split(";")[0].strip()
    assert media_type in content, f"{media_type} is not documented for {status}"
    if media_type == "application/json":
        errors = schema_errors(f"{pointer}/content/{_escape(media_type)}/schema", response.json())
        assert not errors, f"{status} body {response.text[:300]}: {errors}"


async def contract_tenant(client: httpx.AsyncClient, **options: Any) -> Tenant:
    return await make_tenant(client, policy=POLICY, **options)


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> Tenant:
    return await contract_tenant(client)


# ---- the document itself ----------------------------------------------------------------


async def test_served_document_is_byte_identical_to_the_packaged_file(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/openapi.yaml")
    assert response.status_code == 200
    assert response.content == PACKAGED


async def test_served_document_has_a_yaml_content_type(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.yaml")
    media_type = response.headers["content-type"].split(";")[0].strip()
    assert media_type in ("application/yaml", "application/x-yaml", "text/yaml")
    assert_documented(response, "/openapi.yaml", "get")


async def test_served_document_is_a_valid_openapi_document(client: httpx.AsyncClient) -> None:
    served = yaml.safe_load((await client.get("/openapi.yaml")).content)
    validate_openapi(served)  # raises on any violation of the OpenAPI 3.1 schema


def test_document_is_version_1_0_0_of_an_openapi_3_1_contract() -> None:
    assert SPEC["info"]["version"] == "1.0.0"
    assert str(SPEC["openapi"]).startswith("3.1")
    assert SPEC["info"]["title"] == "execauth gateway"


def test_document_is_ascii_so_serving_it_does_not_depend_on_the_locale() -> None:
    # The gateway serves it through ``read_text()`` without an explicit encoding.
    PACKAGED.decode("ascii")


def test_component_references_resolve_and_reject_what_they_should() -> None:
    bad_receipt = {"decision": "BLOCK"}
    assert schema_errors(component("Receipt"), bad_receipt)
    assert not schema_errors(component("Decision"), "SILENCE")
    assert schema_errors(component("Surface"), "Deploy.Production")


def test_execute_security_is_the_bearer_scheme() -> None:
    scheme = SPEC["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path in EXECUTE_PATHS:
        assert lookup(operation_pointer(path, "post"))["security"] == [{"bearerAuth": []}]


# Route by route, served against documented: tests/contract/test_routes_documented.py.


def _all_error_classes(base: type[ExecauthError]) -> list[type[ExecauthError]]:
    found = [base]
    for sub in base.__subclasses__():
        found += _all_error_classes(sub)
    return found


def test_every_error_code_of_the_hierarchy_is_documented() -> None:
    codes = {cls.code for cls in _all_error_classes(ExecauthError)}
    assert codes <= set(SPEC["components"]["schemas"]["ErrorCode"]["enum"])


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422, 429, 500, 503])
def test_execute_documents_every_error_status_of_the_contract(status: int) -> None:
    for path in EXECUTE_PATHS:
        assert status in documented_statuses(path, "post")


# ---- decisions --------------------------------------------------------------------------

CONTEXT: dict[str, dict[str, Any]] = {
    "PERMIT": {"branch": "main"},
    "DENY": {"branch": "feature"},
    "SILENCE": {"ticket": "x"},
}
PAYLOAD: dict[str, dict[str, Any]] = {
    "PERMIT": {"amount": 10},
    "DENY": {"amount": 500},
    "SILENCE": {"currency": "EUR"},
}


def variant_body(variant: str, decision: str) -> dict[str, Any]:
    """A request in the field names of ``variant`` (docs/api.md) that yields ``decision``."""
    if variant == "A":
        return {
            "surface": "deploy.production",
            "actor": "release-bot",
            "metadata": CONTEXT[decision],
            "request_id": f"a-{decision}",
        }
    if variant == "B":
        return {
            "surface": "deploy.production",
            "action": "rollout",
            "actor": "release-bot",
            "context": CONTEXT[decision],
            "idempotency_key": f"b-{decision}",
        }
    if variant == "C":
        return {
            "surface": "deploy.production",
            "actorId": "release-bot",
            "context": CONTEXT[decision],
        }
    return {
        "surface_id": "payments.transfer",
        "action": "transfer",
        "payload": {**PAYLOAD[decision], "currency": "EUR"},
        "context": {"user": "u-1"},
    }


VARIANTS = ["A", "B", "C", "D"]
DECISIONS = ["PERMIT", "DENY", "SILENCE"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_input_variant_matches_the_documented_request_schema(variant: str) -> None:
    pointer, _ = follow(f"{operation_pointer('/v1/execute', 'post')}/requestBody")
    for decision in DECISIONS:
        body = variant_body(variant, decision)
        assert not schema_errors(f"{pointer}/content/application~1json/schema", body)
        assert not schema_errors(component(f"ExecuteRequest{variant}"), body)


@pytest.mark.parametrize("decision", DECISIONS)
@pytest.mark.parametrize("variant", VARIANTS)
async def test_profile_a_receipt_of_each_variant_and_decision_matches_the_200_schema(
    client: httpx.AsyncClient, tenant: Tenant, variant: str, decision: str
) -> None:
    response = await client.post(
        "/v1/execute", json=variant_body(variant, decision), headers=tenant.auth
    )
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == decision
    assert_documented(response, "/v1/execute")
    assert not schema_errors(component(f"{decision.title()}Receipt"), response.json())


@pytest.mark.parametrize(("decision", "status"), [("PERMIT", 200), ("DENY", 403), ("SILENCE", 422)])
async def test_profile_b_receipt_matches_the_schema_of_its_decision_status(
    client: httpx.AsyncClient, tenant: Tenant, decision: str, status: int
) -> None:
    response = await client.post(
        "/v1/execute",
        json=variant_body("B", decision),
        headers={**tenant.auth, "Prefer": "wire=b"},
    )
    assert response.status_code == status
    assert response.headers["preference-applied"] == "wire=b"
    assert_documented(response, "/v1/execute")


@pytest.mark.parametrize("decision", DECISIONS)
async def test_alias_answers_match_the_alias_operation(
    client: httpx.AsyncClient, tenant: Tenant, decision: str
) -> None:
    response = await client.post("/execute", json=variant_body("C", decision), headers=tenant.auth)
    assert response.status_code == 200
    assert_documented(response, "/execute")


async def test_idempotent_replay_matches_the_schema_and_its_header(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {**PERMIT, "request_id": "replay-1"}
    await client.post("/v1/execute", json=body, headers=tenant.auth)
    replay = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert replay.headers["idempotent-replayed"] == "true"
    assert_documented(replay, "/v1/execute")


# ---- errors (docs/api.md) -------------------------------------------------------------------

Case = Callable[[httpx.AsyncClient, Tenant, dict[str, str]], Awaitable[httpx.Response]]


def _post(body: Any = None, *, content: bytes | None = None, auth: bool = True) -> Case:
    async def send(
        client: httpx.AsyncClient, tenant: Tenant, extra: dict[str, str]
    ) -> httpx.Response:
        headers = {**(tenant.auth if auth else {}), **extra}
        if content is not None:
            headers["Content-Type"] = "application/json"  # a JSON body that is not JSON
            return await client.post("/v1/execute", content=content, headers=headers)
        return await client.post("/v1/execute", json=body, headers=headers)

    return send


async def _forbidden(
    client: httpx.AsyncClient, tenant: Tenant, extra: dict[str, str]
) -> httpx.Response:
    narrow = await contract_tenant(client, surfaces=["payments.*"])
    return await client.post("/v1/execute", json=PERMIT, headers={**narrow.auth, **extra})


async def _auditor(
    client: httpx.AsyncClient, tenant: Tenant, extra: dict[str, str]
) -> httpx.Response:
    auditor = await contract_tenant(client, role="auditor")
    return await client.post("/v1/execute", json=PERMIT, headers={**auditor.auth, **extra})


async def _conflict(
    client: httpx.AsyncClient, tenant: Tenant, extra: dict[str, str]
) -> httpx.Response:
    headers = {**tenant.auth, **extra}
    await client.post("/v1/execute", json={**PERMIT, "request_id": "k"}, headers=headers)
    other = {**PERMIT, "context": {"branch": "dev"}, "request_id": "k"}
    return await client.post("/v1/execute", json=other, headers=headers)


async def _revoked(
    client: httpx.AsyncClient, tenant: Tenant, extra: dict[str, str]
) -> httpx.Response:
    path = f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}"
    assert (await client.delete(path, headers=ADMIN)).status_code == 204
    return await client.post("/v1/execute", json=PERMIT, headers={**tenant.auth, **extra})


ERROR_CASES: dict[str, tuple[int, Case]] = {
    "missing-surface": (400, _post({"actor": "release-bot"})),
    "malformed-surface": (400, _post({"surface": "Deploy"})),
    "wrong-field-type": (400, _post({**PERMIT, "context": "main"})),
    "disagreeing-aliases": (400, _post({**PERMIT, "surface_id": "payments.transfer"})),
    "two-idempotency-keys": (400, _post({**PERMIT, "request_id": "a", "idempotency_key": "b"})),
    "not-json": (400, _post(content=b"surface=deploy.production")),
    "json-array": (400, _post(["deploy.production"])),
    "empty-body": (400, _post(content=b"")),
    "missing-key": (401, _post(PERMIT, auth=False)),
    "revoked-key": (401, _revoked),
    "surface-outside-key-patterns": (403, _forbidden),
    "role-without-execute": (403, _auditor),
    "unknown-surface": (404, _post({"surface": "pay.out"})),
    "idempotency-conflict": (409, _conflict),
    "body-over-64-kib": (413, _post({**PERMIT, "payload": {"blob": "x" * 70_000}})),
}


@pytest.mark.parametrize("profile", ["a", "b"])
@pytest.mark.parametrize("case", list(ERROR_CASES))
async def test_error_answer_matches_the_documented_schema_for_its_status(
    client: httpx.AsyncClient, tenant: Tenant, case: str, profile: str
) -> None:
    status, send = ERROR_CASES[case]
    extra = {"Prefer": "wire=b"} if profile == "b" else {}
    response = await send(client, tenant, extra)
    assert response.status_code == status, response.text
    assert_documented(response, "/v1/execute")
    body = response.json()
    nested = isinstance(body["error"], dict)
    assert nested is (profile == "b")
    assert response.headers["x-request-id"] == (body["error"] if nested else body)["request_id"]


async def test_org_on_profile_b_gets_nested_errors_as_documented(client: httpx.AsyncClient) -> None:
    tenant = await contract_tenant(client, wire_profile="b")
    response = await client.post("/v1/execute", json={"actor": "x"}, headers=tenant.auth)
    assert response.status_code == 400
    assert not schema_errors(component("NestedError"), response.json())
    assert_documented(response, "/v1/execute")


@pytest.mark.parametrize("plans", [small_plans(free_executes=1)], ids=["free1"])
async def test_exhausted_quota_answer_matches_the_documented_429(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 200
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 429
    assert response.json()["error"] == "SERVICE_PLAN_LIMIT_EXCEEDED"
    assert_documented(response, "/v1/execute")


@pytest.mark.parametrize("plans", [small_plans(per_minute=1)], ids=["1/min"])
async def test_rate_limited_answer_matches_the_documented_429(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    response = await client.post(
        "/v1/execute", json=PERMIT, headers={**tenant.auth, "Prefer": "wire=b"}
    )
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert_documented(response, "/v1/execute")


class TestUnreachableRateLimiter:
    @pytest.fixture
    def redis_url(self) -> str:
        with socket.socket() as probe:  # a port nobody listens on once the probe closes
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def test_unavailable_limiter_answer_matches_the_documented_503(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
        assert response.status_code == 503
        assert_documented(response, "/v1/execute")


async def test_wrong_method_answer_matches_the_documented_405(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/execute")
    assert response.status_code == 405
    assert "get" not in SPEC["paths"]["/v1/execute"]
    assert not schema_errors(
        "/components/responses/MethodNotAllowed/content/application~1json/schema", response.json()
    )
    assert "allow" in response.headers


@pytest.mark.parametrize("path", ["/v1/execute", "/protocol/verify-receipt"])
async def test_deeply_nested_json_is_400_not_500(
    client: httpx.AsyncClient, tenant: Tenant, path: str
) -> None:
    body = b'{"surface": "deploy.production", "payload": {"x": ' + b"[" * 1000 + b"]" * 1000 + b"}}"
    headers = {**tenant.auth, "Content-Type": "application/json"}
    response = await client.post(path, content=body, headers=headers)
    assert response.status_code == 400


async def test_surface_with_a_trailing_newline_is_400(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {**PERMIT, "surface": "deploy.production\n"}
    response = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert response.status_code == 400


# ---- keys, protocol, operations ---------------------------------------------------------


async def test_service_keys_answer_matches_its_schema(client: httpx.AsyncClient) -> None:
    response = await client.get("/.well-known/service-keys.json")
    assert_documented(response, "/.well-known/service-keys.json", "get")


async def test_jwks_answer_matches_its_schema(client: httpx.AsyncClient) -> None:
    response = await client.get("/.well-known/jwks.json")
    assert_documented(response, "/.well-known/jwks.json", "get")


async def test_key_lists_after_rotation_and_revocation_match_their_schemas(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    now = datetime.now(UTC)
    (old,) = runtime.keyring.records
    runtime.signing_keys.rotate(
        generate_signing_key(runtime.secret, now),
        now + ROTATION_OVERLAP,
        actor="openapi-test",
        now=now,
    )
    runtime.signing_keys.insert_key(generate_signing_key(runtime.secret, now))
    runtime.signing_keys.revoke(old.key_id, now, actor="openapi-test")
    runtime.keyring.refresh(datetime.now(UTC))
    keys = await client.get("/.well-known/service-keys.json")
    assert {k["status"] for k in keys.json()["keys"]} >= {"revoked", "active"}
    assert_documented(keys, "/.well-known/service-keys.json", "get")
    assert_documented(await client.get("/.well-known/jwks.json"), "/.well-known/jwks.json", "get")


@pytest.fixture
async def receipt(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, Any]:
    body: dict[str, Any] = (
        await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    ).json()
    return body


@pytest.mark.parametrize("path", ["/protocol/verify-receipt", "/protocol/verify-signature"])
@pytest.mark.parametrize("form", ["bare", "wrapped", "tampered", "garbage"])
async def test_protocol_answers_match_their_schemas(
    client: httpx.AsyncClient, receipt: dict[str, Any], path: str, form: str
) -> None:
    body: Any = {
        "bare": receipt,
        "wrapped": {"receipt": receipt},
        "tampered": {**receipt, "decision": "BLOCK", "actor": "mallory"},
        "garbage": [1, None],
    }[form]
    response = await client.post(path, json=body)
    assert response.status_code == 200
    assert response.json()["valid"] is (form in ("bare", "wrapped"))
    assert_documented(response, path)


@pytest.mark.parametrize("path", ["/protocol/verify-receipt", "/protocol/verify-signature"])
@pytest.mark.parametrize("content", [b"", b"not json", b"x" * 70_000])
async def test_protocol_refusals_match_their_schemas(
    client: httpx.AsyncClient, path: str, content: bytes
) -> None:
    headers = {"Prefer": "wire=b", "Content-Type": "application/json"}
    response = await client.post(path, content=content, headers=headers)
    assert response.status_code in (400, 413)
    assert_documented(response, path)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_operations_answers_match_their_schemas(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert_documented(response, path, "get")


# ---- console ----------------------------------------------------------------------------


async def test_console_org_answers_match_their_schemas(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    org_path = f"/console/v1/orgs/{tenant.org_id}"
    created = await client.post("/console/v1/orgs", json={"name": "Beta"}, headers=ADMIN)
    assert_documented(created, "/console/v1/orgs")
    assert_documented(
        await client.get("/console/v1/orgs", headers=ADMIN), "/console/v1/orgs", "get"
    )
    template = "/console/v1/orgs/{org_id}"
    assert_documented(await client.get(org_path, headers=ADMIN), template, "get")
    patched = await client.patch(org_path, json={"disabled": True}, headers=ADMIN)
    assert_documented(patched, template, "patch")
    missing = await client.get("/console/v1/orgs/org_" + "0" * 26, headers=ADMIN)
    assert_documented(missing, template, "get")
    assert_documented(await client.get("/console/v1/orgs"), "/console/v1/orgs", "get")


async def test_console_key_answers_match_their_schemas(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    keys_path = f"/console/v1/orgs/{tenant.org_id}/keys"
    template = "/console/v1/orgs/{org_id}/keys"
    issued = await client.post(
        keys_path, json={"name": "ci", "surfaces": ["deploy.*"]}, headers=ADMIN
    )
    assert_documented(issued, template)
    assert_documented(await client.get(keys_path, headers=ADMIN), template, "get")
    revoked = await client.delete(f"{keys_path}/{issued.json()['key_id']}", headers=ADMIN)
    assert_documented(revoked, template + "/{key_id}", "delete")
    refused = await client.post(keys_path, json={"name": "x", "role": "root"}, headers=ADMIN)
    assert_documented(refused, template)


async def test_console_policy_answers_match_their_schemas(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    base = f"/console/v1/orgs/{tenant.org_id}/policies"
    template = "/console/v1/orgs/{org_id}/policies"
    published = await client.put(f"{base}/other", content=POLICY, headers=ADMIN)
    assert_documented(published, template + "/{policy_id}", "put")
    assert_documented(await client.get(base, headers=ADMIN), template, "get")
    shown = await client.get(f"{base}/other?version=1", headers=ADMIN)
    assert_documented(shown, template + "/{policy_id}", "get")
    invalid = await client.put(f"{base}/bad", content="surfaces: 7", headers=ADMIN)
    assert_documented(invalid, template + "/{policy_id}", "put")


# ---- any input (hypothesis) ---------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
surfaces = st.sampled_from(
    ["deploy.production", "payments.transfer", "pay.out", "Deploy.x", "", "deploy"]
) | st.from_regex(r"[a-z0-9_-]{1,8}(\.[a-z0-9_-]{1,8}){1,3}", fullmatch=True)
names = st.sampled_from(["release-bot", "", "x" * 257]) | st.text(max_size=12)
field_values: dict[str, st.SearchStrategy[Any]] = {
    "surface": surfaces | json_values,
    "surface_id": surfaces | json_values,
    "action": names | json_values,
    "actor": names | json_values,
    "actorId": names | json_values,
    "metadata": st.dictionaries(st.sampled_from(["branch", "ticket"]), json_values) | json_values,
    "context": st.dictionaries(st.sampled_from(["branch", "ticket"]), json_values) | json_values,
    "payload": st.dictionaries(st.sampled_from(["amount", "currency"]), json_values) | json_values,
    "request_id": names | json_values,
    "idempotency_key": names | json_values,
}
execute_like = st.fixed_dictionaries({}, optional=field_values)
# Mostly well-typed requests on governed surfaces, so that decisions, replays and 409s occur.
plausible = st.fixed_dictionaries(
    {"surface": st.sampled_from(["deploy.production", "payments.transfer"])},
    optional={
        "actor": st.sampled_from(["release-bot", "intern"]),
        "action": st.sampled_from(["rollout", "transfer"]),
        "context": st.fixed_dictionaries({}, optional={"branch": st.sampled_from(["main", "dev"])}),
        "payload": st.fixed_dictionaries({}, optional={"amount": st.integers(-5, 500)}),
        "request_id": st.sampled_from(["k-1", "k-2", "k-3"]),
    },
)
request_bodies = st.one_of(
    plausible.map(lambda body: json.dumps(body).encode()),
    execute_like.map(lambda body: json.dumps(body).encode()),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=64),
)


# anyio's pytest plugin runs every @given example on the event loop that set up the async
# fixtures, so one app, client and tenant serve all examples of one test run.
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(content=request_bodies, profile_b=st.booleans())
async def test_any_body_gets_a_documented_status_and_body_never_a_5xx(
    client: httpx.AsyncClient, tenant: Tenant, content: bytes, profile_b: bool
) -> None:
    headers = {**tenant.auth, "Content-Type": "application/json"}
    headers.update({"Prefer": "wire=b"} if profile_b else {})
    response = await client.post("/v1/execute", content=content, headers=headers)
    event(f"status {response.status_code}")
    assert response.status_code < 500, response.text
    assert_documented(response, "/v1/execute")
    try:
        decoded = json.loads(content)
    except ValueError:
        return
    request_schema = f"{operation_pointer('/v1/execute', 'post')}/requestBody"
    pointer, _ = follow(request_schema)
    if schema_errors(f"{pointer}/content/application~1json/schema", decoded):
        # The request schema is never stricter than the gateway: what it refuses is a 400.
        assert response.status_code == 400, response.text
