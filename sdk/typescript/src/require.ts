/** `requirePermit`: the one check to run before doing irreversible work under a receipt. */
import {
  ApprovalPendingError,
  DeniedError,
  ExpiredPermitError,
  InvalidReceiptError,
  NotPermittedError,
  ReceiptMismatchError,
  SilencedError,
} from "./errors.js";
import type { PermitReceipt, Receipt } from "./receipt.js";
import { unmetExpectations, verify, type Keys, type Verdict, type VerifyOptions } from "./verify.js";

export interface RequirePermitOptions extends VerifyOptions {
  /** The key list (document as fetched, parsed `KeySet`, or map of keys). */
  keys: Keys;
  /** The surface the work is about to touch; the receipt must name it. */
  surface?: string | undefined;
  /** The actor doing the work; the receipt must name it. */
  actor?: string | undefined;
  /** `requestDigest({...})` of the exact request; the receipt's `request_digest` must equal it. */
  requestDigest?: string | undefined;
}

/**
 * Return the receipt if and only if it is an authentic, unexpired PERMIT matching every
 * given expectation; throw otherwise (fail closed):
 * `InvalidReceiptError` (not authentic), `DeniedError` / `SilencedError` /
 * `ApprovalPendingError` (authentic, not a PERMIT; a rejected or expired approval is a
 * DENY), `ExpiredPermitError`, `ReceiptMismatchError`.
 */
export function requirePermit(receipt: unknown, options: RequirePermitOptions): PermitReceipt {
  const verdict = verify(receipt, options.keys, options);
  return permitOrThrow(receipt, verdict, options);
}

/** The decision part of `requirePermit`, for a verdict already computed. */
export function permitOrThrow(
  receipt: unknown,
  verdict: Verdict,
  expected: { surface?: string | undefined; actor?: string | undefined; requestDigest?: string | undefined },
): PermitReceipt {
  if (!verdict.authentic) throw new InvalidReceiptError(receipt, verdict);
  const authentic = receipt as Receipt;
  if (authentic.decision === "DENY") throw new DeniedError(authentic, verdict);
  if (authentic.decision === "SILENCE") throw new SilencedError(authentic, verdict);
  if (authentic.decision === "ESCALATE") throw new ApprovalPendingError(authentic, verdict);
  if (authentic.decision !== "PERMIT") throw new NotPermittedError(authentic, verdict);
  const mismatches = unmetExpectations(authentic, expected);
  if (mismatches.length > 0) throw new ReceiptMismatchError(authentic, verdict, mismatches);
  if (verdict.expired) throw new ExpiredPermitError(authentic, verdict);
  return authentic as PermitReceipt;
}
