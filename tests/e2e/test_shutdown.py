"""SIGTERM drains: a request in flight when ``execauth serve`` is told to stop is answered.

A real ``execauth serve`` (one process, and ``--workers 2`` with its writer process): a
client sends an execute's head and half its body, the service gets SIGTERM, then the
client sends the rest. The answer must be the receipt, stored, and the service must
then exit cleanly: what a rolling restart behind a load balancer relies on.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import sqlite3
import time
from pathlib import Path

import pytest

from tests.serving import clean_env, free_port, provision_org, spawn_service

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "service_admin_" + secrets.token_urlsafe(32)
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


def _stored(database: Path) -> int:
    with sqlite3.connect(database) as conn:
        (count,) = conn.execute("SELECT count(*) FROM executions").fetchone()
    return int(count)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_request_in_flight_at_sigterm_is_answered_and_stored(
    tmp_path: Path, workers: int
) -> None:
    port = free_port()
    database = tmp_path / "execauth.db"
    env = clean_env(
        EXECAUTH_DATABASE_URL=f"sqlite:///{database}",
        EXECAUTH_SECRET_KEY=secrets.token_urlsafe(32),
        EXECAUTH_ADMIN_TOKEN=ADMIN_TOKEN,
        EXECAUTH_ISSUER=f"http://127.0.0.1:{port}",
    )
    process = spawn_service(env, tmp_path, port, workers=workers)
    try:
        _, _, secret = provision_org(f"http://127.0.0.1:{port}", ADMIN_TOKEN)
        body = json.dumps(PERMIT).encode()
        head = (
            f"POST /v1/execute HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {secret}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head + body[:10])
            time.sleep(0.5)  # the head is parsed: this request is in flight
            process.send_signal(signal.SIGTERM)
            time.sleep(1.0)  # the service is stopping now
            sock.sendall(body[10:])
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        receipt = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert receipt["decision"] == "PERMIT"
        # uvicorn re-raises SIGTERM after its graceful shutdown (one process); the
        # supervisor of --workers exits 0. Either way: after the drain, not during it.
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
        assert _stored(database) == 1  # acknowledged, so stored
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=20)
