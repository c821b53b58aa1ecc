"""The receipt's signature form and unsigned fields: shared by signing and offline verification.

A module of its own, with no imports, so that ``execauth.verify`` (and ``execauth verify``)
can use them without importing the receipt builder and through it the policy engine.
"""

from __future__ import annotations

SIGNATURE_PREFIX = "ed25519:"
# Left out of the signed payload: the signature itself, its alias and the payload's digest.
UNSIGNED_FIELDS = frozenset({"signature", "authoritySignature", "receiptHash"})
