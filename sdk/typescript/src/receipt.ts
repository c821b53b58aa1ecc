/** Receipt shapes (docs/receipts.md) and the signing payload. */
import { createHash } from "node:crypto";

import { canonicalizeToBytes } from "./jcs.js";

/** ESCALATE: held for people to approve (docs/approvals.md); never a permission. */
export type Decision = "PERMIT" | "DENY" | "SILENCE" | "ESCALATE";
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
  /** PERMIT (or ESCALATE): the bound grant the executor must respect (`checkIntent`). */
  constraints?: Record<string, unknown>;
  /** PERMIT (or ESCALATE): `true` when the PERMIT must be consumed before acting. */
  single_use?: true;
  key_id: string;
  signature: string;
  authoritySignature?: string;
  receiptHash?: string;
  /** ESCALATE, and the outcome receipt of its approval: `service_appr_…`. */
  approval_id?: string;
  /** ESCALATE: the deadline for the approvals. */
  approval_expires_at?: string;
  /** ESCALATE: distinct approvals needed. */
  approval_quorum?: number;
  /** ESCALATE: where the requester follows the approval. */
  approval_url?: string;
  /** Outcome of an approval: `approved` (a PERMIT), `rejected` or `expired` (a DENY). */
  approval_outcome?: "approved" | "rejected" | "expired";
  /** Outcome of an approval: the ESCALATE receipt it answers. */
  escalation_receipt_id?: string;
  /** Outcome PERMIT: who approved, each once (signed). */
  approvers?: Array<{ key_id: string; vote: string; actor?: string; reason?: string; at: string }>;
  [field: string]: unknown;
}

/** `GET /v1/approvals/{id}`: an approval as its requester sees it. */
export interface Approval {
  approval_id: string;
  state: "pending" | "approved" | "rejected" | "expired";
  quorum: number;
  approvals: number;
  expires_at: string;
  escalation_receipt: Receipt;
  /** The linked PERMIT (approved) or DENY (rejected, expired) once final. */
  outcome_receipt: Receipt | null;
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
