"""What ``api/wire.read_json_body``'s refusals cost on the hot path (docs/decisions.md).

The body is bench/wrk/execauth.lua's execute request. Prints the best of 15 runs of
each step in µs; the checks added for bad input (Content-Type, duplicate keys, U+0000)
beside the decode and depth walk that were there before.

    .venv/bin/python bench/body_checks.py
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

import msgspec

from execauth.api import wire

BODY = (
    b'{"surface":"deploy.production","action":"deploy","actor":"release-bot",'
    b'"context":{"branch":"main","ticket":"CHG-4821","pipeline":"gh-actions/12345"},'
    b'"payload":{"service":"checkout-api","image":"registry.example/checkout-api@sha256:'
    b'9f2c1e7ab04d33c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6",'
    b'"replicas":6,"region":"eu-west-1","commit":"4f9d2a1c","canary":true}}'
)


def main() -> None:
    decoder = msgspec.json.Decoder()
    value = decoder.decode(BODY)

    def added() -> None:
        wire.is_json_media_type("application/json")
        wire._has_duplicate_keys(BODY, value)
        _ = wire._ESCAPED_NUL in BODY

    steps: dict[str, Callable[[], object]] = {
        "decode (before)": lambda: decoder.decode(BODY),
        "depth walk (before)": lambda: wire._depth_exceeds(value, wire.MAX_JSON_DEPTH),
        "added: content-type": lambda: wire.is_json_media_type("application/json"),
        "added: duplicate keys": lambda: wire._has_duplicate_keys(BODY, value),
        "added: all checks": added,
    }
    for name, step in steps.items():
        best = min(timeit.repeat(step, number=20_000, repeat=15)) / 20_000
        print(f"{name:24s} {best * 1e6:6.2f} µs")


if __name__ == "__main__":
    main()
