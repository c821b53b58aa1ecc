/**
 * The one error hierarchy of the client.
 *
 * Wire errors (docs/api.md, "Errors") become `ExecauthError` subclasses chosen by their
 * wire `code`, whichever profile rendered them (A: `{"error": code, "message", "request_id"}`,
 * B: `{"error": {"code", "message", "request_id"}}`). Failures on the client's side of
 * the wire and refusals of `requirePermit` have their own subclasses:
 *
 *     ExecauthError
 *     ├── InvalidRequestError         400 invalid_request
 *     ├── UnauthorizedError           401 unauthorized
 *     ├── ForbiddenError              403 forbidden
 *     ├── NotFoundError               404 not_found
 *     │   └── SurfaceNotFoundError    404 surface_not_found
 *     ├── MethodNotAllowedError       405 method_not_allowed
 *     ├── IdempotencyConflictError    409 idempotency_conflict
 *     ├── PayloadTooLargeError        413 payload_too_large
 *     ├── RateLimitedError            429 rate_limited
 *     ├── PlanLimitExceededError      429 SERVICE_PLAN_LIMIT_EXCEEDED
 *     ├── InternalServerError         500 internal_error
 *     ├── ServiceUnavailableError     503 service_unavailable
 *     ├── ConnectionError             network failure or timeout (no answer)
 *     ├── UnexpectedResponseError     an answer that is neither a receipt nor an error body
 *     └── PermitRequiredError         requirePermit refused the receipt
 *         ├── InvalidReceiptError     not authentic (verdict.reason says why)
 *         ├── NotPermittedError       authentic, but not a PERMIT
 *         │   ├── DeniedError         DENY (a rejected or expired approval too)
 *         │   ├── SilencedError       SILENCE (fail closed)
 *         │   ├── ApprovalPendingError ESCALATE, not (yet) approved
 *         │   └── ReceiptNotUsableError a single-use PERMIT this call could not consume
 *         │                           (used already: `consumed` says when and by whom;
 *         │                           expired; unknown; no client to consume it with)
 *         ├── ExpiredPermitError      authentic PERMIT past its expires_at
 *         └── ReceiptMismatchError    authentic PERMIT for another surface/actor/request
 */
import type { Receipt } from "./receipt.js";
import type { Verdict } from "./verify.js";

export interface ErrorInit {
  status?: number | undefined;
  code?: string | undefined;
  requestId?: string | undefined;
  details?: unknown[] | undefined;
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  retryAfter?: number | undefined;
  cause?: unknown;
}

/** Base of every error the client throws. */
export class ExecauthError extends Error {
  override name = "ExecauthError";
  /** The wire error code, or a client-side code such as `connection_error`. */
  readonly code: string;
  /** The HTTP status, when an answer was received. */
  readonly status: number | undefined;
  /** The server's request id (`request_id` of the error body or `X-Request-Id`). */
  readonly requestId: string | undefined;
  readonly details: unknown[] | undefined;
  readonly retryAfter: number | undefined;

  constructor(message: string, init: ErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code ?? (new.target as unknown as { defaultCode?: string }).defaultCode ?? "error";
    this.status = init.status;
    this.requestId = init.requestId;
    this.details = init.details;
    this.retryAfter = init.retryAfter;
  }
}

export class InvalidRequestError extends ExecauthError {
  static defaultCode = "invalid_request";
  override name = "InvalidRequestError";
}
export class UnauthorizedError extends ExecauthError {
  static defaultCode = "unauthorized";
  override name = "UnauthorizedError";
}
export class ForbiddenError extends ExecauthError {
  static defaultCode = "forbidden";
  override name = "ForbiddenError";
}
export class NotFoundError extends ExecauthError {
  static defaultCode = "not_found";
  override name = "NotFoundError";
}
export class SurfaceNotFoundError extends NotFoundError {
  static override defaultCode = "surface_not_found";
  override name = "SurfaceNotFoundError";
}
export class MethodNotAllowedError extends ExecauthError {
  static defaultCode = "method_not_allowed";
  override name = "MethodNotAllowedError";
}
export class IdempotencyConflictError extends ExecauthError {
  static defaultCode = "idempotency_conflict";
  override name = "IdempotencyConflictError";
}
export class PayloadTooLargeError extends ExecauthError {
  static defaultCode = "payload_too_large";
  override name = "PayloadTooLargeError";
}
export class RateLimitedError extends ExecauthError {
  static defaultCode = "rate_limited";
  override name = "RateLimitedError";
}
/** The organization's monthly quota is exhausted (not retried: it will not clear in seconds). */
export class PlanLimitExceededError extends ExecauthError {
  static defaultCode = "SERVICE_PLAN_LIMIT_EXCEEDED";
  override name = "PlanLimitExceededError";
}
export class InternalServerError extends ExecauthError {
  static defaultCode = "internal_error";
  override name = "InternalServerError";
}
export class ServiceUnavailableError extends ExecauthError {
  static defaultCode = "service_unavailable";
  override name = "ServiceUnavailableError";
}
/** No answer: the connection failed or the attempt timed out. */
export class ConnectionError extends ExecauthError {
  static defaultCode = "connection_error";
  override name = "ConnectionError";
}
/** An answer that is neither a receipt nor a recognizable error body. */
export class UnexpectedResponseError extends ExecauthError {
  static defaultCode = "unexpected_response";
  override name = "UnexpectedResponseError";
}

