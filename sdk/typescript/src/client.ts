/**
 * `Client`: authorize against the gateway, verify receipts with a cached key list,
 * and require a PERMIT before doing irreversible work.
 *
 * Retries (429 `rate_limited`, 500, 502, 503, 504, network errors and timeouts) use
 * exponential backoff with full jitter (or exactly `Retry-After` when sent), and resend the
 * very same body with the same idempotency key, so a retried execute is answered with
 * the receipt of the first evaluation, never a second decision.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleepFor } from "node:timers/promises";

import {
  ConnectionError,
  ExecauthError,
  ReceiptNotUsableError,
  UnexpectedResponseError,
  errorFromResponse,
  type Consumption,
} from "./errors.js";
import { CanonicalizationError, canonicalize } from "./jcs.js";
import { KeyListError, isRecord, parseKeyList, type KeySet } from "./keys.js";
import { requestDigest, type Approval, type PermitReceipt, type Receipt } from "./receipt.js";
import { permitOrThrow } from "./require.js";
import {
  DEFAULT_RETRY_POLICY,
  backoffDelayMs,
  isRetryableStatus,
  parseRetryAfter,
  type RetryPolicy,
} from "./retry.js";
import { verify, type Verdict } from "./verify.js";

export const VERSION = "0.1.0";

/** The server holds one `GET /v1/approvals/{id}?wait=` at most this long (seconds). */
export const MAX_APPROVAL_WAIT_SECONDS = 60;

export interface ClientOptions {
  /** The service's base address, e.g. `https://execauth.example.com` (a path prefix is kept). */
  baseUrl: string;
  /** A `service_live_…` key; needed by `authorize` (not by key fetching). Keep it in a secret store. */
  apiKey?: string | undefined;
  /** Timeout of one attempt, in milliseconds (default 10 000). */
  timeoutMs?: number | undefined;
  /** Retries after the first attempt (default 3). */
  maxRetries?: number | undefined;
  /** How long to cache the key list; default: the list's own `cache_ttl` (3600 s). */
  cacheTtlSeconds?: number | undefined;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof globalThis.fetch | undefined;
  /** Ask for a wire profile with `Prefer: wire=a|b` (default: the organization's setting). */
  wireProfile?: "a" | "b" | undefined;
  /** First backoff window in ms (default 500); doubles each retry up to `retryMaxDelayMs`. */
  retryBaseDelayMs?: number | undefined;
  /** Largest backoff window in ms (default 30 000). */
  retryMaxDelayMs?: number | undefined;
  /** A `Retry-After` above this many seconds is not waited for (default 120). */
  maxRetryAfterSeconds?: number | undefined;
  /** Refresh the key list on an unknown `key_id` at most this often, in ms (default 10 000). */
  minKeyRefreshIntervalMs?: number | undefined;
  /** For tests: how to wait (default: a timer). */
  sleep?: ((ms: number, signal?: AbortSignal) => Promise<void>) | undefined;
  /** For tests: the jitter source in [0, 1) (default `Math.random`). */
  random?: (() => number) | undefined;
  /** For tests: the clock in epoch ms, for the key cache and the default `now` (default `Date.now`). */
  clock?: (() => number) | undefined;
}

/** The request of `authorize` (variant B field names; `actor` as in A). */
export interface AuthorizeRequest {
  /** Dotted execution surface, e.g. `deploy.production`. */
  surface: string;
  actor?: string | undefined;
  action?: string | undefined;
  /** What policy sees as `context` (branch, environment, commit…). */
  context?: Record<string, unknown> | undefined;
  /** Business values (amount, currency…), `payload` in policy. */
  payload?: Record<string, unknown> | undefined;
  /** Idempotency key; default: a random UUID, reused by every retry of this call. */
  idempotencyKey?: string | undefined;
}

export interface CallOptions {
  /** Abort the call (and its retries). */
  signal?: AbortSignal | undefined;
}

export interface ClientVerifyOptions {
  now?: Date | number | string | bigint | undefined;
}

