/** Retry policy: exponential backoff with full jitter, honouring `Retry-After`. */

export interface RetryPolicy {
  /** Retries after the first attempt (so at most `maxRetries + 1` attempts). */
  maxRetries: number;
  /** Cap of the first backoff window, in milliseconds; it doubles on each retry. */
  baseDelayMs: number;
  /** Largest backoff window, in milliseconds. */
  maxDelayMs: number;
  /** A `Retry-After` longer than this (seconds) is not waited for: the error is thrown. */
  maxRetryAfterSeconds: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxRetries: 3,
  baseDelayMs: 500,
  maxDelayMs: 30_000,
  maxRetryAfterSeconds: 120,
};

/**
 * Milliseconds to wait before retry number `retry` (0 for the first retry): the server's
 * `Retry-After` when it sent one, else "full jitter", a uniform draw in
 * `[0, min(maxDelay, base·2^retry))` (the same rule and defaults as the Python SDK).
 */
export function backoffDelayMs(
  policy: RetryPolicy,
  retry: number,
  random: () => number,
  retryAfterSeconds?: number,
): number {
  if (retryAfterSeconds !== undefined) return Math.ceil(retryAfterSeconds * 1000);
  const window = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** retry);
  return Math.floor(random() * window);
}

/** `Retry-After` as seconds: delta-seconds or an HTTP-date (RFC 9110 §10.2.3); `undefined` if absent or unreadable. */
export function parseRetryAfter(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, (date - nowMs) / 1000);
}

/** Status codes worth another attempt with the same idempotency key. */
export function isRetryableStatus(status: number, code: string | undefined): boolean {
  if (status === 429) return code !== "SERVICE_PLAN_LIMIT_EXCEEDED"; // a monthly quota does not clear in seconds
  return status === 500 || status === 502 || status === 503 || status === 504;
}
