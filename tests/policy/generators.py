"""Random execute requests, for property tests and bulk replay.

One generator, ``random_body``, driven by a ``random.Random``: the property tests draw
it through Hypothesis (``request_bodies``, which shrinks by shrinking the random draws),
the 10,000-execution replay tests call it with a seeded ``Random`` for speed. Bodies are
what a client might send: known fields with values of every type (so conditions meet
missing fields and wrong types), unknown extra fields, sometimes ``metadata`` whose keys
clash with ``context`` (the parser then refuses the body, as the gateway would).
``python_values`` goes further than any body: Python values the parser would refuse and
CEL cannot always hold, for properties of the engine itself.
"""

from __future__ import annotations

import random
from collections import OrderedDict, UserDict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

from hypothesis import strategies as st

from execauth.wire_time import truncate_to_millis

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"

SCALARS: tuple[Any, ...] = (
    None, True, False, 0, 1, -5, 7, 1000, 5001, 10**6, 2**53 - 1, 1.5, -0.0, 1e21,
    "", "x", "main", "dev", "CHG-1234", "CHG-1", "INC-42", "EUR", "USD", "JPY", "GET", "POST",
    "prod-eu", "staging", "git", "ls", "push", "/etc/passwd", "..", "ssn", "agent:search",
    "https://api.github.com/repos", "sha256:" + "ab" * 32, "é\u2028\U0001f600", "x" * 40,
)  # fmt: skip


@dataclass(frozen=True)
class Vocabulary:
    """What a generated request is made of."""

    surfaces: tuple[str, ...]
    fields: tuple[str, ...]  # keys the policies read, in context and payload
    actors: tuple[str, ...]
    scalars: tuple[Any, ...] = SCALARS


COOKBOOK_VOCABULARY = Vocabulary(
    surfaces=(
        "deploy.production", "deploy.staging", "infra.change.dns", "terraform.apply",
        "infra.terraform.apply", "data.export.orders", "data.export.customers",
        "payments.transfer", "agent.tool.shell", "agent.tool.web_search",
        "agent.tool.http_request", "agent.tool.email",
    ),
    fields=(
        "branch", "change_ticket", "amount", "currency", "approved_by", "rows", "bytes",
        "columns", "argv", "query", "method", "url", "workspace", "plan_digest",
        "approved_plan_digest", "destroy", "incident", "environment",
    ),
    actors=("alice@example.com", "release-bot", "agent:search", "mallory"),
)  # fmt: skip


def cookbook_policies() -> dict[str, str]:
    """The cookbook's policy documents by policy id (examples/policies/*.yaml)."""
    return {
        path.stem: path.read_text()
        for path in sorted(COOKBOOK.glob("*.yaml"))
        if not path.name.endswith(".cases.yaml")
    }


def random_value(rng: random.Random, vocabulary: Vocabulary, depth: int = 0) -> Any:
    """A JSON value: mostly scalars, sometimes a short list or map of them."""
    roll = rng.random()
    if depth >= 2 or roll < 0.6:
        return rng.choice(vocabulary.scalars)
    if roll < 0.85:
        return [random_value(rng, vocabulary, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = rng.sample(vocabulary.fields, rng.randint(0, 3))
    return {key: random_value(rng, vocabulary, depth + 1) for key in keys}


def random_object(rng: random.Random, vocabulary: Vocabulary) -> dict[str, Any]:
    """A ``context`` or ``payload``: some known fields, now and then an unknown one."""
    keys = rng.sample(vocabulary.fields, rng.randint(0, min(6, len(vocabulary.fields))))
    if rng.random() < 0.2:
        keys.append("extra_" + str(rng.randint(0, 9)))
    return {key: random_value(rng, vocabulary, 1) for key in keys}


def random_body(rng: random.Random, vocabulary: Vocabulary) -> dict[str, Any]:
    """An execute request body as a client might send it."""
    body: dict[str, Any] = {"surface": rng.choice(vocabulary.surfaces)}
    if rng.random() < 0.8:
        body["actor"] = rng.choice(vocabulary.actors)
    if rng.random() < 0.3:
        body["action"] = rng.choice(("apply", "run", "read"))
    for name in ("context", "payload"):
        if rng.random() < 0.85:
            body[name] = random_object(rng, vocabulary)
    if rng.random() < 0.1:
        body["metadata"] = random_object(rng, vocabulary)  # may clash with context: a 400
    return body


def random_now(rng: random.Random, start: datetime) -> datetime:
    """A decision time within two years of ``start`` (weekdays, weekends, year ends)."""
    return truncate_to_millis(start + timedelta(milliseconds=rng.randrange(2 * 365 * 86_400_000)))


def request_bodies(vocabulary: Vocabulary) -> st.SearchStrategy[dict[str, Any]]:
    """``random_body`` as a Hypothesis strategy."""
    return st.randoms(use_true_random=False).map(partial(random_body, vocabulary=vocabulary))


class Text(str):
    """A ``str`` subclass: measured and converted unlike a ``str``."""


# Values a request could hold only if it bypassed the parser: what CEL cannot convert
# (lone surrogates, integers beyond 64 bits, sets, dates, keys that are None, floats or
# tuples), what it converts its own way (naive or offset datetimes, tuples, Decimal),
# and mappings and strings that are not exactly dict and str.
ODD_SCALARS: tuple[Any, ...] = (
    "\ud800", "é\udfff", 2**63, 2**64, -(2**63) - 1, 10**400, float("nan"), float("inf"),
    b"\xff", bytearray(b"x"), frozenset({1}), Decimal("1.5"), date(2026, 1, 1),
    datetime(2026, 1, 1), datetime(2026, 1, 1, tzinfo=UTC), timedelta(seconds=5),
    datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))), Text("main"), (1, "x"),
    {1: "x"}, {None: 1}, {1.5: 2}, {(1,): 2}, {True: 1}, {2**64: 1}, {"\ud800": 1},
)  # fmt: skip
_keys = st.text(max_size=3) | st.integers(-3, 3) | st.sampled_from(("\ud800", 2**64, None, 1.5))


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    entries = st.dictionaries(_keys, inner, max_size=3)
    return (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | entries
        | entries.map(OrderedDict)
        | entries.map(MappingProxyType)
        | entries.map(UserDict)
    )


python_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
    | st.binary(max_size=2) | st.sampled_from(ODD_SCALARS),
    _containers,
    max_leaves=8,
)  # fmt: skip
