"""A real ``execauth serve`` for CLI tests that talk to the service over HTTP."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.serving import clean_env, free_port, running_service


@dataclass(frozen=True)
class RunningService:
    """Where the service listens and the environment a CLI needs to administer it."""

    url: str
    admin_token: str
    workdir: Path

    @property
    def cli_env(self) -> dict[str, str]:
        return {"EXECAUTH_URL": self.url, "EXECAUTH_ADMIN_TOKEN": self.admin_token}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """One ``execauth serve`` per module: temp SQLite file, a known admin token."""
    workdir = tmp_path_factory.mktemp("serve")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token = "service_admin_" + secrets.token_urlsafe(32)
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_ISSUER=url,
        EXECAUTH_ADMIN_TOKEN=token,
    )
    with running_service(env, workdir, port):
        yield RunningService(url, token, workdir)
