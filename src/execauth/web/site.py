"""The public site: onboarding, trust and integration guides, rendered from the project's docs.

Every page's text is the Markdown the repository keeps (README.md, docs/, the SDK and
example READMEs), rendered on the server with markdown-it-py (CommonMark, raw HTML
off), so the site cannot say something the docs do not. ``SOURCES`` lists each file
used; pyproject.toml force-includes exactly these into the wheel under
``execauth/web/site_docs/`` (docs/decisions.md, "The public site"), and a source
checkout reads them from the repository itself.

Nothing here reads an organization, a key secret or the server secret: the only live
data is the public signing-key list, the same document ``/.well-known/service-keys.json``
serves.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from execauth.errors import NotFound

PACKAGED_DOCS = "site_docs"  # execauth/web/site_docs/ in an installed wheel


@dataclass(frozen=True, slots=True)
class Part:
    """One Markdown file, or the sections of it under the named headings (in that order)."""

    source: str  # path relative to the repository root
    sections: tuple[str, ...] = ()  # headings' raw Markdown text; empty: the whole file


@dataclass(frozen=True, slots=True)
class Guide:
    slug: str
    title: str
    summary: str
    parts: tuple[Part, ...]


QUICKSTART = (Part("README.md", ("Two commands", "A five-minute walkthrough")),)
INTRODUCTION = Part("README.md", ("execauth",))
VERIFIER = "How a verifier decides (`execauth.verify.verify_receipt`)"
TRUST = (
    Part("docs/receipts.md", (VERIFIER, "Verifying without execauth")),
    Part("docs/ledger.md", ("What is logged",)),
    Part("docs/receipts.md", ("Beyond one receipt: the log",)),
)
GUIDES = (
    Guide("python", "Python SDK", "authorize and verify from Python (execauth-client)",
          (Part("sdk/python/README.md"),)),
    Guide("typescript", "TypeScript SDK", "authorize and verify from Node.js (@execauth/client)",
          (Part("sdk/typescript/README.md"),)),
    Guide("gate", "execauth gate", "run a command only under a verified PERMIT",
          (Part("README.md", ("Gate a command",)),)),
    Guide("ci", "CI: GitHub Actions", "a deploy job that needs a PERMIT",
          (Part("examples/github-actions/README.md"),)),
    Guide("terraform", "Terraform", "apply only the plan that was authorized",
          (Part("examples/terraform/README.md"),)),
    Guide("agents", "AI agents", "guard an agent's tools, fail closed",
          (Part("examples/agent/README.md"),)),
)  # fmt: skip
GUIDE_BY_SLUG = {g.slug: g for g in GUIDES}


def sources() -> set[str]:
    """Every file the site renders: what the wheel must carry (tests/web/test_site.py)."""
    parts = [*QUICKSTART, INTRODUCTION, *TRUST, *(p for g in GUIDES for p in g.parts)]
    return {p.source for p in parts}


# Links between rendered files become links between pages; other relative links
# (source files, directories) have no page and are shown as plain text.
PAGE_OF_SOURCE = {
    "README.md": "/",
    "docs/receipts.md": "/trust",
    "docs/ledger.md": "/trust",
    **{g.parts[0].source: f"/guides/{g.slug}" for g in GUIDES if not g.parts[0].sections},
}
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
_SLUG_DROP = re.compile(r"[^\w\- ]+")


def docs_root() -> Traversable:
    """Where the Markdown lives: the wheel's copy, else the source checkout."""
    packaged = resources.files("execauth.web").joinpath(PACKAGED_DOCS)
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3]  # src/execauth/web/site.py → repository root


