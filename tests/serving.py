"""Start real ``execauth serve`` processes for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

EXECAUTH = str(Path(sys.executable).parent / "execauth")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without any EXECAUTH_* leaking in, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECAUTH_")}
    return env | settings


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def running_service(
    env: Mapping[str, str], workdir: Path, port: int, *, log_name: str = "serve.log"
) -> Iterator[str]:
    """``execauth serve --port PORT`` until the block ends; yields its URL once ready."""
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / log_name
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [EXECAUTH, "serve", "--port", str(port)], env=dict(env), cwd=workdir, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not ready(url):
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("execauth serve did not become ready:\n" + log_path.read_text())
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=20)
