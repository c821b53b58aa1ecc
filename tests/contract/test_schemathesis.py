"""Schemathesis against the whole openapi.yaml, in process, with valid credentials per surface.

Every operation of the served document is called with generated requests, valid and
invalid (`generation.mode = all`), and every built-in check is on: no 5xx, statuses,
content types, headers and bodies as documented, invalid input refused with a 4xx,
credentials actually required. The run is bounded (a fixed seed, a small example budget
per operation) so that ``make test`` affords it; ``make fuzz`` runs the same test with
``EXECAUTH_FUZZ_EXAMPLES`` raised. See docs/decisions.md, "A fuzzer in make test".
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
import yaml
from schemathesis import GenerationMode
from schemathesis.config._auth import OpenAPIAuthConfig
from schemathesis.python import asgi
from schemathesis.python.asgi import Message, Receive, Scope, Send
from starlette.applications import Starlette

from execauth.api.app import create_app
from execauth.config import Settings
from execauth.serving.runtime import Runtime, bootstrap
from tests.conftest import ADMIN_TOKEN, DEPLOY_POLICY, small_plans

Case = schemathesis.Case[Any]
# The bounded run of `make test`; `make fuzz` raises the budget (docs/decisions.md).
EXAMPLES = int(os.environ.get("EXECAUTH_FUZZ_EXAMPLES", "12"))
SEED = int(os.environ.get("EXECAUTH_FUZZ_SEED", "20261124"))
HUGE = 10**9  # no quota or rate limit gets in the fuzzer's way
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')
LOGIN_CSRF_COOKIE = "execauth_login_csrf"
SESSION_COOKIE = "execauth_console"

CONFIG = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "generation": {
            "mode": "all",
            "max-examples": EXAMPLES,
            "deterministic": True,
            "database": "none",
            # Unknown query parameters and headers are ignored by design, as unknown JSON
            # fields of an execute request are (docs/decisions.md).
            "allow-extra-parameters": False,
        },
        "checks": {
            # A schema-valid request can still be refused for what JSON Schema cannot say:
            # from <= to <= the log's size, since < until, a policy that does not compile,
            # an unknown plan, an expiry in the past (docs/decisions.md).
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]
            },
        },
        "operations": [
            {
                # GET /console/policies/{policy_id} also serves these paths (a policy may be
                # named "preview"), so their truthful Allow lists GET, which the document
                # cannot say for a path it gives to POST alone.
                "include-path": path,
                "checks": {"allow_header_conformance": {"enabled": False}},
            }
            for path in ("/console/policies/preview", "/console/policies/publish")
        ]
        + [
            {
                # A page asked for without a session redirects to the sign-in page (303),
                # as a browser needs; a form posted without one is 401.
                "include-tag": "web",
                "checks": {
                    "negative_data_rejection": {
                        "expected-statuses": [
                            "303",
                            "400",
                            "401",
                            "403",
                            "404",
                            "405",
                            "406",
                            "409",
                            "413",
                            "415",
                            "422",
                            "429",
                        ]
                    }
                },
            }
        ],
    }
)


class CountingApp:
    """The app, counting the requests it answers and its 5xx (for ``make fuzz``'s summary)."""

    def __init__(self, app: Starlette) -> None:
        self.app: Callable[..., Awaitable[None]] = app
        self.requests = 0
        self.server_errors = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.requests += 1

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 500:
                self.server_errors += 1
            await send(message)

        await self.app(scope, receive, counting_send)


@dataclass
class Fixtures:
    """What the fuzzer's requests point at, and the credentials of each surface."""

    app: CountingApp
    client: requests.Session
    org_id: str
    spare_org_id: str  # PATCH may disable it; the main org stays usable
    execute_key: str
    admin_key: str
    victim_key_id: str  # rotations and revocations land on it, never on a key in use
    execution_id: str
    receipt_id: str
    session: dict[str, str] = field(default_factory=dict)
    csrf: str = ""


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


ADMIN = _bearer(ADMIN_TOKEN)


def _created(response: requests.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


def sign_in(client: requests.Session, api_key: str) -> tuple[dict[str, str], str]:
    """A console session for ``api_key``: its cookie and its CSRF token."""
    client.cookies.clear()
    form = client.get("/console/login")
    match = CSRF_INPUT.search(form.text)
    assert match, form.text
    login_csrf = form.cookies.get(LOGIN_CSRF_COOKIE) or client.cookies.get(LOGIN_CSRF_COOKIE)
    signed_in = client.post(
        "/console/login",
        data={"api_key": api_key, "csrf_token": match.group(1)},
        cookies={LOGIN_CSRF_COOKIE: login_csrf or ""},
        allow_redirects=False,
    )
    assert signed_in.status_code == 303, signed_in.text
    cookie = {SESSION_COOKIE: str(signed_in.cookies[SESSION_COOKIE])}
    client.cookies.clear()
    page = client.get("/console/keys", cookies=cookie)
    csrf = CSRF_INPUT.search(page.text)
    assert csrf, page.text
    return cookie, csrf.group(1)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixtures]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    settings = Settings(
        database_url=f"sqlite:///{tmp / 'execauth.db'}",
        secret_key="test-secret-" + "s" * 32,
        admin_token=ADMIN_TOKEN,
        issuer=BASE_URL,
        secret_key_file=tmp / "unused.key",
        plans=small_plans(free_executes=HUGE, per_minute=HUGE),
        sequencer_interval_seconds=0.05,
    )
    runtime: Runtime = bootstrap(settings)
    app = CountingApp(create_app(runtime))
    client = asgi.get_client(app)
    with client:
        org = _created(client.post("/console/v1/orgs", json={"name": "Fuzz"}, headers=ADMIN))
        spare = _created(client.post("/console/v1/orgs", json={"name": "Spare"}, headers=ADMIN))
        keys = f"/console/v1/orgs/{org['org_id']}/keys"

        def issue(role: str) -> dict[str, Any]:
            return _created(client.post(keys, json={"name": role, "role": role}, headers=ADMIN))

        execute, admin, victim = (issue(role) for role in ("execute", "admin", "execute"))
        policy = client.put(
            f"/console/v1/orgs/{org['org_id']}/policies/deploys",
            data=DEPLOY_POLICY,
            headers=ADMIN,
        )
        assert policy.status_code == 201, policy.text
        receipt = _created(
            client.post(
                "/v1/execute",
                json={"surface": "deploy.production", "context": {"branch": "main"}},
                headers=_bearer(execute["api_key"]),
            )
        )
        found = Fixtures(
            app=app,
            client=client,
            org_id=org["org_id"],
            spare_org_id=spare["org_id"],
            execute_key=execute["api_key"],
            admin_key=admin["api_key"],
            victim_key_id=victim["key_id"],
            execution_id=receipt["execution_id"],
            receipt_id=receipt["receipt_id"],
        )
        found.session, found.csrf = sign_in(client, found.admin_key)
        # Schemathesis applies these per security scheme, and knows to leave them out or
        # spoil them when it tests that credentials are required (ignored_auth).
        schema.config.auth.openapi = OpenAPIAuthConfig(
            schemes={
                "adminToken": {"bearer": ADMIN_TOKEN},
                "bearerAuth": {"bearer": found.execute_key},
                # admin may do all an auditor may; auditors' refusals: tests/operator.
                "operatorKey": {"bearer": found.admin_key},
                "consoleSession": {"api_key": found.session[SESSION_COOKIE]},
            }
        )
        yield found
    asgi.shutdown_lifespans()
    runtime.stop()
    if report := os.environ.get("EXECAUTH_FUZZ_REPORT"):
        summary = {
            "examples_per_operation": EXAMPLES,
            "seed": SEED,
            "requests": app.requests,
            "server_errors": app.server_errors,
        }
        Path(report).write_text(json.dumps(summary) + "\n")


# The packaged document, which GET /openapi.yaml serves byte for byte (test_openapi.py).
# Loaded at import so that each operation is its own test; requests go to the app
# in process through the fixture's ASGI session.
schema = schemathesis.openapi.from_dict(
    yaml.safe_load(files("execauth.api").joinpath("openapi.yaml").read_bytes()), config=CONFIG
)
# Schemathesis's in-process client addresses the app as http://testserver.
BASE_URL = "http://testserver"


def prepare(case: Case, fx: Fixtures) -> None:
    """Point a positive case at real resources, and give console forms the session's token."""
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return
    path = case.path_parameters or {}
    replacements = {
        # PATCH may disable the org it names: the spare one, so the main org stays usable.
        "org_id": fx.spare_org_id if case.method.upper() == "PATCH" else fx.org_id,
        "key_id": fx.victim_key_id,
        "execution_id": fx.execution_id,
        "receipt_id": fx.receipt_id,
    }
    for name, value in replacements.items():
        if name in path:
            path[name] = value
    # Signing out would end the session every other console case uses: its form goes
    # without the token (403).
    if isinstance(case.body, dict) and "csrf_token" in case.body and case.path != "/console/logout":
        case.body["csrf_token"] = fx.csrf


@schema.parametrize()
def test_every_documented_operation_holds_to_its_contract_under_generated_requests(
    case: Case, fixtures: Fixtures
) -> None:
    # parametrize() cloned the schema before the app existed: bind the clone to it, so that
    # every request, the checks' own included, goes to the app in process.
    case.operation.schema.app = case.operation.app = fixtures.app
    prepare(case, fixtures)
    case.call_and_validate(base_url=BASE_URL)
