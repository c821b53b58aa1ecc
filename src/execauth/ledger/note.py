"""C2SP signed notes (c2sp.org/signed-note) with Ed25519 keys.

A note is a text ending in a newline, a blank line, then one line per signature:
``— <key name> <base64(4-byte key ID ‖ signature)>``. Only Ed25519 (signature
type 0x01) is supported: it is what our keys are, and the spec asks
implementations to support only the types they need. Byte-for-byte compatible
with golang.org/x/mod/sumdb/note (``Sign``, ``Open``, ``NewVerifier``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ED25519_TYPE = b"\x01"  # signed-note "Signature types": 0x01 is Ed25519
ED25519_PUBLIC_KEY_SIZE = 32
ED25519_SIGNATURE_SIZE = 64
KEY_ID_SIZE = 4
SIGNATURE_PREFIX = "\u2014 "  # em dash, space
# signed-note: verifiers MUST accept at least 16; Go's note.Open stops at 100.
MAX_SIGNATURES = 100

# (key name, raw 32-byte Ed25519 public key, sign(message) -> 64-byte signature)
NoteSigner = tuple[str, bytes, Callable[[bytes], bytes]]
# (key name, raw 32-byte Ed25519 public key)
TrustedKey = tuple[str, bytes]


class NoteError(ValueError):
    """A signed note that cannot be trusted; the subclass says why."""


class MalformedNoteError(NoteError):
    """Text that is not a well-formed signed note."""


class UnknownKeyError(NoteError):
    """No signature on the note is from a trusted key."""


class InvalidSignatureError(NoteError):
    """A signature from a trusted key does not verify: the note was altered or forged."""


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: key name, 4-byte key ID and the raw signature."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        """The signature line, newline included."""
        encoded = base64.b64encode(self.key_id + self.signature).decode("ascii")
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True, slots=True)
class Note:
    """A note's text (final newline included) and its signatures."""

    text: str
    signatures: tuple[NoteSignature, ...]


def is_valid_key_name(name: str) -> bool:
    """signed-note: key names are non-empty, without Unicode spaces or ``+``."""
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_id(name: str, public_key: bytes) -> bytes:
    """signed-note Ed25519 key ID: SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]."""
    _check_public_key(public_key)
    return hashlib.sha256(name.encode() + b"\n" + ED25519_TYPE + public_key).digest()[:KEY_ID_SIZE]


def vkey(name: str, public_key: bytes) -> str:
    """The verifier key ``<name>+<hex key ID>+<base64(0x01 ‖ key)>`` of Go's note.NewVerifier."""
    _check_name(name)
    encoded = base64.b64encode(ED25519_TYPE + public_key).decode("ascii")
    return f"{name}+{key_id(name, public_key).hex()}+{encoded}"


def parse_vkey(verifier_key: str) -> TrustedKey:
    """The (name, raw public key) of a verifier key; raise ``NoteError`` if it is not one."""
    name, _, rest = verifier_key.partition("+")
    id_hex, _, key_b64 = rest.partition("+")
    try:
        raw = base64.b64decode(key_b64, validate=True)
        claimed = bytes.fromhex(id_hex) if len(id_hex) == 2 * KEY_ID_SIZE else b""
    except (binascii.Error, ValueError) as exc:
        raise NoteError(f"malformed verifier key {verifier_key!r}") from exc
    if not is_valid_key_name(name) or not claimed or raw[:1] != ED25519_TYPE:
        raise NoteError(f"malformed or non-Ed25519 verifier key {verifier_key!r}")
    public_key = raw[1:]
    if len(public_key) != ED25519_PUBLIC_KEY_SIZE or key_id(name, public_key) != claimed:
        raise NoteError(f"verifier key {verifier_key!r}: key ID does not match the key")
    return name, public_key


