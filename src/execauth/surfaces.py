"""Surface patterns, shared by policy ``match`` blocks and API-key surface restrictions.

A pattern is a dotted surface where a segment may be ``*`` (exactly one
segment, or a wildcard inside one: ``deploy-*``) or ``**`` (one or more
segments). ``deploy.*`` matches ``deploy.production`` but not
``deploy.production.eu``; ``deploy.**`` matches both.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_SEGMENT = re.compile(r"^(\*\*|[a-z0-9_*-]+)\Z")


@dataclass(frozen=True, slots=True)
class SurfacePattern:
    text: str
    regex: re.Pattern[str]
    literal_chars: int  # for "most specific wins": more literal text is more specific

    @property
    def is_exact(self) -> bool:
        return "*" not in self.text

    def matches(self, surface: str) -> bool:
        return self.regex.fullmatch(surface) is not None


@functools.lru_cache(maxsize=4096)
def compile_surface_pattern(text: str) -> SurfacePattern:
    """Compile ``text``; raise ``ValueError`` with the reason when it is not a valid pattern."""
    if not isinstance(text, str) or not text or len(text) > 128:
        raise ValueError("a surface pattern is a non-empty string of at most 128 characters")
    segments = text.split(".")
    parts: list[str] = []
    for segment in segments:
        if not _SEGMENT.match(segment) or ("**" in segment and segment != "**"):
            raise ValueError(
                f"segment {segment!r} of {text!r} must be [a-z0-9_-] with optional '*', "
                "or a lone '**'"
            )
        if segment == "**":
            parts.append(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
        elif segment == "*":  # a whole segment: never an empty one
            parts.append(r"[a-z0-9_-]+")
        else:
            parts.append("[a-z0-9_-]*".join(re.escape(piece) for piece in segment.split("*")))
    if len(segments) < 2 and segments != ["**"]:
        raise ValueError(f"{text!r} has a single segment; surfaces are dotted (e.g. deploy.*)")
    regex = re.compile(r"\.".join(parts))
    return SurfacePattern(text, regex, sum(c not in "*." for c in text))
