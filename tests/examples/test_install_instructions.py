"""No README or example installs a package by a name this project does not publish.

Neither ``execauth`` nor ``execauth-client`` nor ``@execauth/client`` is on a public
index; whoever registers one of those names there would run code in a reader's CI.
Installs come from this repository at a pinned commit (a path, or a git URL).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [
        REPOSITORY / "README.md",
        REPOSITORY / "action.yml",
        REPOSITORY / "sdk" / "python" / "README.md",
        REPOSITORY / "sdk" / "typescript" / "README.md",
        *(p for p in (REPOSITORY / "examples").rglob("*") if p.is_file()),
        *(REPOSITORY / "scripts").glob("action-*.sh"),
    ]
)
# `pip install execauth`, `"execauth==0.1.0"`, `npm install @execauth/client`; a direct
# reference (`execauth-client @ git+…`) names where it comes from, and passes.
BY_NAME = re.compile(
    r"""(pip3?\s+install|uv\s+pip\s+install|pipx\s+install)[^\n]*?\s["']?execauth(-client)?(?!\s*@)(?=[\s"'=<>~!\[]|$)"""
    r"""|npm\s+(install|i|add)[^\n]*?\s@execauth/client"""
)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_nothing_is_installed_by_an_unpublished_name(document: Path) -> None:
    offending = [line for line in document.read_text().splitlines() if BY_NAME.search(line)]
    assert offending == []


@pytest.mark.parametrize(
    "line",
    [
        'python -m pip install "execauth==0.1.0"',
        "pip install execauth-client          # from this repository",
        "pip install execauth",
        "npm install @execauth/client",
    ],
)
def test_the_check_catches_installs_by_name(line: str) -> None:
    assert BY_NAME.search(line)


@pytest.mark.parametrize(
    "line",
    [
        'pip install "execauth-client @ git+$EXECAUTH_REPO@$COMMIT#subdirectory=sdk/python"',
        "pip install -e sdk/python",
        "pip install ./sdk/python",
        "npm install /path/to/execauth/sdk/typescript",
    ],
)
def test_the_check_lets_installs_from_the_repository_pass(line: str) -> None:
    assert not BY_NAME.search(line)