/** Wire code → class. Codes this client does not know map to `ExecauthError` itself. */
const BY_CODE: Record<string, new (message: string, init?: ErrorInit) => ExecauthError> = {
  invalid_request: InvalidRequestError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  surface_not_found: SurfaceNotFoundError,
  method_not_allowed: MethodNotAllowedError,
  idempotency_conflict: IdempotencyConflictError,
  payload_too_large: PayloadTooLargeError,
  rate_limited: RateLimitedError,
  SERVICE_PLAN_LIMIT_EXCEEDED: PlanLimitExceededError,
  internal_error: InternalServerError,
  service_unavailable: ServiceUnavailableError,
};

/** Status → class, for error answers whose body carries no code (a proxy's 502 page…). */
const BY_STATUS: Record<number, new (message: string, init?: ErrorInit) => ExecauthError> = {
  400: InvalidRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  405: MethodNotAllowedError,
  409: IdempotencyConflictError,
  413: PayloadTooLargeError,
  429: RateLimitedError,
  500: InternalServerError,
  502: ServiceUnavailableError,
  503: ServiceUnavailableError,
  504: ServiceUnavailableError,
};

/**
 * The error an HTTP error answer stands for. `body` is the decoded JSON (or undefined);
 * both profiles are read: flat `{"error": "code", ...}` and nested `{"error": {"code", ...}}`.
 */
export function errorFromResponse(
  status: number,
  body: unknown,
  init: { requestId?: string | undefined; retryAfter?: number | undefined } = {},
): ExecauthError {
  let code: string | undefined;
  let message: string | undefined;
  let requestId = init.requestId;
  let details: unknown[] | undefined;
  if (typeof body === "object" && body !== null && "error" in body) {
    const record = body as Record<string, unknown>;
    const error = record.error;
    const fields: Record<string, unknown> =
      typeof error === "object" && error !== null ? (error as Record<string, unknown>) : record;
    const rawCode = typeof error === "string" ? error : fields.code;
    if (typeof rawCode === "string") code = rawCode;
    if (typeof fields.message === "string") message = fields.message;
    if (typeof fields.request_id === "string") requestId = fields.request_id;
    if (Array.isArray(fields.details)) details = fields.details;
  }
  const Class = (code !== undefined ? BY_CODE[code] : undefined) ?? BY_STATUS[status] ?? ExecauthError;
  return new Class(message ?? `HTTP ${status}${code ? ` ${code}` : ""}`, {
    status,
    code: code ?? (Class === ExecauthError ? `http_${status}` : undefined),
    requestId,
    details,
    retryAfter: init.retryAfter,
  });
}

/** `requirePermit` refused the receipt: nothing may be executed under it. */
export class PermitRequiredError extends ExecauthError {
  override name = "PermitRequiredError";
  /** The receipt that was refused (whatever was received). */
  readonly receipt: unknown;
  /** The verifier's verdict on it. */
  readonly verdict: Verdict | undefined;

  constructor(
    message: string,
    receipt: unknown,
    verdict: Verdict | undefined,
    code: string,
    init: Omit<ErrorInit, "code"> = {},
  ) {
    super(message, { ...init, code });
    this.receipt = receipt;
    this.verdict = verdict;
  }
}