export interface AuthorizeOptions extends CallOptions {
  /**
   * On ESCALATE, wait up to this many milliseconds for the people the policy names
   * (server-side long-polls, no busy loop) and return the approval's outcome receipt:
   * the linked PERMIT, or a DENY on rejection or expiry. Still pending then: the ESCALATE
   * itself, never a permission. Default: do not wait.
   */
  waitForApprovalMs?: number | undefined;
}

export interface ClientRequirePermitOptions extends AuthorizeOptions, ClientVerifyOptions {
  /** Also require `request_digest` to be the digest of this request (default true). */
  checkRequestDigest?: boolean | undefined;
  /**
   * Return a `single_use` PERMIT without consuming it: the caller must then `consume` it
   * itself before acting (for example after checking its own intent against the grant).
   * Default false: `requirePermit` consumes it, and throws if it cannot.
   */
  deferConsumption?: boolean | undefined;
}

export interface ConsumeOptions extends CallOptions {
  /** Who is using the PERMIT (recorded with the consumption, shown to a later consumer). */
  actor?: string | undefined;
  /** Free text recorded with the consumption (at most 1000 characters). */
  note?: string | undefined;
}

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

export class Client {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #timeoutMs: number;
  readonly #retry: RetryPolicy;
  readonly #cacheTtlSeconds: number | undefined;
  readonly #fetch: typeof globalThis.fetch;
  readonly #wireProfile: "a" | "b" | undefined;
  readonly #minKeyRefreshIntervalMs: number;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly #random: () => number;
  readonly #clock: () => number;

  #keys: { set: KeySet; fetchedAt: number; expiresAt: number } | undefined;
  #keysInFlight: Promise<KeySet> | undefined;

