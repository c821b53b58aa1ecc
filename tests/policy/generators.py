"""Random execute requests, for property tests and bulk replay.

One generator, ``random_body``, driven by a ``random.Random``: the property tests draw
it through Hypothesis (``request_bodies``, which shrinks by shrinking the random draws),
the 10,000-execution replay tests call it with a seeded ``Random`` for speed. Bodies are
what a client might send: known fields with values of every type (so conditions meet
missing fields and wrong types), unknown extra fields, sometimes ``metadata`` whose keys
clash with ``context`` (the parser then refuses the body, as the gateway would).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
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