class SiteDocs:
    """Renders ``Part``s to HTML once and keeps them (the docs do not change while serving)."""

    def __init__(self, root: Traversable | None = None) -> None:
        self._root = root if root is not None else docs_root()
        self._md = MarkdownIt("commonmark", {"html": False}).enable("table")
        self.html = cache(self._html)

    def _html(self, parts: tuple[Part, ...]) -> str:
        return "\n".join(self._render(part) for part in parts)

    def _text(self, source: str) -> str:
        file = self._root.joinpath(*source.split("/"))
        if not file.is_file():
            raise NotFound(f"this page's source ({source}) is not installed")
        return file.read_text(encoding="utf-8")

    def _render(self, part: Part) -> str:
        text = self._text(part.source)
        if part.sections:
            lines = text.splitlines(keepends=True)
            text = "".join(
                "".join(lines[start:end]) for start, end in section_lines(self._md, text, part)
            )
        tokens = self._md.parse(text)
        _demote_headings(tokens)
        _rewrite_links(tokens, part.source)
        rendered: str = self._md.renderer.render(tokens, self._md.options, {})
        return rendered


def section_lines(md: MarkdownIt, text: str, part: Part) -> list[tuple[int, int]]:
    """Line ranges of the named sections: a heading up to the next one of its level or higher.

    Found through the parser's tokens, so a ``#`` inside a code block is not a heading.
    A heading the file no longer has is an error, not a silently shorter page.
    """
    tokens = md.parse(text)
    headings = [
        (int(t.tag[1]), tokens[i + 1].content, t.map[0])
        for i, t in enumerate(tokens)
        if t.type == "heading_open" and t.map is not None
    ]
    total = len(text.splitlines())
    ranges = []
    for wanted in part.sections:
        found = [(n, h) for n, h in enumerate(headings) if h[1] == wanted]
        if not found:
            raise LookupError(f"{part.source} has no heading {wanted!r}")
        n, (level, _, start) = found[0]
        end = next((h[2] for h in headings[n + 1 :] if h[0] <= level), total)
        if level == 1:  # a document's title: the introduction under it, without the title
            start += 1
            end = headings[n + 1][2] if n + 1 < len(headings) else total
        ranges.append((start, end))
    return ranges


def _demote_headings(tokens: Sequence[Token]) -> None:
    """The page has its own <h1>: a document's headings start at <h2>, with anchors."""
    for i, token in enumerate(tokens):
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + 1)}"
        if token.type == "heading_open":
            token.attrSet("id", slug(tokens[i + 1].content))


def slug(text: str) -> str:
    """GitHub's anchor form: lower case, punctuation dropped, spaces as hyphens."""
    return _SLUG_DROP.sub("", text.strip().lower()).replace(" ", "-")


def _rewrite_links(tokens: Sequence[Token], source: str) -> None:
    base = posixpath.dirname(source)
    for token in tokens:
        for child in token.children or ():
            if child.type == "image":
                # Images are not served from the docs; their text stands in for them.
                child.type, child.tag, child.nesting = "text", "", 0
                child.content = "".join(c.content for c in child.children or ())
                child.children = None
                child.attrs = {}
            elif child.type == "link_open":
                _rewrite_link(child, base)
        _close_unlinked(token.children or [])


def _rewrite_link(token: Token, base: str) -> None:
    href = str(token.attrGet("href") or "")
    if _SCHEME.match(href) or href.startswith(("/", "#")):
        return
    path, _, fragment = href.partition("#")
    target = posixpath.normpath(posixpath.join(base, path))
    page = PAGE_OF_SOURCE.get(target)
    if page is not None:
        token.attrSet("href", page + (f"#{fragment}" if fragment else ""))
        return
    token.tag = "span"  # no page for it: the path, as text
    token.attrs = {"class": "doc-path", "title": target}
    token.meta["unlinked"] = True


def _close_unlinked(children: list[Token]) -> None:
    """Give each link turned into a <span> a matching </span>."""
    depth: list[bool] = []
    for child in children:
        if child.type == "link_open":
            depth.append(bool(child.meta.get("unlinked")))
        elif child.type == "link_close" and depth and depth.pop():
            child.tag = "span"


def guide(slug_: str) -> Guide:
    found = GUIDE_BY_SLUG.get(slug_)
    if found is None:
        raise NotFound("no such guide")
    return found
