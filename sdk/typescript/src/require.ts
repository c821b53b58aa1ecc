/** `requirePermit`: the one check to run before doing irreversible work under a receipt. */
import type { Client } from "./client.js";
import {
  ApprovalPendingError,
  DeniedError,
  ExpiredPermitError,
  InvalidReceiptError,
  NotPermittedError,
  ReceiptMismatchError,
  ReceiptNotUsableError,
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
  /**
   * Accept a `single_use` PERMIT without consuming it: the caller then consumes it
   * (`client.consume`) before acting. Default false: a single-use PERMIT is refused here,
   * since nothing offline can stop it being used twice (`requirePermitAndConsume` uses it).
   */
  deferConsumption?: boolean | undefined;
}

export interface RequirePermitAndConsumeOptions extends RequirePermitOptions {
  /** The client to consume a `single_use` PERMIT with. */
  consumer: Client;
  /** Recorded with the consumption (default: `actor`). */
  consumeActor?: string | undefined;
  note?: string | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * Return the receipt if and only if it is an authentic, unexpired PERMIT matching every
 * given expectation; throw otherwise (fail closed):
 * `InvalidReceiptError` (not authentic), `DeniedError` / `SilencedError` /
 * `ApprovalPendingError` (authentic, not a PERMIT; a rejected or expired approval is a
 * DENY), `ExpiredPermitError`, `ReceiptMismatchError`; a `single_use` PERMIT
 * `ReceiptNotUsableError` (`consumer_required`) unless `deferConsumption`.
 */
export function requirePermit(receipt: unknown, options: RequirePermitOptions): PermitReceipt {
  const verdict = verify(receipt, options.keys, options);
  const permit = permitOrThrow(receipt, verdict, options);
  if (permit.single_use === true && options.deferConsumption !== true) {
    throw new ReceiptNotUsableError(
      `PERMIT ${permit.receipt_id} is single-use: consume it before acting (requirePermitAndConsume, or deferConsumption and client.consume)`,
      permit,
      { code: "consumer_required", verdict },
    );
  }
  return permit;
}

/**
 * `requirePermit`, then, for a `single_use` PERMIT (unless `deferConsumption`), consume it
 * through `consumer`: the PERMIT is returned only if this call is the one that used it.
 * A refusal throws `ReceiptNotUsableError`, an unreachable service the connection error.
 */
export async function requirePermitAndConsume(
  receipt: unknown,
  options: RequirePermitAndConsumeOptions,
): Promise<PermitReceipt> {
  const permit = requirePermit(receipt, { ...options, deferConsumption: true });
  if (permit.single_use === true && options.deferConsumption !== true) {
    await options.consumer.consume(permit, {
      actor: options.consumeActor ?? options.actor,
      note: options.note,
      signal: options.signal,
    });
  }
  return permit;
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
