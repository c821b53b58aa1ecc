"""Checkpoints: a log's signed tree head, in C2SP tlog-checkpoint form (docs/ledger.md).

The body is three lines, origin / tree size / base64 root hash (plus optional
extension lines, which we never write), wrapped in a signed note whose key name
is the origin. ``verify_checkpoint`` is what an auditor runs; ``parse_checkpoint``
alone trusts nothing and must only be used on text already verified.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from execauth.ledger.merkle import HASH_SIZE
from execauth.ledger.note import (
    InvalidSignatureError,
    MalformedNoteError,
    NoteError,
    NoteSigner,
    UnknownKeyError,
    open_note,
    parse_note,
    sign_note,
    vkey,
)

__all__ = [
    "Checkpoint",
    "InvalidSignatureError",
    "MalformedCheckpointError",
    "MalformedNoteError",
    "NoteError",
    "OriginMismatchError",
    "UnknownKeyError",
    "parse_checkpoint",
    "parse_checkpoint_body",
    "sign_checkpoint",
    "verify_checkpoint",
    "vkey",
]


class MalformedCheckpointError(MalformedNoteError):
    """A note whose text is not a tlog-checkpoint body."""


class OriginMismatchError(NoteError):
    """A validly signed checkpoint of a different log than the one expected."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A tree head: which log, how many leaves, and the RFC 9162 root of those leaves."""

    origin: str
    tree_size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # tlog-checkpoint: the origin MUST be non-empty and clients MUST NOT assume
        # more (Go's sumdb uses "go.sum database tree"). Ours doubles as the key
        # name (docs/ledger.md, "What is logged"), which sign_checkpoint checks separately.
        if not self.origin or "\n" in self.origin:
            raise MalformedCheckpointError(f"invalid origin {self.origin!r}")
        if isinstance(self.tree_size, bool) or self.tree_size < 0:
            raise MalformedCheckpointError(f"invalid tree size {self.tree_size!r}")
        if len(self.root_hash) != HASH_SIZE:
            raise MalformedCheckpointError(f"root hash is {len(self.root_hash)} bytes, not 32")
        for line in self.extensions:
            if not line or "\n" in line:
                raise MalformedCheckpointError(f"invalid extension line {line!r}")

    def body(self) -> str:
        """The note text: ``origin\\nsize\\nbase64(root)\\n`` and any extension lines."""
        lines = [
            self.origin,
            str(self.tree_size),
            base64.b64encode(self.root_hash).decode("ascii"),
            *self.extensions,
        ]
        return "".join(line + "\n" for line in lines)


def sign_checkpoint(checkpoint: Checkpoint, signers: Sequence[NoteSigner]) -> str:
    """The signed note of ``checkpoint``; every signer's key name must be its origin."""
    for name, _, _ in signers:
        if name != checkpoint.origin:
            # docs/ledger.md (and tlog-checkpoint's SHOULD): the log signs as its origin.
            raise ValueError(f"key name {name!r} is not the origin {checkpoint.origin!r}")
    return sign_note(checkpoint.body(), signers)


def parse_checkpoint_body(text: str) -> Checkpoint:
    """The checkpoint that a note text spells out, exactly as tlog-checkpoint writes it."""
    if not text.endswith("\n"):
        raise MalformedCheckpointError("checkpoint text must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or any(not line for line in lines):
        raise MalformedCheckpointError("a checkpoint is at least three non-empty lines")
    origin, size_text, root_text, *extensions = lines
    # Decimal without sign or leading zeros: one checkpoint, one text.
    if not (size_text.isascii() and size_text.isdigit()) or (
        size_text != "0" and size_text.startswith("0")
    ):
        raise MalformedCheckpointError(f"tree size {size_text!r} is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except binascii.Error as exc:
        raise MalformedCheckpointError("root hash is not standard base64") from exc
    if len(root) != HASH_SIZE or base64.b64encode(root).decode("ascii") != root_text:
        raise MalformedCheckpointError("root hash is not the base64 of 32 bytes")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def parse_checkpoint(note_text: str) -> Checkpoint:
    """The checkpoint inside a signed note, WITHOUT checking any signature."""
    return parse_checkpoint_body(parse_note(note_text).text)


def verify_checkpoint(note_text: str, *, origin: str, public_keys: Iterable[bytes]) -> Checkpoint:
    """The checkpoint, once a key of ``public_keys`` signed it as ``origin``; raise otherwise.

    Raises ``MalformedNoteError``/``MalformedCheckpointError`` for bad text,
    ``UnknownKeyError`` when no trusted key signed, ``InvalidSignatureError``
    when a trusted key's signature fails, ``OriginMismatchError`` when the
    signed body names another log. All are ``NoteError`` (a ``ValueError``).
    """
    note = open_note(note_text, [(origin, key) for key in public_keys])
    checkpoint = parse_checkpoint_body(note.text)
    if checkpoint.origin != origin:
        raise OriginMismatchError(
            f"checkpoint is for log {checkpoint.origin!r}, expected {origin!r}"
        )
    return checkpoint
