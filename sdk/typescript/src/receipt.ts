/** Receipt shapes (DESIGN.md §2, docs/receipts.md) and the signing payload. */
import { createHash } from "node:crypto";

import { canonicalizeToBytes } from "./jcs.js";

export type Decision = "PERMIT" | "DENY" | "SILENCE";
export type Enforcement = "EXECUTED" | "BLOCKED";

/** The response body of `POST /v1/execute`: a signed receipt (superset of variants A, B, C). */
export interface Receipt {
  receipt_id: string;
  execution_id: string;
  decision: Decision;
  enforcement: Enforcement;
  surface: string;
  action?: string;
  actor?: string;
  org_id: string;
  issuer: string;
  /** Decision time, RFC 3339 UTC with milliseconds. */
  timestamp: string;
  /** PERMIT only: the receipt is usable until then. */
  expires_at?: string;
  policy_id: string;
  policy_version: number;
  policy_hash: string;
  rule_id: string | null;
  /** DENY: `POLICY_VIOLATION`; SILENCE: `INDETERMINATE_EVALUATION`. */
  reason_code?: string;
  /** DENY/SILENCE: the detailed `SERVICE_POLICY_*` code. */
  reasonCode?: string;
  message?: string;
  request_id?: string;
  request_digest: string;
  key_id: string;
  signature: string;
  authoritySignature?: string;
  receiptHash?: string;
  [field: string]: unknown;
}

/** A receipt whose decision is PERMIT (what `requirePermit` hands back). */
export type PermitReceipt = Receipt & { decision: "PERMIT"; expires_at: string };

/** Fields that carry the signature and so are not covered by it. */
export const UNSIGNED_FIELDS: readonly string[] = ["signature", "authoritySignature", "receiptHash"];
export const SIGNATURE_PREFIX = "ed25519:";

/** The exact bytes the signature covers: RFC 8785 JSON of the receipt minus the unsigned fields. */
export function signingPayload(receipt: Record<string, unknown>): Buffer {
  const signed: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(receipt)) {
    if (!UNSIGNED_FIELDS.includes(name)) signed[name] = value;
  }
  return canonicalizeToBytes(signed);
}

/** The normalized request a receipt's `request_digest` covers (absent fields as the server fills them). */
export interface DigestInput {
  surface: string;
  action?: string | null | undefined;
  actor?: string | null | undefined;
  context?: Record<string, unknown> | null | undefined;
  payload?: Record<string, unknown> | null | undefined;
}

/**
 * `sha256:<hex>` of the RFC 8785 JSON of `{surface, action, actor, context, payload}`,
 * absent `action`/`actor` as `null` and absent `context`/`payload` as `{}`: the value
 * the server writes into `request_digest` for this request.
 */
export function requestDigest(request: DigestInput): string {
  const normalized = {
    surface: request.surface,
    action: request.action ?? null,
    actor: request.actor ?? null,
    context: request.context ?? {},
    payload: request.payload ?? {},
  };
  return "sha256:" + createHash("sha256").update(canonicalizeToBytes(normalized)).digest("hex");
}
