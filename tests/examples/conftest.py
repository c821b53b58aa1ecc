"""The examples in examples/ against a real ``execauth serve`` (the CLI tests' server)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx

from tests.cli.conftest import RunningService, service

__all__ = ["EXAMPLES", "example_env", "provision", "service"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def provision(service: RunningService, policy_file: str) -> str:
    """A new organization with ``examples/policies/<policy_file>``; its execute key."""
    admin = {"Authorization": f"Bearer {service.admin_token}"}
    org = httpx.post(f"{service.url}/console/v1/orgs", json={"name": "Examples"}, headers=admin)
    org_id = org.json()["org_id"]
    key = httpx.post(
        f"{service.url}/console/v1/orgs/{org_id}/keys", json={"name": "ex"}, headers=admin
    )
    policy_id = policy_file.removesuffix(".yaml")
    published = httpx.put(
        f"{service.url}/console/v1/orgs/{org_id}/policies/{policy_id}",
        content=(EXAMPLES / "policies" / policy_file).read_bytes(),
        headers=admin,
    )
    assert published.status_code == 201, published.text
    api_key: str = key.json()["api_key"]
    return api_key


def example_env(service: RunningService, api_key: str, **extra: str) -> dict[str, str]:
    """What a user's shell has: no stray EXECAUTH_*, execauth on PATH, the service, a key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | {"EXECAUTH_URL": service.url, "EXECAUTH_API_KEY": api_key} | extra
