"""Which tools ``tools/list`` hides: those the policy denies whatever the call says.

"Always denies" is decided from the policy's text, not by asking the service: a surface
is always denied when the block that governs it (``PolicySet.select``, the service's
own choice) has only ``deny`` rules: no ``permit`` rule, and no ``escalate`` rule whose
approval would become one, so no request can ever be a PERMIT there. That
needs no example request, records no decision, and cannot be wrong about a tool that
some arguments would allow. Hiding is only a courtesy to the agent: a hidden tool that
is called anyway still goes through execute and is refused there (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from execauth.policy.engine import PolicySet
from execauth.policy.files import policy_files
from execauth.policy.testing import load_policies


def always_denied(policies: PolicySet) -> Callable[[str], bool]:
    """``surface → True`` when the governing block has only deny rules. A surface no block
    governs is not hidden: the local files may not be all of the organization's policies."""

    def denied(surface: str) -> bool:
        selected = policies.select(surface)
        if selected is None:
            return False
        _, block = selected
        return all(rule.effect == "deny" for rule in block.rules)

    return denied


def always_denied_by_files(path: Path) -> Callable[[str], bool]:
    """``always_denied`` for the policy file or directory at ``path`` (compiled as publishing
    would; ``PolicyFileInvalid`` if one is refused)."""
    policies, _ = load_policies(policy_files(path))
    return always_denied(policies)