def sign_note(text: str, signers: Sequence[NoteSigner]) -> str:
    """The signed note: ``text``, a blank line, then one signature line per signer."""
    if not text.endswith("\n"):
        raise MalformedNoteError("note text must end with a newline")
    _check_characters(text)
    if not signers:
        raise ValueError("a signed note needs at least one signer")
    message = text.encode()
    lines = []
    for name, public_key, sign in signers:
        _check_name(name)
        signature = sign(message)
        # Check our own work: a signer whose private half does not match the
        # public key it is published under would sign notes nobody can verify.
        _verify(public_key, message, signature, name)
        lines.append(NoteSignature(name, key_id(name, public_key), signature).line())
    return text + "\n" + "".join(lines)


def parse_note(message: str) -> Note:
    """Split a signed note into text and signatures, verifying nothing."""
    _check_characters(message)
    split = message.rfind("\n\n")  # the text ends at the *last* blank line
    if split < 0:
        raise MalformedNoteError("no blank line before the signatures")
    text, block = message[: split + 1], message[split + 2 :]
    if not block.endswith("\n"):
        raise MalformedNoteError("the signature block must end with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNoteError(f"more than {MAX_SIGNATURES} signatures")
    return Note(text, tuple(_parse_signature_line(line) for line in lines))


def open_note(message: str, trusted: Iterable[TrustedKey]) -> Note:
    """The note with only its verified signatures; raise unless a trusted key signed it.

    signed-note: signatures from unknown keys are ignored; a signature from a
    known key that fails to verify rejects the whole note; a note with no
    verified signature from a known key is rejected.
    """
    note = parse_note(message)
    known: dict[tuple[str, bytes], bytes] = {}
    for name, public_key in trusted:
        ident = (name, key_id(name, public_key))
        if known.get(ident, public_key) != public_key:
            raise NoteError(f"two trusted keys share name and key ID {name}+{ident[1].hex()}")
        known[ident] = public_key
    message_bytes = note.text.encode()
    verified: dict[tuple[str, bytes], NoteSignature] = {}
    for sig in note.signatures:
        ident = (sig.name, sig.key_id)
        trusted_key = known.get(ident)
        if trusted_key is None or ident in verified:
            continue
        _verify(trusted_key, message_bytes, sig.signature, sig.name)
        verified[ident] = sig
    if not verified:
        raise UnknownKeyError("the note carries no signature from a trusted key")
    return Note(note.text, tuple(verified.values()))


def _verify(public_key: bytes, message: bytes, signature: bytes, name: str) -> None:
    _check_public_key(public_key)
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except InvalidSignature as exc:
        label = f"{name}+{key_id(name, public_key).hex()}"
        raise InvalidSignatureError(f"invalid signature for key {label}") from exc


def _parse_signature_line(line: str) -> NoteSignature:
    if not line.startswith(SIGNATURE_PREFIX):
        raise MalformedNoteError(f"not a signature line: {line[:80]!r}")
    name, _, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise MalformedNoteError("signature is not standard base64") from exc
    if not is_valid_key_name(name) or len(raw) <= KEY_ID_SIZE:
        raise MalformedNoteError(f"malformed signature line: {line[:80]!r}")
    return NoteSignature(name, raw[:KEY_ID_SIZE], raw[KEY_ID_SIZE:])


def _check_characters(message: str) -> None:
    # signed-note: valid UTF-8, no ASCII control characters other than newline.
    try:
        message.encode()
    except UnicodeEncodeError as exc:  # lone surrogates
        raise MalformedNoteError("note is not valid UTF-8") from exc
    if any(c < " " and c != "\n" for c in message):
        raise MalformedNoteError("note contains a control character")


def _check_name(name: str) -> None:
    if not is_valid_key_name(name):
        raise ValueError(f"invalid key name {name!r}: empty, or contains a space or '+'")


def _check_public_key(public_key: bytes) -> None:
    if len(public_key) != ED25519_PUBLIC_KEY_SIZE:
        raise ValueError(f"an Ed25519 public key is 32 bytes, got {len(public_key)}")