  constructor(options: ClientOptions) {
    if (typeof options?.baseUrl !== "string" || options.baseUrl === "") {
      throw new TypeError("Client needs a baseUrl");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#retry = {
      maxRetries: options.maxRetries ?? DEFAULT_RETRY_POLICY.maxRetries,
      baseDelayMs: options.retryBaseDelayMs ?? DEFAULT_RETRY_POLICY.baseDelayMs,
      maxDelayMs: options.retryMaxDelayMs ?? DEFAULT_RETRY_POLICY.maxDelayMs,
      maxRetryAfterSeconds: options.maxRetryAfterSeconds ?? DEFAULT_RETRY_POLICY.maxRetryAfterSeconds,
    };
    this.#cacheTtlSeconds = options.cacheTtlSeconds;
    const fetchImpl = options.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== "function") throw new TypeError("no fetch implementation (Node >= 20 has one)");
    this.#fetch = fetchImpl;
    this.#wireProfile = options.wireProfile;
    this.#minKeyRefreshIntervalMs = options.minKeyRefreshIntervalMs ?? 10_000;
    this.#sleep = options.sleep ?? ((ms, signal) => sleepFor(ms, undefined, signal ? { signal } : {}));
    this.#random = options.random ?? Math.random;
    this.#clock = options.clock ?? Date.now;
  }

  /**
   * `POST /v1/execute`: the signed receipt of the decision, PERMIT, DENY, SILENCE or
   * ESCALATE alike (a DENY is an answer, not an error; under wire profile B its 403/422
   * body is the receipt, an ESCALATE's 202). Throws an `ExecauthError` subclass for wire
   * errors. With `waitForApprovalMs`, an ESCALATE is followed to its outcome (see there).
   * The receipt is returned unverified: use `verify` or `requirePermit` before relying on it.
   */
  async authorize(request: AuthorizeRequest, options: AuthorizeOptions = {}): Promise<Receipt> {
    if (this.#apiKey === undefined) throw new TypeError("authorize needs a Client with an apiKey");
    const idempotencyKey = request.idempotencyKey ?? randomUUID();
    const body: Record<string, unknown> = { surface: request.surface };
    if (request.actor !== undefined) body.actor = request.actor;
    if (request.action !== undefined) body.action = request.action;
    if (request.context !== undefined) body.context = request.context;
    if (request.payload !== undefined) body.payload = request.payload;
    body.idempotency_key = idempotencyKey;
    let text: string;
    try {
      text = canonicalize(body); // the same bytes on every attempt; refuses what the server could not sign
    } catch (error) {
      if (error instanceof CanonicalizationError) {
        throw new ExecauthError(`request cannot be sent as JSON: ${error.message}`, {
          code: "invalid_request",
          cause: error,
        });
      }
      throw error;
    }
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.#apiKey}`,
      "content-type": "application/json",
      "idempotency-key": idempotencyKey,
    };
    if (this.#wireProfile !== undefined) headers.prefer = `wire=${this.#wireProfile}`;
    const answer = await this.#call("POST", "/v1/execute", headers, text, options.signal, (status, decoded) =>
      status === 200 || ((status === 202 || status === 403 || status === 422) && looksLikeReceipt(decoded)),
    );
    if (!looksLikeReceipt(answer.body)) {
      throw new UnexpectedResponseError(`execute answered ${answer.status} without a receipt`, {
        status: answer.status,
        requestId: answer.headers.get("x-request-id") ?? undefined,
      });
    }
    const receipt = answer.body as Receipt;
    const waitMs = options.waitForApprovalMs;
    if (receipt.decision !== "ESCALATE" || waitMs === undefined || !(waitMs > 0)) return receipt;
    return this.#awaitApproval(receipt, waitMs, options.signal);
  }

  /**
   * Follow an ESCALATE's approval on this client's service (never at a URL the receipt
   * names: the API key goes only to `baseUrl`) until it has an outcome or `budgetMs` ends.
   */
  async #awaitApproval(escalation: Receipt, budgetMs: number, signal: AbortSignal | undefined): Promise<Receipt> {
    const approvalId = escalation.approval_id;
    if (typeof approvalId !== "string" || !/^service_appr_[0-9A-Za-z]{26}$/.test(approvalId)) {
      throw new UnexpectedResponseError(`ESCALATE ${escalation.receipt_id} has no usable approval_id`, {});
    }
    const headers = { authorization: `Bearer ${this.#apiKey}`, accept: "application/json" };
    const deadline = this.#clock() + budgetMs;
    for (let remaining = budgetMs; remaining > 0; remaining = deadline - this.#clock()) {
      const wait = Math.max(1, Math.min(MAX_APPROVAL_WAIT_SECONDS, Math.floor(remaining / 1000)));
      const answer = await this.#call(
        "GET",
        `/v1/approvals/${approvalId}?wait=${wait}s`,
        headers,
        undefined,
        signal,
        (status) => status === 200,
        wait * 1000 + this.#timeoutMs, // the server holds the answer up to `wait`
      );
      const approval = answer.body as Partial<Approval> | undefined;
      if (!isRecord(approval) || typeof approval.state !== "string") {
        throw new UnexpectedResponseError("the answer is not an approval", { status: answer.status });
      }
      const outcome = approval.outcome_receipt;
      if (outcome !== null && outcome !== undefined) {
        // The outcome must answer this very ESCALATE; verification (requirePermit) then
        // binds it to the request like any receipt.
        if (
          !looksLikeReceipt(outcome) ||
          outcome.approval_id !== approvalId ||
          outcome.escalation_receipt_id !== escalation.receipt_id
        ) {
          throw new UnexpectedResponseError(`approval ${approvalId} answered an outcome of another request`, {
            status: answer.status,
          });
        }
        return outcome;
      }
      if (approval.state !== "pending") {
        throw new UnexpectedResponseError(`approval ${approvalId} is ${approval.state} with no outcome`, {
          status: answer.status,
        });
      }
    }
    return escalation;
  }

  /**
   * The service's key list, cached for its `cache_ttl` (or `cacheTtlSeconds`);
   * `forceRefresh` fetches it again. Concurrent callers share one fetch.
   */
  async keys(options: { forceRefresh?: boolean | undefined; signal?: AbortSignal | undefined } = {}): Promise<KeySet> {
    const now = this.#clock();
    if (!options.forceRefresh && this.#keys !== undefined && now < this.#keys.expiresAt) {
      return this.#keys.set;
    }
    if (this.#keysInFlight === undefined) {
      this.#keysInFlight = this.#fetchKeys(options.signal).finally(() => {
        this.#keysInFlight = undefined;
      });
    }
    return this.#keysInFlight;
  }

  async #fetchKeys(signal: AbortSignal | undefined): Promise<KeySet> {
    const answer = await this.#call(
      "GET",
      "/.well-known/service-keys.json",
      { accept: "application/json" },
      undefined,
      signal,
      (status) => status === 200,
    );
    let set: KeySet;
    try {
      set = parseKeyList(answer.body);
    } catch (error) {
      if (error instanceof KeyListError) {
        throw new UnexpectedResponseError(`the key list is malformed: ${error.message}`, {
          status: answer.status,
          cause: error,
        });
      }
      throw error;
    }
    const published = isRecord(answer.body) ? answer.body.cache_ttl : undefined;
    const ttl =
      this.#cacheTtlSeconds ??
      (typeof published === "number" && Number.isFinite(published) && published >= 0 ? published : 3600);
    const fetchedAt = this.#clock();
    this.#keys = { set, fetchedAt, expiresAt: fetchedAt + ttl * 1000 };
    return set;
  }

  /**
   * Verify a receipt with the cached key list. A receipt naming a key the cache does not
   * know triggers one refresh (at most every `minKeyRefreshIntervalMs`), so a rotation
   * is picked up without waiting for the cache to expire.
   */
  async verify(receipt: unknown, options: ClientVerifyOptions & CallOptions = {}): Promise<Verdict> {
    const now = options.now ?? this.#clock();
    let verdict = verify(receipt, await this.keys({ signal: options.signal }), { now });
    if (
      verdict.reason === "unknown_key" &&
      this.#keys !== undefined &&
      this.#clock() - this.#keys.fetchedAt >= this.#minKeyRefreshIntervalMs
    ) {
      verdict = verify(receipt, await this.keys({ forceRefresh: true, signal: options.signal }), {
        now,
      });
    }
    return verdict;
  }

  /**
   * Authorize, verify and require: the receipt if it is an authentic, unexpired PERMIT
   * for exactly this surface, actor and request; otherwise throws (`DeniedError`,
   * `SilencedError`, `InvalidReceiptError`, `ExpiredPermitError`, `ReceiptMismatchError`,
   * or the wire error). A `single_use` PERMIT is consumed (as `request.actor`) before it
   * is returned, unless `deferConsumption`: a refused consumption throws
   * `ReceiptNotUsableError`, a failed one the wire or connection error, so nothing runs
   * under a PERMIT that someone else may already have used.
   */
  async requirePermit(request: AuthorizeRequest, options: ClientRequirePermitOptions = {}): Promise<PermitReceipt> {
    const receipt = await this.authorize(request, options);
    const verdict = await this.verify(receipt, options); // an outcome receipt: checked like any other
    const permit = permitOrThrow(receipt, verdict, {
      surface: request.surface,
      actor: request.actor,
      requestDigest: options.checkRequestDigest === false ? undefined : requestDigest(request),
    });
    if (permit.single_use === true && options.deferConsumption !== true) {
      await this.consume(permit, { actor: request.actor, signal: options.signal });
    }
    return permit;
  }

  /**
   * Use the PERMIT once: `POST /v1/receipts/{receipt_id}/consume`. Returns the
   * consumption (when, by which key and actor) if this call is the one that used it;
   * throws `ReceiptNotUsableError` when the service refuses (409: used already, with
   * `consumed` saying when and by whom; expired; not a PERMIT. 404: not a receipt of this
   * organization), or the wire/connection error. Exactly once across the service's
   * instances. A retry after a lost answer finds this call's own earlier use and is
   * refused too: fail closed, the work is not done twice.
   */
  async consume(receipt: Receipt, options: ConsumeOptions = {}): Promise<Consumption> {
    if (this.#apiKey === undefined) throw new TypeError("consume needs a Client with an apiKey");
    const receiptId = isRecord(receipt) ? receipt.receipt_id : undefined;
    if (typeof receiptId !== "string" || receiptId === "") {
      throw new TypeError("consume needs a receipt with a receipt_id");
    }
    const body: Record<string, string> = {};
    if (options.actor !== undefined) body.actor = options.actor;
    if (options.note !== undefined) body.note = options.note;
    const headers = {
      authorization: `Bearer ${this.#apiKey}`,
      "content-type": "application/json",
      accept: "application/json",
    };
    const path = `/v1/receipts/${encodeURIComponent(receiptId)}/consume`;
    let answer: Answer;
    try {
      answer = await this.#call("POST", path, headers, JSON.stringify(body), options.signal, (status) => status === 200);
    } catch (error) {
      if (error instanceof ExecauthError && (error.status === 404 || error.status === 409)) {
        throw new ReceiptNotUsableError(`the PERMIT cannot be used: ${error.message}`, receipt, {
          code: error.code,
          status: error.status,
          requestId: error.requestId,
          details: error.details,
          cause: error,
          consumed: error.code === "receipt_already_consumed" ? earlierConsumption(error.details) : undefined,
        });
      }
      throw error;
    }
    // Only an answer about this very receipt counts as having used it.
    const consumption = answer.body;
    if (!isRecord(consumption) || consumption.receipt_id !== receiptId || typeof consumption.consumed_at !== "string") {
      throw new UnexpectedResponseError(`the answer is not the consumption of ${receiptId}`, {
        status: answer.status,
        requestId: answer.headers.get("x-request-id") ?? undefined,
      });
    }
    return consumption as Consumption;
  }

  /** One logical call: attempts with retries until `done` accepts an answer or an error is final. */
  async #call(
    method: string,
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
    done: (status: number, body: unknown) => boolean,
    timeoutMs: number = this.#timeoutMs,
  ): Promise<Answer> {
    const url = this.baseUrl + path;
    const allHeaders = { "user-agent": `execauth-client-ts/${VERSION} node/${process.version}`, ...headers };
    for (let retry = 0; ; retry++) {
      signal?.throwIfAborted();
      let failure: ExecauthError;
      try {
        const answer = await this.#attempt(method, url, allHeaders, body, signal, timeoutMs);
        if (done(answer.status, answer.body)) return answer;
        failure = errorFromResponse(answer.status, answer.body, {
          requestId: answer.headers.get("x-request-id") ?? undefined,
          retryAfter: parseRetryAfter(answer.headers.get("retry-after"), this.#clock()),
        });
        if (!isRetryableStatus(answer.status, failure.code)) throw failure;
      } catch (error) {
        if (!(error instanceof ConnectionError)) throw error;
        failure = error;
      }
      if (retry >= this.#retry.maxRetries) throw failure;
      if (failure.retryAfter !== undefined && failure.retryAfter > this.#retry.maxRetryAfterSeconds) throw failure;
      await this.#sleep(backoffDelayMs(this.#retry, retry, this.#random, failure.retryAfter), signal);
    }
  }

  async #attempt(
    method: string,
    url: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
    timeoutMs: number,
  ): Promise<Answer> {
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), timeoutMs);
    const forward = () => timeout.abort(signal?.reason);
    signal?.addEventListener("abort", forward, { once: true });
    try {
      let response: Response;
      let text: string;
      try {
        response = await this.#fetch(url, { method, headers, body, signal: timeout.signal, redirect: "manual" });
        text = await response.text();
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        const what = timeout.signal.aborted ? `timed out after ${timeoutMs} ms` : describe(error);
        throw new ConnectionError(`${method} ${url}: ${what}`, { cause: error });
      }
      let decoded: unknown;
      try {
        decoded = text === "" ? undefined : JSON.parse(text);
      } catch {
        decoded = undefined;
      }
      return { status: response.status, headers: response.headers, body: decoded };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", forward);
    }
  }
}

function looksLikeReceipt(body: unknown): body is Receipt {
  return (
    isRecord(body) && typeof body.decision === "string" && typeof body.receipt_id === "string" && !("error" in body)
  );
}

/** `details[0]` of a 409 `receipt_already_consumed`: the earlier use, when it has that shape. */
function earlierConsumption(details: unknown[] | undefined): Consumption | undefined {
  const first = details?.[0];
  return isRecord(first) && typeof first.consumed_at === "string" && isRecord(first.consumed_by)
    ? (first as Consumption)
    : undefined;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
