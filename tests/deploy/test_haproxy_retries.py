"""What ``deploy/haproxy/haproxy.cfg`` resends, checked against HAProxy itself.

An instance that stops (SIGTERM) closes the keep-alive connections it holds idle, and HAProxy
may have just sent a request on one of them: the HTTP/1.1 keep-alive race. The config's
``retry-on conn-failure empty-response`` resends such a request to another instance, but
HAProxy can resend only a request it had received whole when it began sending it: clients
write a request's head and its body separately (httpx does), so now and then a request
went out before its body had arrived, was not retried, and its client's connection was
closed without an answer (``tests/deploy/test_topology.py`` saw this in about one run in
seven). ``option http-buffer-request`` closes that gap; these tests make the race certain
instead of rare.

The instances are stand-ins, not execauth: ``gateway1`` closes a reused connection as soon
as the next request's head arrives on it (as a stopping instance closes the connections it
believes idle); ``gateway2`` and ``gateway3`` answer every request.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.tls import self_signed_pem
from tests.serving import clean_env, free_port

REPOSITORY = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = REPOSITORY / "deploy" / "haproxy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
BODY = json.dumps({"surface": "deploy.production", "actor": "release-bot"}).encode()
# Long enough for HAProxy to take the head alone, as it sometimes does under load.
BODY_DELAY_SECONDS = 0.05
REQUESTS_PER_CONNECTION = 6  # round robin over three: each client connection reuses gateway1's


class Gateway(socketserver.ThreadingTCPServer):
    """An HTTP/1.1 stand-in for an instance; counts the reused connections it closed."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, name: str, *, closes_reused: bool) -> None:
        super().__init__(("127.0.0.1", port), GatewayHandler)
        self.name = name
        self.closes_reused = closes_reused
        self.closed_reused = 0


class GatewayHandler(socketserver.StreamRequestHandler):
    server: Gateway

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # HAProxy may reset a closed check
            self.serve()

    def serve(self) -> None:
        for served in range(1_000):
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = self.rfile.readline()
                if not line:
                    return
                head += line
            if self.server.closes_reused and served > 0:
                # Health checks and first requests are answered; a reused connection is
                # closed with its request unanswered and its body, if any, unread.
                self.server.closed_reused += 1
                return
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            self.rfile.read(int(length.group(1)) if length else 0)
            answer = json.dumps({"served_by": self.server.name}).encode()
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
            )


@dataclass
class Proxy:
    port: int
    trust: ssl.SSLContext
    gateways: list[Gateway]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    if HAPROXY is None:
        pytest.skip("HAProxy is not installed (`make test` installs Debian's haproxy)")
    workdir = tmp_path_factory.mktemp("haproxy-retries")
    port = free_port()
    gateways = [Gateway(free_port(), f"gateway{i + 1}", closes_reused=i == 0) for i in range(3)]
    for gateway in gateways:
        threading.Thread(target=gateway.serve_forever, daemon=True).start()
    certificate, pem = self_signed_pem(workdir)
    env = clean_env(
        EXECAUTH_LB_BIND=f"127.0.0.1:{port}",
        EXECAUTH_LB_CERT=str(pem),
        **{
            f"EXECAUTH_GATEWAY_{i + 1}": f"127.0.0.1:{g.server_address[1]}"
            for i, g in enumerate(gateways)
        },
    )
    with (workdir / "haproxy.log").open("w") as log:
        process = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(HAPROXY_CONFIG)], env=env, cwd=workdir, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not listening(port):
            assert process.poll() is None, (workdir / "haproxy.log").read_text()
            assert time.monotonic() < deadline, "HAProxy did not listen within 10 s"
            time.sleep(0.05)
        yield Proxy(port, ssl.create_default_context(cafile=str(certificate)), gateways)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
        for gateway in gateways:
            gateway.shutdown()
            gateway.server_close()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def post_on_one_connection(proxy: Proxy, count: int, *, body_apart: bool) -> list[str]:
    """Who answered each of ``count`` POSTs sent in turn on one keep-alive connection, or
    ``"closed without an answer"`` for the one on which HAProxy closed the connection."""
    head = (
        b"POST /v1/execute HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(BODY)
    )
    answers: list[str] = []
    raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    with proxy.trust.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        responses = conn.makefile("rb")
        for _ in range(count):
            try:
                if body_apart:
                    conn.sendall(head)
                    time.sleep(BODY_DELAY_SECONDS)
                    conn.sendall(BODY)
                else:
                    conn.sendall(head + BODY)
                status = responses.readline()
                headers = b""
                while (line := responses.readline()) not in (b"\r\n", b""):
                    headers += line
            except OSError:
                status = b""
            if not status:
                answers.append("closed without an answer")
                break
            length = re.search(rb"(?im)^content-length:\s*(\d+)", headers)
            answer = responses.read(int(length.group(1)) if length else 0)
            assert status.startswith(b"HTTP/1.1 200"), status + headers + answer
            answers.append(json.loads(answer)["served_by"])
    return answers


def test_a_request_sent_whole_on_a_connection_the_instance_closed_goes_to_another_instance(
    proxy: Proxy,
) -> None:
    closed_before = proxy.gateways[0].closed_reused
    answers = post_on_one_connection(proxy, REQUESTS_PER_CONNECTION, body_apart=False)
    assert proxy.gateways[0].closed_reused > closed_before  # the race did happen
    assert "closed without an answer" not in answers, answers
    assert len(answers) == REQUESTS_PER_CONNECTION


def test_a_request_whose_body_came_after_its_head_is_resent_as_well(proxy: Proxy) -> None:
    # Without `option http-buffer-request` HAProxy forwards the head at once, then cannot
    # resend the request and closes the client's connection without an answer.
    closed_before = proxy.gateways[0].closed_reused
    answers = post_on_one_connection(proxy, REQUESTS_PER_CONNECTION, body_apart=True)
    assert proxy.gateways[0].closed_reused > closed_before  # the race did happen
    assert "closed without an answer" not in answers, answers
    assert len(answers) == REQUESTS_PER_CONNECTION
