"""Every error this client raises: one tree under ``ExecauthError``.

```
ExecauthError
├── Unauthorized          401 unauthorized: missing or invalid API key
├── Forbidden             403 forbidden: the key may not use this surface
├── InvalidRequest        400/409/413: the request itself is wrong (not retried)
├── SurfaceNotFound       404 surface_not_found: no policy covers the surface
├── RateLimited           429 rate_limited (retried; raised once retries run out)
├── QuotaExceeded         429 SERVICE_PLAN_LIMIT_EXCEEDED: monthly quota spent (not retried)
├── ServiceUnavailable    5xx, or the service could not be reached (retried first)
├── UnexpectedResponse    the answer is neither a receipt nor an error body
├── VerificationFailed    a receipt is not authentic, or does not match the request
└── NotPermitted          an authentic receipt that does not permit the work (DENY,
    │                     SILENCE, or an expired PERMIT)
    └── ReceiptNotUsable  a single-use PERMIT this call could not consume (used already:
                          ``consumed`` says when and by whom; expired; unknown)
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execauth_client.receipt import Receipt
    from execauth_client.verify import Verdict


class ExecauthError(Exception):
    """Base class. ``status``/``code``/``request_id`` are set when the service answered."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.request_id = request_id
        self.retry_after = retry_after


class Unauthorized(ExecauthError):
    pass


class Forbidden(ExecauthError):
    pass


class InvalidRequest(ExecauthError):
    pass


class SurfaceNotFound(ExecauthError):
    pass


class RateLimited(ExecauthError):
    pass


class QuotaExceeded(ExecauthError):
    pass


class ServiceUnavailable(ExecauthError):
    pass


class UnexpectedResponse(ExecauthError):
    pass


class VerificationFailed(ExecauthError):
    """``verdict`` says why (its ``reason`` is a verifier code, or ``"mismatch"``)."""

    def __init__(self, message: str, verdict: Verdict, receipt: Receipt | None = None) -> None:
        super().__init__(message, code=verdict.reason)
        self.verdict = verdict
        self.receipt = receipt


class NotPermitted(ExecauthError):
    """The work must not proceed: ``receipt.decision`` is DENY or SILENCE, or it expired."""

    def __init__(self, message: str, receipt: Receipt) -> None:
        super().__init__(message, code=receipt.decision)
        self.receipt = receipt


class ReceiptNotUsable(NotPermitted):
    """``POST /v1/receipts/{id}/consume`` refused: the work must not proceed.

    ``code`` is the service's (``receipt_already_consumed``, ``receipt_expired``,
    ``receipt_not_permit``, ``not_found``); ``consumed`` is the earlier consumption
    (``consumed_at``, ``consumed_by``) when the PERMIT was used already.
    """

    def __init__(
        self,
        message: str,
        receipt: Receipt,
        *,
        code: str | None,
        status: int | None,
        consumed: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, receipt)
        self.code = code
        self.status = status
        self.consumed = consumed
