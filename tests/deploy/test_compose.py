"""deploy/compose: valid against the Compose Specification, and every reference resolves.

Compose cannot run here (no container runtime), so the file is checked against the
Compose Specification's JSON schema (``compose-spec.json`` beside this file, from the
compose-spec repository at commit 170098b, Apache-2.0) and read for what docs/deploy.md
promises; its HAProxy configuration is checked by HAProxy itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.tls import self_signed_pem

REPOSITORY = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPOSITORY / "deploy" / "compose"
COMPOSE: dict[str, Any] = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
GATEWAYS = ["gateway1", "gateway2"]
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((Path(__file__).parent / "compose-spec.json").read_text())
    # The schema names draft 7 by a URL jsonschema does not know (no trailing '#').
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(COMPOSE)


def test_it_runs_postgres_redis_a_migration_two_gateways_and_a_load_balancer() -> None:
    assert sorted(SERVICES) == ["gateway1", "gateway2", "lb", "migrate", "postgres", "redis"]


def test_every_dependency_is_a_service() -> None:
    for name, service in SERVICES.items():
        assert set(service.get("depends_on", {})) <= set(SERVICES), name


def test_every_secret_volume_and_network_used_is_declared() -> None:
    for name, service in SERVICES.items():
        assert set(service.get("secrets", [])) <= set(COMPOSE["secrets"]), name
        assert set(service.get("networks", [])) <= set(COMPOSE["networks"]), name
        named = {v.split(":")[0] for v in service.get("volumes", []) if not v.startswith(".")}
        assert named <= set(COMPOSE.get("volumes", {})), name


def test_files_it_mounts_or_builds_from_exist_or_are_made_by_its_readme() -> None:
    readme = (COMPOSE_DIR / "README.md").read_text()
    for service in SERVICES.values():
        if "build" in service:
            context = COMPOSE_DIR / service["build"]["context"]
            assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file()
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                made = source.removeprefix("./").split("/")[0] in ("certs", "secrets")
                assert (COMPOSE_DIR / source).exists() or (made and source[2:] in readme), source
    for secret in COMPOSE["secrets"].values():
        assert secret["file"].removeprefix("./") in readme


def test_the_gateways_start_only_after_the_migration_succeeded_and_never_migrate() -> None:
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    for name in GATEWAYS:
        gateway = SERVICES[name]
        assert gateway["command"] == ["serve"]
        condition = gateway["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"
        assert gateway["environment"]["EXECAUTH_MIGRATE_ON_START"] == "false"


def test_the_gateways_run_read_only_as_non_root_with_their_secrets_as_files() -> None:
    for name in [*GATEWAYS, "migrate"]:
        service = SERVICES[name]
        assert service["read_only"] is True
        assert service["user"].split(":")[0] != "0"
        assert service["tmpfs"] == ["/tmp"]
        assert service["environment"]["EXECAUTH_SECRETS_DIR"] == "/run/secrets"
        assert {"EXECAUTH_ADMIN_TOKEN", "EXECAUTH_SECRET_KEY", "EXECAUTH_DATABASE_URL"} <= set(
            service["secrets"]
        )
        assert not any(key in service["environment"] for key in service["secrets"])


def test_only_the_load_balancer_publishes_a_port() -> None:
    assert [name for name, service in SERVICES.items() if "ports" in service] == ["lb"]


def test_the_load_balancer_sends_to_each_gateway() -> None:
    environment = SERVICES["lb"]["environment"]
    targets = sorted(v for k, v in environment.items() if k.startswith("EXECAUTH_GATEWAY_"))
    assert targets == [f"{name}:8080" for name in GATEWAYS]


def test_its_haproxy_config_is_the_shipped_one_but_for_the_servers() -> None:
    def before_backend(path: Path) -> str:
        text = path.read_text()
        return text[text.index("\nglobal") : text.index("\nbackend")]

    shipped = REPOSITORY / "deploy" / "haproxy" / "haproxy.cfg"
    assert before_backend(COMPOSE_DIR / "haproxy.cfg") == before_backend(shipped)


@pytest.mark.parametrize(
    "config", [COMPOSE_DIR / "haproxy.cfg", REPOSITORY / "deploy" / "haproxy" / "haproxy.cfg"]
)
def test_haproxy_accepts_the_config(config: Path, tmp_path: Path) -> None:
    if HAPROXY is None:
        pytest.skip("HAProxy is not installed (`make test` installs Debian's haproxy)")
    _, pem = self_signed_pem(tmp_path)
    env = os.environ | {
        "EXECAUTH_LB_BIND": "127.0.0.1:8443",
        "EXECAUTH_LB_CERT": str(pem),
        **{f"EXECAUTH_GATEWAY_{i}": f"127.0.0.1:{8080 + i}" for i in (1, 2, 3)},
    }
    checked = subprocess.run(
        [HAPROXY, "-c", "-f", str(config)], env=env, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