/** The receipt is not authentic; `verdict.reason` is the verifier's reason code. */
export class InvalidReceiptError extends PermitRequiredError {
  override name = "InvalidReceiptError";
  constructor(receipt: unknown, verdict: Verdict) {
    super(`receipt is not authentic: ${verdict.reason}: ${verdict.detail}`, receipt, verdict, "invalid_receipt");
  }
}

/** The receipt is authentic but its decision is DENY, SILENCE or ESCALATE. */
export class NotPermittedError extends PermitRequiredError {
  override name = "NotPermittedError";
  override readonly receipt: Receipt;
  /** `DENY`, `SILENCE` or `ESCALATE`. */
  readonly decision: string;
  /** The detailed `SERVICE_POLICY_*` reason (`reasonCode`), or `reason_code`. */
  readonly reasonCode: string | undefined;

  constructor(
    receipt: Receipt,
    verdict: Verdict | undefined,
    code = "not_permitted",
    init: Omit<ErrorInit, "code"> & { message?: string | undefined } = {},
  ) {
    const reason = receipt.reasonCode ?? receipt.reason_code;
    const { message, ...rest } = init;
    super(
      message ??
        `${receipt.decision} for ${receipt.surface}${reason ? ` (${reason})` : ""}${receipt.message ? `: ${receipt.message}` : ""}`,
      receipt,
      verdict,
      code,
      rest,
    );
    this.receipt = receipt;
    this.decision = receipt.decision;
    this.reasonCode = reason;
  }
}

export class DeniedError extends NotPermittedError {
  override name = "DeniedError";
  constructor(receipt: Receipt, verdict: Verdict) {
    super(receipt, verdict, "denied");
  }
}

/** Indeterminate evaluation: fail closed. */
export class SilencedError extends NotPermittedError {
  override name = "SilencedError";
  constructor(receipt: Receipt, verdict: Verdict) {
    super(receipt, verdict, "silenced");
  }
}

/** An authentic ESCALATE: people have not approved (yet); nothing may run under it. */
export class ApprovalPendingError extends NotPermittedError {
  override name = "ApprovalPendingError";
  /** The approval to follow (`GET /v1/approvals/{id}`, or the same request again). */
  readonly approvalId: string | undefined;
  constructor(receipt: Receipt, verdict: Verdict) {
    super(receipt, verdict, "approval_pending");
    this.approvalId = receipt.approval_id;
  }
}

/** The earlier use of a PERMIT, as the service reports it (`details[0]` of a 409). */
export interface Consumption {
  receipt_id: string;
  execution_id: string;
  consumed_at: string;
  consumed_by: { key_id: string; actor?: string };
  note?: string;
  [field: string]: unknown;
}

/**
 * A single-use PERMIT that this call could not consume, so the work must not run:
 * the service refused (`code` is its `receipt_already_consumed`, `receipt_expired`,
 * `receipt_not_permit` or `not_found`; `status` 409 or 404), or there was no client to
 * consume it with (`consumer_required`, no status). A network failure while consuming is
 * a `ConnectionError` instead: it fails closed the same way.
 */
export class ReceiptNotUsableError extends NotPermittedError {
  override name = "ReceiptNotUsableError";
  /** The earlier consumption (when, which key, which actor) on `receipt_already_consumed`. */
  readonly consumed: Consumption | undefined;
  constructor(
    message: string,
    receipt: Receipt,
    init: Omit<ErrorInit, "code"> & { code: string; verdict?: Verdict | undefined; consumed?: Consumption | undefined },
  ) {
    const { code, verdict, consumed, ...rest } = init;
    super(receipt, verdict, code, { ...rest, message });
    this.consumed = consumed;
  }
}

export class ExpiredPermitError extends PermitRequiredError {
  override name = "ExpiredPermitError";
  constructor(receipt: Receipt, verdict: Verdict) {
    super(`PERMIT ${receipt.receipt_id} expired at ${String(receipt.expires_at)}`, receipt, verdict, "expired_permit");
  }
}

/** An authentic PERMIT, but for another surface, actor or request. */
export class ReceiptMismatchError extends PermitRequiredError {
  override name = "ReceiptMismatchError";
  readonly mismatches: string[];
  constructor(receipt: Receipt, verdict: Verdict, mismatches: string[]) {
    super(`receipt does not match the request: ${mismatches.join("; ")}`, receipt, verdict, "receipt_mismatch");
    this.mismatches = mismatches;
  }
}
