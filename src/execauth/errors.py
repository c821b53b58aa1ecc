"""The one error hierarchy of execauth.

Every failure that can reach a client is an ``ExecauthError`` subclass carrying
its wire ``code`` and HTTP ``status`` (docs/api.md, "Errors"). The API layer
renders them in one place (``execauth.api.errors``); nothing else builds error
bodies. The tree:

    ExecauthError
    ├── InvalidRequest          400 invalid_request
    ├── Unauthorized            401 unauthorized
    ├── Forbidden               403 forbidden
    ├── NotFound                404 not_found
    │   └── SurfaceNotFound     404 surface_not_found
    ├── MethodNotAllowed        405 method_not_allowed
    ├── IdempotencyConflict     409 idempotency_conflict
    ├── ReceiptAlreadyConsumed  409 receipt_already_consumed
    ├── ReceiptNotPermit        409 receipt_not_permit
    │   └── ReceiptExpired      409 receipt_expired
    ├── PayloadTooLarge         413 payload_too_large
    ├── UnsupportedMediaType    415 unsupported_media_type
    ├── RateLimited             429 rate_limited
    ├── QuotaExceeded           429 SERVICE_PLAN_LIMIT_EXCEEDED
    ├── ClientDisconnected      499 client_closed_request (nobody reads it)
    ├── InternalError           500 internal_error
    └── ServiceUnavailable      503 service_unavailable
        └── SigningUnavailable  503 service_unavailable (no usable signing key)
"""

from __future__ import annotations


class ExecauthError(Exception):
    """Base of every error that maps to a wire response."""

    code: str = "internal_error"
    status: int = 500

    def __init__(
        self,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        details: list[dict[str, object]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}
        self.details = details


class InvalidRequest(ExecauthError):
    code = "invalid_request"
    status = 400


class Unauthorized(ExecauthError):
    code = "unauthorized"
    status = 401


class Forbidden(ExecauthError):
    code = "forbidden"
    status = 403


class NotFound(ExecauthError):
    code = "not_found"
    status = 404


class SurfaceNotFound(NotFound):
    code = "surface_not_found"


class MethodNotAllowed(ExecauthError):
    code = "method_not_allowed"
    status = 405


class IdempotencyConflict(ExecauthError):
    code = "idempotency_conflict"
    status = 409


class ApprovalClosed(ExecauthError):
    """The approval is already final (approved, rejected, expired) or this key already voted."""

    code = "approval_closed"
    status = 409


class ReceiptAlreadyConsumed(ExecauthError):
    """A PERMIT used once already; ``details`` say when and by whom (docs/receipts.md)."""

    code = "receipt_already_consumed"
    status = 409


class PayloadTooLarge(ExecauthError):
    code = "payload_too_large"
    status = 413


class UnsupportedMediaType(ExecauthError):
    code = "unsupported_media_type"
    status = 415


class ReceiptNotPermit(ExecauthError):
    """Only a PERMIT can be used: a DENY, SILENCE or ESCALATE receipt never can.

    409 like an already used one: the receipt exists and the caller may see it, but its
    state does not allow the use; the code says which state (docs/receipts.md).
    """

    code = "receipt_not_permit"
    status = 409


class ReceiptExpired(ReceiptNotPermit):
    """A PERMIT past its ``expires_at`` permits nothing any more, so it cannot be used."""

    code = "receipt_expired"


class RateLimited(ExecauthError):
    code = "rate_limited"
    status = 429


class QuotaExceeded(ExecauthError):
    code = "SERVICE_PLAN_LIMIT_EXCEEDED"
    status = 429


class ClientDisconnected(ExecauthError):
    """The client went away before its request was read: nothing was evaluated.

    Not a server error (no 5xx, no traceback): 499 is nginx's "client closed request",
    kept apart in the execute metric; the answer goes to nobody.
    """

    code = "client_closed_request"
    status = 499


class InternalError(ExecauthError):
    code = "internal_error"
    status = 500


class ServiceUnavailable(ExecauthError):
    code = "service_unavailable"
    status = 503

    def __init__(
        self,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        details: list[dict[str, object]] | None = None,
    ) -> None:
        # Tell well-behaved clients (and our SDKs) when to retry, rather than at once.
        super().__init__(message, headers={"Retry-After": "1", **(headers or {})}, details=details)


class SigningUnavailable(ServiceUnavailable):
    """No active signing key could be loaded: we refuse to answer unsigned."""


class ReceiptIdTaken(ServiceUnavailable):
    """Another stored receipt has the id this one was signed with; nothing was stored.

    Receipt ids follow time and leave 22 bits to chance (``receipts.new_receipt_id``),
    so two receipts of one millisecond can draw the same id. The execute use case signs
    such a receipt again under a new id; only if that keeps failing does a client see
    this, as the 503 it is.
    """


class PolicyInvalid(InvalidRequest):
    """A policy document was refused at publish time; ``problems`` says where and why."""

    def __init__(self, problems: list[PolicyProblem]) -> None:
        self.problems = problems
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(
            f"invalid policy: {problems[0]}{more}", details=[p.as_dict() for p in problems]
        )


class PolicyProblem:
    """One reason a policy document is invalid, located as precisely as we can."""

    __slots__ = ("line", "path", "reason", "rule_id")

    def __init__(
        self, path: str, reason: str, *, rule_id: str | None = None, line: int | None = None
    ) -> None:
        self.path = path
        self.reason = reason
        self.rule_id = rule_id
        self.line = line

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "rule_id": self.rule_id,
            "reason": self.reason,
        }

    def __str__(self) -> str:
        where = self.path + (f" (line {self.line})" if self.line is not None else "")
        return f"{where}: {self.reason}"
