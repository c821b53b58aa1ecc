"""``bench/run.py`` records how many of the client's connections each server process held.

wrk keeps its connections for a whole run and uvicorn's workers accept them from one
shared socket, so the split is how the gateways shared the load
(``server_connections_by_process``, docs/performance.md). These tests count real
sockets of this process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.module_files import load_module_file

BENCH = Path(__file__).parents[1] / "bench"


@pytest.fixture(scope="module")
def bench_run() -> ModuleType:
    return load_module_file("bench_run", BENCH / "run.py")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def _port(server: socket.socket) -> int:
    port: int = server.getsockname()[1]
    return port


def test_an_accepted_connection_counts_for_the_process_holding_it(
    bench_run: ModuleType, listener: socket.socket
) -> None:
    with socket.create_connection(listener.getsockname()):
        accepted, _ = listener.accept()
        with accepted:
            counts = bench_run.connections_by_process(os.getpid(), _port(listener))
    assert list(counts.values()) == [1]  # the accepted side; not the client's end


def test_a_listening_socket_alone_counts_nothing(
    bench_run: ModuleType, listener: socket.socket
) -> None:
    assert bench_run.connections_by_process(os.getpid(), _port(listener)) == {}


def test_every_accepted_connection_counts(bench_run: ModuleType, listener: socket.socket) -> None:
    clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
    accepted = [listener.accept()[0] for _ in clients]
    try:
        counts = bench_run.connections_by_process(os.getpid(), _port(listener))
        assert list(counts.values()) == [3]
    finally:
        for sock in clients + accepted:
            sock.close()
