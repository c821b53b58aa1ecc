"""Signed notes and checkpoints (C2SP signed-note, tlog-checkpoint; docs/ledger.md).

Known answers from third parties:
- golang.org/x/mod sumdb/note/note_test.go: the PeterNeumann signer and verifier
  keys, the signed "If you think cryptography..." note (TestSign), the EnochRoot
  key and signature, and the malformed notes of TestOpen.
- A real signed tree head of sum.golang.org (a C2SP checkpoint whose origin is
  "go.sum database tree"), from transparency-dev/trillian-tessera
  internal/parse/parse_test.go (BenchmarkCheckpointUnsafe), with the log's
  published verifier key from golang/go src/cmd/go/internal/modfetch/key.go.
- RFC 8032 §7.1 TEST 1 Ed25519 key pair, for our own pinned checkpoint text.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from execauth.keyring import ActiveSigner
from execauth.ledger.checkpoint import (
    Checkpoint,
    InvalidSignatureError,
    MalformedCheckpointError,
    MalformedNoteError,
    NoteError,
    OriginMismatchError,
    UnknownKeyError,
    parse_checkpoint,
    parse_checkpoint_body,
    sign_checkpoint,
    verify_checkpoint,
    vkey,
)
from execauth.ledger.merkle import EMPTY_ROOT
from execauth.ledger.note import (
    MAX_SIGNATURES,
    NoteSigner,
    key_id,
    open_note,
    parse_note,
    parse_vkey,
    sign_note,
)
from execauth.verify import key_id_for

EM = "\u2014"

# --- golang.org/x/mod sumdb/note/note_test.go --------------------------------------------
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_B64 = (
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
)
ENOCH_B64 = (
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ="
)
PETER_SIG = f"{EM} PeterNeumann {PETER_B64}\n"
ENOCH_SIG = f"{EM} EnochRoot {ENOCH_B64}\n"

# --- a real sum.golang.org checkpoint ---------------------------------------------------
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_CHECKPOINT = (
    "go.sum database tree\n31700353\nqINS1GRFhWHwdkUeqLEoP4yEMkTBBzxBkGwGQlVlVcs=\n\n"
    f"{EM} sum.golang.org Az3grnmrIUEDFqHzAElIQCPNoRFRAAdFo47fooyWKMHb89k11GJh5zHIfNCOBmwn"
    "/C3YI8oW9/C8DJ87F61QqspBYwM=\n"
)

# --- RFC 8032 §7.1 TEST 1 ---------------------------------------------------------------
RFC8032_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")

ORIGIN = "execauth.example/log/org_01"
ROOT_8 = bytes.fromhex("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")
# Produced by this code for the RFC 8032 key (the format itself is anchored by the
# Go vectors above); pinned so that any change to the wire format shows.
PINNED_SIGNATURE = (
    "NVFWHZleOtfCsUlvjb+fC3Ylnd2tdZ6ns4GA0l6KFPt2U92EvsobdCkFIrPSt3pHPgH3vxmsCWxKTNtjx2/vq3BDNgw="
)
PINNED_VKEY = "execauth.example/log/org_01+3551561d+AddamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea"


def raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def peter_key() -> Ed25519PrivateKey:
    seed = base64.b64decode(PETER_SKEY.split("+", 4)[4])[1:]  # drop the 0x01 type byte
    return Ed25519PrivateKey.from_private_bytes(seed)


def rfc8032_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET)


def log_signer(key: Ed25519PrivateKey, name: str = ORIGIN) -> NoteSigner:
    return (name, raw_public(key), key.sign)


def signed(checkpoint: Checkpoint, *keys: Ed25519PrivateKey) -> str:
    return sign_checkpoint(checkpoint, [log_signer(k, checkpoint.origin) for k in keys])


# --- signed-note known answers (Go's note package) ---------------------------------------
def test_vkey_of_go_test_key_matches_go() -> None:
    assert vkey("PeterNeumann", raw_public(peter_key())) == PETER_VKEY


def test_key_id_is_first_four_bytes_of_sha256_of_name_newline_type_and_key() -> None:
    public = raw_public(peter_key())
    expected = hashlib.sha256(b"PeterNeumann\n\x01" + public).digest()[:4]
    assert key_id("PeterNeumann", public) == expected == bytes.fromhex("c74f20a3")


def test_sign_note_reproduces_go_signed_note_exactly() -> None:
    note = sign_note(GO_TEXT, [("PeterNeumann", raw_public(peter_key()), peter_key().sign)])
    assert note == GO_TEXT + "\n" + PETER_SIG


def test_parse_vkey_accepts_go_keys() -> None:
    assert parse_vkey(PETER_VKEY) == ("PeterNeumann", raw_public(peter_key()))
    name, public = parse_vkey(ENOCH_VKEY)
    assert (name, len(public)) == ("EnochRoot", 32)


@pytest.mark.parametrize(
    "bad",
    [
        PETER_VKEY[:-1],
        PETER_VKEY.replace("c74f20a3", "c74f20a4"),  # key ID does not match
        PETER_VKEY.replace("+ARpc", "+AhRpc"),  # not base64 of 0x01 ‖ 32 bytes
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown algorithm
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "",
    ],
)
def test_parse_vkey_refuses_mangled_keys(bad: str) -> None:
    with pytest.raises(NoteError):
        parse_vkey(bad)


def test_open_note_keeps_trusted_signature_and_ignores_unknown_one() -> None:
    note = open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, [parse_vkey(PETER_VKEY)])
    assert note.text == GO_TEXT
    assert [(s.name, s.key_id.hex()) for s in note.signatures] == [("PeterNeumann", "c74f20a3")]


def test_open_note_verifies_every_trusted_signature() -> None:
    trusted = [parse_vkey(PETER_VKEY), parse_vkey(ENOCH_VKEY)]
    note = open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, trusted)
    assert [s.name for s in note.signatures] == ["PeterNeumann", "EnochRoot"]


def test_note_signed_by_no_trusted_key_is_unknown_key() -> None:
    with pytest.raises(UnknownKeyError):
        open_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG, [])


def test_altered_signature_from_trusted_key_is_invalid_signature() -> None:
    altered = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(InvalidSignatureError):
        open_note(GO_TEXT + "\n" + altered, [parse_vkey(PETER_VKEY)])


@pytest.mark.parametrize(
    "message",
    [
        GO_TEXT,
        GO_TEXT + "\n",
        GO_TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + GO_TEXT + "\n" + PETER_SIG,
        "\udcff" + GO_TEXT + "\n" + PETER_SIG,  # not encodable as UTF-8
        GO_TEXT + "\n" + f"{EM} Bad Name {PETER_B64}",
        GO_TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        GO_TEXT + "\n" + PETER_SIG * (MAX_SIGNATURES + 1),
    ],
)
def test_malformed_note_is_refused(message: str) -> None:
    with pytest.raises(MalformedNoteError):
        open_note(message, [parse_vkey(PETER_VKEY)])


def test_sign_note_refuses_text_without_final_newline() -> None:
    with pytest.raises(MalformedNoteError):
        sign_note("abc", [log_signer(peter_key(), "PeterNeumann")])


def test_sign_note_refuses_signer_whose_key_is_not_its_public_key() -> None:
    wrong = ("PeterNeumann", RFC8032_PUBLIC, peter_key().sign)
    with pytest.raises(InvalidSignatureError):
        sign_note(GO_TEXT, [wrong])


# --- a real third-party checkpoint ------------------------------------------------------
def test_real_sumdb_checkpoint_opens_with_published_key_and_parses() -> None:
    note = open_note(SUMDB_CHECKPOINT, [parse_vkey(SUMDB_VKEY)])
    checkpoint = parse_checkpoint_body(note.text)
    assert checkpoint.origin == "go.sum database tree"
    assert checkpoint.tree_size == 31700353
    assert checkpoint.root_hash == base64.b64decode("qINS1GRFhWHwdkUeqLEoP4yEMkTBBzxBkGwGQlVlVcs=")
    assert checkpoint.body() == note.text


def test_real_sumdb_checkpoint_with_changed_size_fails() -> None:
    with pytest.raises(InvalidSignatureError):
        open_note(SUMDB_CHECKPOINT.replace("31700353", "31700354"), [parse_vkey(SUMDB_VKEY)])


# --- our checkpoints --------------------------------------------------------------------
def test_checkpoint_body_is_origin_size_and_base64_root() -> None:
    body = Checkpoint(ORIGIN, 8, ROOT_8).body()
    assert body == f"{ORIGIN}\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n"


def test_signed_checkpoint_has_one_em_dash_line_per_key_named_after_origin() -> None:
    note = signed(Checkpoint(ORIGIN, 8, ROOT_8), rfc8032_key())
    body, signatures = note.split("\n\n")
    lines = signatures.splitlines()
    assert len(lines) == 1
    dash, name, blob = lines[0].split(" ")
    raw = base64.b64decode(blob, validate=True)
    expected_id = hashlib.sha256(ORIGIN.encode() + b"\n\x01" + RFC8032_PUBLIC).digest()[:4]
    assert (dash, name, len(raw), raw[:4]) == (EM, ORIGIN, 68, expected_id)
    Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET).public_key().verify(
        raw[4:], (body + "\n").encode()
    )


def test_signed_checkpoint_is_pinned_for_a_fixed_key() -> None:
    # Ed25519 is deterministic: this text changes only if the wire format does.
    assert signed(Checkpoint(ORIGIN, 8, ROOT_8), rfc8032_key()) == (
        f"{ORIGIN}\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n"
        f"{EM} {ORIGIN} {PINNED_SIGNATURE}\n"
    )


def test_vkey_of_log_key_names_origin_and_key_id() -> None:
    assert (
        vkey(ORIGIN, RFC8032_PUBLIC)
        == PINNED_VKEY
        == (
            f"{ORIGIN}+{key_id(ORIGIN, RFC8032_PUBLIC).hex()}+"
            + base64.b64encode(b"\x01" + RFC8032_PUBLIC).decode()
        )
    )
    assert parse_vkey(vkey(ORIGIN, RFC8032_PUBLIC)) == (ORIGIN, RFC8032_PUBLIC)


def test_checkpoint_round_trips_through_sign_parse_and_verify() -> None:
    checkpoint = Checkpoint(ORIGIN, 8, ROOT_8)
    note = signed(checkpoint, rfc8032_key())
    assert parse_checkpoint(note) == checkpoint
    assert verify_checkpoint(note, origin=ORIGIN, public_keys=[RFC8032_PUBLIC]) == checkpoint


def test_empty_log_checkpoint_round_trips() -> None:
    checkpoint = Checkpoint(ORIGIN, 0, EMPTY_ROOT)
    note = signed(checkpoint, rfc8032_key())
    assert note.startswith(f"{ORIGIN}\n0\n")
    assert verify_checkpoint(note, origin=ORIGIN, public_keys=[RFC8032_PUBLIC]) == checkpoint


def test_checkpoint_signed_by_the_service_signer_verifies() -> None:
    # How the sequencer signs: the keyring's ActiveSigner and the key's raw public half.
    private = rfc8032_key()
    signer = ActiveSigner(key_id_for(RFC8032_PUBLIC), private)
    checkpoint = Checkpoint(ORIGIN, 8, ROOT_8)
    note = sign_checkpoint(checkpoint, [(ORIGIN, RFC8032_PUBLIC, signer.sign)])
    assert verify_checkpoint(note, origin=ORIGIN, public_keys=[RFC8032_PUBLIC]) == checkpoint


def test_checkpoint_signed_by_old_and_new_key_verifies_with_either() -> None:
    old, new = rfc8032_key(), Ed25519PrivateKey.generate()
    note = signed(Checkpoint(ORIGIN, 8, ROOT_8), old, new)
    for key in (old, new):
        verify_checkpoint(note, origin=ORIGIN, public_keys=[raw_public(key)])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("\n8\n", "\n9\n"),  # size
        ("Xcnaeac", "Ycnaeac"),  # root
        ("org_01\n", "org_02\n"),  # origin in the body
    ],
)
def test_tampered_checkpoint_body_is_invalid_signature(old: str, new: str) -> None:
    note = signed(Checkpoint(ORIGIN, 8, ROOT_8), rfc8032_key())
    body, signatures = note.split("\n\n")
    tampered = body.replace(old, new, 1) + "\n\n" + signatures
    with pytest.raises(InvalidSignatureError):
        verify_checkpoint(tampered, origin=ORIGIN, public_keys=[RFC8032_PUBLIC])


def test_tampered_signature_is_invalid_signature() -> None:
    note = signed(Checkpoint(ORIGIN, 8, ROOT_8), rfc8032_key())
    head, blob = note.rstrip("\n").rsplit(" ", 1)
    raw = bytearray(base64.b64decode(blob))
    raw[10] ^= 0x01  # inside the Ed25519 signature, after the key ID
    tampered = f"{head} {base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(InvalidSignatureError):
        verify_checkpoint(tampered, origin=ORIGIN, public_keys=[RFC8032_PUBLIC])


def test_checkpoint_signed_by_another_key_is_unknown_key() -> None:
    note = signed(Checkpoint(ORIGIN, 8, ROOT_8), Ed25519PrivateKey.generate())
    with pytest.raises(UnknownKeyError):
        verify_checkpoint(note, origin=ORIGIN, public_keys=[RFC8032_PUBLIC])


def test_checkpoint_of_another_log_is_unknown_key_for_this_origin() -> None:
    other = "execauth.example/log/org_02"
    note = signed(Checkpoint(other, 8, ROOT_8), rfc8032_key())
    with pytest.raises(UnknownKeyError):
        verify_checkpoint(note, origin=ORIGIN, public_keys=[RFC8032_PUBLIC])


def test_checkpoint_whose_body_names_another_log_is_origin_mismatch() -> None:
    # Signed with our key under our name, but the body names another log.
    other = Checkpoint("execauth.example/log/org_02", 8, ROOT_8)
    note = sign_note(other.body(), [log_signer(rfc8032_key())])
    with pytest.raises(OriginMismatchError):
        verify_checkpoint(note, origin=ORIGIN, public_keys=[RFC8032_PUBLIC])


def test_sign_checkpoint_refuses_key_name_other_than_origin() -> None:
    with pytest.raises(ValueError, match="origin"):
        sign_checkpoint(Checkpoint(ORIGIN, 8, ROOT_8), [log_signer(rfc8032_key(), "someone.else")])


def test_sign_checkpoint_refuses_origin_that_cannot_be_a_key_name() -> None:
    checkpoint = Checkpoint("go.sum database tree", 1, ROOT_8)
    with pytest.raises(ValueError, match="key name"):
        signed(checkpoint, rfc8032_key())


@pytest.mark.parametrize(
    ("origin", "size", "root"),
    [("", 1, ROOT_8), ("a\nb", 1, ROOT_8), (ORIGIN, -1, ROOT_8), (ORIGIN, 1, ROOT_8[:31])],
)
def test_invalid_checkpoint_values_are_refused(origin: str, size: int, root: bytes) -> None:
    with pytest.raises(MalformedCheckpointError):
        Checkpoint(origin, size, root)


@pytest.mark.parametrize(
    "body",
    [
        f"{ORIGIN}\n8\n",  # two lines
        f"{ORIGIN}\n08\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",  # leading zero
        f"{ORIGIN}\n+8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        f"{ORIGIN}\n-8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",
        f"{ORIGIN}\n８\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",  # a non-ASCII digit
        f"{ORIGIN}\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg\n",  # unpadded
        f"{ORIGIN}\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyh=\n",  # non-canonical
        f"{ORIGIN}\n8\nqINS1GRFhWHwdkUeqLEoP4yEMkTBBzxB\n",  # 24 bytes
        f"{ORIGIN}\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",  # no final newline
        "\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n",  # empty origin
    ],
)
def test_malformed_checkpoint_body_is_refused(body: str) -> None:
    with pytest.raises(MalformedCheckpointError):
        parse_checkpoint_body(body)


def test_checkpoint_extension_lines_are_kept() -> None:
    body = f"{ORIGIN}\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\nextra data\n"
    assert parse_checkpoint_body(body).extensions == ("extra data",)
    assert parse_checkpoint_body(body).body() == body


def test_parse_checkpoint_trusts_nothing_but_reads_the_body() -> None:
    note = signed(Checkpoint(ORIGIN, 8, ROOT_8), Ed25519PrivateKey.generate())
    assert parse_checkpoint(note).tree_size == 8
    assert len(parse_note(note).signatures) == 1
