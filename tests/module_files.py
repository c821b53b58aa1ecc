"""Python files the tests load that are not importable modules: scripts and examples."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module_file(name: str, path: Path) -> ModuleType:
    """The module ``path`` defines, executed once under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up by name as they
    # are defined.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
