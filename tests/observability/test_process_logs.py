"""Process logs and names (issue 20, item 1), on a real ``execauth serve``: every line it writes is
a JSON object, each execute has its decision line, and ``ps`` names each process's role."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from tests.serving import clean_env, free_port, provision_org, spawn_service

ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
REQUESTS = 6
PROCESS_FIELDS = {"time", "level", "logger", "process", "pid", "message"}


@dataclass
class Served:
    log: Path  # stdout and stderr, interleaved as the process wrote them
    titles: list[str]  # what ps showed for each process of the serve, while serving
    secret: str
    receipt_ids: list[str]


def env_for(workdir: Path, **settings: str) -> dict[str, str]:
    return clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{workdir / 'execauth.db'}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        **settings,
    )


def session_titles(session: int) -> list[str]:
    """What ``ps`` shows for every process of ``session`` (the serve started its own)."""
    shown = subprocess.run(
        ["ps", "-o", "args=", "--sid", str(session)], capture_output=True, text=True, check=True
    )
    return [line.strip() for line in shown.stdout.splitlines()]


def serve_and_execute(workdir: Path, workers: int, **settings: str) -> Served:
    port = free_port()
    process = spawn_service(env_for(workdir, **settings), workdir, port, workers=workers)
    url = f"http://127.0.0.1:{port}"
    try:
        _, _, secret = provision_org(url, ADMIN_TOKEN)
        receipt_ids = []
        for number in range(REQUESTS):
            response = httpx.post(
                f"{url}/v1/execute",
                json={"surface": "deploy.staging", "payload": {"amount": number}},
                headers={"Authorization": f"Bearer {secret}"},
                timeout=30,
            )
            assert response.status_code == 200, response.text
            receipt_ids.append(response.json()["receipt_id"])
        refused = httpx.post(f"{url}/v1/execute", json={"surface": "deploy.staging"}, timeout=30)
        assert refused.status_code == 401
        titles = session_titles(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=60)
    return Served(workdir / "serve.log", titles, secret, receipt_ids)


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of ``path`` decoded; a line that is not a JSON object fails the test."""
    decoded = []
    for line in path.read_text().splitlines():
        value = msgspec.json.decode(line)
        assert isinstance(value, dict), line
        decoded.append(value)
    return decoded


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Served:
    """One serve for the module's checks: starting one takes seconds on a loaded machine."""
    return serve_and_execute(tmp_path_factory.mktemp("two-workers"), workers=2)


def test_every_line_of_a_two_worker_serve_is_a_json_object(two_workers: Served) -> None:
    lines = json_lines(two_workers.log)
    process_lines = [line for line in lines if line["logger"] != "execauth.decisions"]
    assert process_lines
    assert all(set(line) >= PROCESS_FIELDS for line in process_lines)


def test_uvicorn_and_the_writer_log_through_the_same_json(two_workers: Served) -> None:
    lines = json_lines(two_workers.log)
    loggers = {(line["logger"], line["process"]) for line in lines}
    assert ("uvicorn.error", "supervisor") in loggers
    assert ("uvicorn.error", "gateway 1/2") in loggers
    assert ("execauth.writer", "writer") in loggers


def test_each_execute_has_one_decision_line_and_the_refusal_its_own(two_workers: Served) -> None:
    lines = [line for line in json_lines(two_workers.log) if line["logger"] == "execauth.decisions"]
    decisions = [line for line in lines if line["event"] == "decision"]
    assert sorted(line["receipt_id"] for line in decisions) == sorted(two_workers.receipt_ids)
    assert [(line["event"], line["status"]) for line in lines if line["event"] != "decision"] == [
        ("refusal", 401)
    ]
    assert {line["process"] for line in decisions} <= {"gateway 1/2", "gateway 2/2"}


def test_the_api_key_secret_is_in_no_line(two_workers: Served) -> None:
    assert two_workers.secret not in two_workers.log.read_text()


def test_ps_names_the_supervisor_the_writer_and_each_gateway(two_workers: Served) -> None:
    titles = two_workers.titles
    expected = {"execauth: supervisor", "execauth: writer"}
    expected |= {"execauth: gateway 1/2", "execauth: gateway 2/2"}
    assert expected <= set(titles)
    assert not [title for title in titles if "multiprocessing.spawn" in title]


def test_one_process_is_named_server_and_writes_decisions_to_a_file(tmp_path: Path) -> None:
    decisions = tmp_path / "decisions.jsonl"
    served = serve_and_execute(tmp_path, workers=1, EXECAUTH_DECISION_LOG=str(decisions))
    assert "execauth: server" in served.titles
    in_file = json_lines(decisions)
    assert [line["receipt_id"] for line in in_file if line["event"] == "decision"] == (
        served.receipt_ids
    )
    assert all(line["logger"] != "execauth.decisions" for line in json_lines(served.log))
