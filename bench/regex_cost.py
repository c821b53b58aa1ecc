"""Regular-expression compile cost against the cost model, as ratios (docs/policy-language.md).

Each pattern is repeated to the largest count ``policy.regex_cost`` admits within the
evaluation limit, and timed beside a non-regex rule of known steps (``xs.all(a, a in
xs)`` at n = 668) in the same process, so that machine load cancels. A ratio above 1
means the model under-charges that pattern.

    .venv/bin/python bench/regex_cost.py [ATOM ...]
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import cel

from execauth.policy.cost import MAX_EVALUATION_COST, analyse, measure_input
from execauth.policy.regex_cost import regex_compile_steps

ATOMS = ["a", "[a-z]", "(?i:[a-z])", "(?i)k", ".", "\\s", "\\w", "\\pL", "\\W", "ab|cd"]
REFERENCE = "payload.xs.all(a, a in payload.xs)"
REFERENCE_PAYLOAD = {"xs": list(range(668))}


def best(program: Any, context: Any, runs: int = 9) -> float:
    fastest = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        # Over regex's size limit the call raises: the time spent still counts.
        with contextlib.suppress(Exception):
            program.execute(context)
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def largest_admitted(atom: str) -> int:
    low, high = 1, 10**7
    while low < high:
        middle = (low + high + 1) // 2
        if regex_compile_steps(f"(?:{atom}){{{middle}}}") <= MAX_EVALUATION_COST:
            low = middle
        else:
            high = middle - 1
    return low


def main(atoms: list[str]) -> None:
    reference = cel.compile(REFERENCE)
    reference_steps = analyse(REFERENCE).steps(measure_input({"payload": REFERENCE_PAYLOAD}))
    reference_context = cel.Context({"payload": REFERENCE_PAYLOAD})
    context = cel.Context({"s": "ab" * 50})
    for atom in atoms:
        copies = largest_admitted(atom)
        pattern = f"(?:{atom}){{{copies}}}"
        program = cel.compile('s.matches("' + pattern.replace("\\", "\\\\") + '")')
        before = best(reference, reference_context)
        elapsed = best(program, context)
        after = best(reference, reference_context)
        real_steps = elapsed / min(before, after) * reference_steps
        print(
            f"{atom:12s} x{copies:<7} {elapsed * 1e3:7.1f} ms "
            f"= {real_steps / MAX_EVALUATION_COST:.2f} of the limit"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ATOMS)
