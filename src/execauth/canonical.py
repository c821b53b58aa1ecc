"""RFC 8785 (JCS) canonical JSON, with a fast path for the values we sign most.

``rfc8785.dumps`` is pure Python and costs about 30 µs for one receipt; the
gateway canonicalizes twice per request (request digest, signing payload).
``msgspec`` with sorted keys produces the same bytes in about 1.5 µs, but only
for a subset of JSON, so the fast path is taken only when the value is in it:

- strings: msgspec and JCS escape the same characters the same way (``"``,
  ``\\``, and U+0000–U+001F as ``\\b \\t \\n \\f \\r`` or lowercase ``\\u00xx``)
  and write every other character as UTF-8; a lone surrogate makes msgspec
  raise, and we fall back (where ``rfc8785`` refuses it too);
- integers within ±(2^53 − 1), ``true``, ``false``, ``null``;
- object keys without characters above U+FFFF: JCS sorts keys by UTF-16 code
  units, msgspec by code points, and the two orders differ only there.

Floats (JCS prescribes ECMAScript number formatting) and anything else go to
``rfc8785``. ``tests/test_canonical.py`` checks byte equality against ``rfc8785``
on the shared vectors and on arbitrary generated JSON (hypothesis).
"""

from __future__ import annotations

from typing import Any

import msgspec
import rfc8785

CanonicalizationError = rfc8785.CanonicalizationError

_MAX_SAFE_INTEGER = 2**53 - 1
_ASTRAL = "\U00010000"


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 bytes of ``value``; ``CanonicalizationError`` when it has none.

    ``rfc8785`` reports a lone surrogate in an object key as a bare
    ``UnicodeEncodeError``; callers get one exception type for every input JCS
    cannot represent.
    """
    return canonical_form(value)[0]


def canonical_form(value: Any) -> tuple[bytes, bool]:
    """``canonical_json``'s bytes, and whether ``value`` is plain JSON.

    Plain: strings of valid Unicode, integers within ±(2^53 − 1), booleans, null, and
    lists and objects (string keys without characters above U+FFFF) of those, the
    values the fast path takes. A caller that learns a value is plain knows more about
    it for free: every value in it converts to CEL, for example
    (``ExecuteRequest.plain``).
    """
    if _in_fast_subset(value):
        try:
            return msgspec.json.encode(value, order="sorted"), True
        except UnicodeEncodeError:
            pass  # a lone surrogate: let rfc8785 name the problem
    try:
        return rfc8785.dumps(value), False
    except UnicodeError as exc:
        raise CanonicalizationError(f"input is not valid Unicode: {exc}") from exc


def _in_fast_subset(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and max(key) >= _ASTRAL):
                return False
            if not _in_fast_subset(item):
                return False
        return True
    if kind is list:
        return all(_in_fast_subset(item) for item in value)
    return False
