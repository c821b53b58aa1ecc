"""openapi.yaml describes every route the service serves, and nothing else.

The app is walked route by route (all surfaces, the HTML pages included: see
docs/decisions.md, "openapi.yaml describes every route"); a route missing from the
document, or a documented operation that no route serves, fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.routing import BaseRoute, Mount, Route

from execauth.api.app import SURFACES, create_app
from execauth.serving.runtime import Runtime
from tests.conftest import Database

SPEC: dict[str, Any] = yaml.safe_load(files("execauth.api").joinpath("openapi.yaml").read_bytes())
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "options", "trace"}
# Starlette writes a typed parameter as {name:convertor}; OpenAPI knows only {name}.
CONVERTOR = re.compile(r"\{([^}:]+):[^}]+\}")

Operation = tuple[str, str]


@pytest.fixture
def database(tmp_path: Path) -> Database:
    """Routes do not depend on the backend: SQLite only."""
    return Database(f"sqlite:///{tmp_path / 'execauth.db'}", None)


def served_operations(routes: Iterable[BaseRoute], prefix: str = "") -> set[Operation]:
    """(path template, method) of every route, descending into mounted routers."""
    found: set[Operation] = set()
    for route in routes:
        if isinstance(route, Mount):
            found |= served_operations(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            path = CONVERTOR.sub(r"{\1}", prefix + route.path)
            # Starlette answers HEAD for every GET route by itself.
            found |= {(path, m.lower()) for m in route.methods or () if m != "HEAD"}
        else:
            raise AssertionError(f"a route of a kind this test cannot read: {route!r}")
    return found


def documented_operations() -> set[Operation]:
    return {(path, m) for path, item in SPEC["paths"].items() for m in item if m in HTTP_METHODS}


def _listing(operations: set[Operation]) -> str:
    return "\n".join(f"  {method.upper()} {path}" for path, method in sorted(operations))


def test_every_served_route_is_documented(runtime: Runtime) -> None:
    served = served_operations(create_app(runtime, surfaces=SURFACES).routes)
    missing = served - documented_operations()
    assert not missing, "served but not in openapi.yaml:\n" + _listing(missing)


def test_every_documented_operation_is_served(runtime: Runtime) -> None:
    served = served_operations(create_app(runtime, surfaces=SURFACES).routes)
    extra = documented_operations() - served
    assert not extra, "in openapi.yaml but served by no route:\n" + _listing(extra)


@pytest.mark.parametrize("surface", SURFACES)
def test_each_listener_serves_only_documented_routes(runtime: Runtime, surface: str) -> None:
    # A listener with one surface (`serve --surfaces`) adds no route of its own.
    served = served_operations(create_app(runtime, surfaces=(surface,)).routes)
    assert served <= documented_operations()


def test_the_walk_sees_routes_inside_a_mount() -> None:
    mounted = Mount("/api", routes=[Route("/things/{id:int}", lambda r: None, methods=["GET"])])
    assert served_operations([mounted]) == {("/api/things/{id}", "get")}


def test_every_operation_has_a_unique_operation_id() -> None:
    ids = [
        op["operationId"]
        for item in SPEC["paths"].values()
        for method, op in item.items()
        if method in HTTP_METHODS
    ]
    assert len(ids) == len(set(ids))
    assert all(ids)
