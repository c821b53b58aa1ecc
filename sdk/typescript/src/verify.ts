/**
 * Offline receipt verification: a receipt and a key list in, a verdict out.
 *
 * A line-by-line port of the reference verifier (`execauth.verify.verify_receipt`):
 * the checks run in the same order and the first failure is the verdict's `reason`,
 * with the same reason codes, so both agree on every shared test vector. It reads no
 * network; the clock only when the caller passes no `now`.
 *
 * | # | check                                                                 | reason                       |
 * |---|-----------------------------------------------------------------------|------------------------------|
 * | 1 | a JSON object with a string `key_id`                                  | `malformed_receipt`          |
 * | 2 | `signature` is a string starting `ed25519:`                           | `malformed_receipt`          |
 * | 3 | `authoritySignature`, if present, equals `signature`                  | `signature_fields_disagree`  |
 * | 4 | `timestamp` is RFC 3339 with a zone                                   | `malformed_receipt`          |
 * | 5 | `decision` is PERMIT, DENY, SILENCE or ESCALATE                       | `malformed_receipt`          |
 * | 6 | `key_id` is in the key list                                           | `unknown_key`                |
 * | 7 | the key is not revoked                                                | `revoked_key`                |
 * | 8 | `created_at <= timestamp < expires_at` of the key                     | `key_not_valid_at_timestamp` |
 * | 9 | the key list's `issuer`, if any, equals the receipt's                 | `issuer_mismatch`            |
 * |10 | the Ed25519 signature over the payload verifies                       | `bad_signature`              |
 * |11 | `receiptHash`, if present, is SHA-256 of the payload                  | `receipt_hash_mismatch`      |
 * |12 | PERMIT: `expires_at` parses                                           | `malformed_receipt`          |
 * |13 | ESCALATE: an `approval_id`; `approvers`, if present, is a list of     | `malformed_receipt`          |
 * |   | objects with a string `key_id`                                        |                              |
 *
 * A PERMIT with `expires_at <= now` is authentic but `expired`: not usable. An ESCALATE
 * is authentic or not like any other decision, and never a permission (the guards act on
 * PERMIT only): the verdict names its `approvalId`. The PERMIT an approval issued names
 * its approvers (signed, so a verdict can say who approved: `approvers`).
 */
import { createHash, verify as ed25519Verify } from "node:crypto";

import { isRecord, KeyListError, parseKeyList, type KeyListDocument, type KeySet, type PublishedKey } from "./keys.js";
import { SIGNATURE_PREFIX, signingPayload } from "./receipt.js";
import { parseTimestamp, toInstant } from "./time.js";
import { decodeBase64Strict } from "./keys.js";

export type VerdictReason =
  | "valid"
  | "malformed_receipt"
  | "signature_fields_disagree"
  | "unknown_key"
  | "revoked_key"
  | "key_not_valid_at_timestamp"
  | "issuer_mismatch"
  | "bad_signature"
  | "receipt_hash_mismatch";

/** The outcome of `verify`: `reason` is `"valid"` or the first problem found. */
export interface Verdict {
  readonly authentic: boolean;
  readonly reason: VerdictReason;
  /** Human-readable explanation. */
  readonly detail: string;
  readonly keyId: string | null;
  readonly decision: string | null;
  /** A PERMIT whose `expires_at <= now` (only ever true when authentic). */
  readonly expired: boolean;
  /** Authentic and, for a PERMIT, not expired. */
  readonly usable: boolean;
  /** An ESCALATE's approval, or the approval an outcome receipt answers (authentic only). */
  readonly approvalId: string | null;
  /** Key ids that approved, in signed order: the PERMIT an approval issued (authentic only). */
  readonly approvers: readonly string[];
}

/** Keys to verify with: a key list document as fetched, a parsed `KeySet`, or a map of keys. */
export type Keys = KeyListDocument | KeySet | ReadonlyMap<string, PublishedKey>;

export interface VerifyOptions {
  /** The moment to judge PERMIT expiry at; default: the current time. */
  now?: Date | number | string | bigint;
  /**
   * The issuer the receipt must name. Default: the key list's `issuer` when `keys` is a
   * document or `KeySet` that has one (as `execauth verify` does); `null` skips the check.
   */
  issuer?: string | null;
}

// ESCALATE (held for human approval) is authentic or not like the others, and never a
// permission: the guards act on PERMIT only (docs/approvals.md).
const DECISIONS = new Set(["PERMIT", "DENY", "SILENCE", "ESCALATE"]);

/** Normalize any accepted form of keys to a `KeySet`. Throws `KeyListError` on a malformed document. */
export function toKeySet(keys: Keys): KeySet {
  if (keys instanceof Map) return { keys, issuer: undefined };
  if (isRecord(keys) && keys.keys instanceof Map) return keys as unknown as KeySet;
  if (isRecord(keys)) return parseKeyList(keys);
  throw new KeyListError("key list has no 'keys' array");
}

/**
 * Check `receipt` against `keys`; never throws on a bad receipt (a malformed key list
 * document throws `KeyListError`, as the reference does).
 */
export function verify(receipt: unknown, keys: Keys, options: VerifyOptions = {}): Verdict {
  const keySet = toKeySet(keys);
  const issuer = options.issuer === undefined ? keySet.issuer : (options.issuer ?? undefined);
  const now = toInstant(options.now ?? new Date());
  return verifyReceipt(receipt, keySet.keys, now, issuer);
}

function verdict(
  authentic: boolean,
  reason: VerdictReason,
  detail: string,
  keyId: string | null,
  decision: string | null,
  expired = false,
  approvalId: string | null = null,
  approvers: readonly string[] = [],
): Verdict {
  return Object.freeze({
    authentic,
    reason,
    detail,
    keyId,
    decision,
    expired,
    usable: authentic && !expired,
    approvalId,
    approvers: Object.freeze([...approvers]),
  });
}

function verifyReceipt(
  receipt: unknown,
  keys: ReadonlyMap<string, PublishedKey>,
  now: bigint,
  issuer: string | undefined,
): Verdict {
  if (!isRecord(receipt)) {
    return verdict(false, "malformed_receipt", "receipt is not a JSON object", null, null);
  }
  const keyIdValue = receipt.key_id;
  const keyId = typeof keyIdValue === "string" ? keyIdValue : null;
  const decision = typeof receipt.decision === "string" ? receipt.decision : null;
  const fail = (reason: VerdictReason, detail: string): Verdict => verdict(false, reason, detail, keyId, decision);

  if (keyId === null) return fail("malformed_receipt", "receipt has no key_id");
  const signature = receipt.signature;
  if (typeof signature !== "string" || !signature.startsWith(SIGNATURE_PREFIX)) {
    return fail("malformed_receipt", "receipt has no 'ed25519:' signature");
  }
  if ("authoritySignature" in receipt && receipt.authoritySignature !== signature) {
    return fail("signature_fields_disagree", "authoritySignature differs from signature");
  }
  const timestamp = parseTimestamp(receipt.timestamp);
  if (timestamp === undefined) return fail("malformed_receipt", "receipt has no valid RFC 3339 timestamp");
  if (decision === null || !DECISIONS.has(decision)) {
    return fail("malformed_receipt", `unknown decision ${JSON.stringify(receipt.decision ?? null)}`);
  }

  const key = keys.get(keyId);
  if (key === undefined) return fail("unknown_key", `key ${keyId} is not in the key list`);
  if (key.status === "revoked") return fail("revoked_key", `key ${keyId} has been revoked`);
  if (timestamp < key.createdAt || (key.expiresAt !== undefined && timestamp >= key.expiresAt)) {
    return fail(
      "key_not_valid_at_timestamp",
      `receipt timestamp ${String(receipt.timestamp)} is outside the validity of key ${keyId}`,
    );
  }
  if (issuer !== undefined && receipt.issuer !== issuer) {
    return fail(
      "issuer_mismatch",
      `receipt issuer ${JSON.stringify(receipt.issuer ?? null)} is not ${JSON.stringify(issuer)}`,
    );
  }

  let payload: Buffer;
  try {
    payload = signingPayload(receipt);
    const raw = decodeBase64Strict(signature.slice(SIGNATURE_PREFIX.length));
    if (raw === undefined || !ed25519Verify(null, payload, key.publicKey, raw)) {
      return fail("bad_signature", "signature does not match the receipt's contents");
    }
  } catch {
    // An uncanonicalizable receipt (lone surrogate…) or a signature of the wrong size.
    return fail("bad_signature", "signature does not match the receipt's contents");
  }
  const receiptHash = receipt.receiptHash;
  if (
    receiptHash !== undefined &&
    receiptHash !== null &&
    receiptHash !== "sha256:" + createHash("sha256").update(payload).digest("hex")
  ) {
    return fail("receipt_hash_mismatch", "receiptHash is not the SHA-256 of the signed payload");
  }

  let expired = false;
  if (decision === "PERMIT") {
    const expiresAt = parseTimestamp(receipt.expires_at);
    if (expiresAt === undefined) return fail("malformed_receipt", "PERMIT receipt has no valid expires_at");
    expired = now >= expiresAt;
  }
  const approvalId = typeof receipt.approval_id === "string" ? receipt.approval_id : null;
  if (decision === "ESCALATE" && approvalId === null) {
    return fail("malformed_receipt", "ESCALATE receipt has no approval_id");
  }
  const approvers = approverKeyIds(receipt.approvers);
  if (approvers === undefined) return fail("malformed_receipt", "approvers is not a list of {key_id, ...} objects");
  const constraints = receipt.constraints;
  if (
    "constraints" in receipt &&
    (typeof constraints !== "object" || constraints === null || Array.isArray(constraints) || Object.keys(constraints).length === 0)
  ) {
    return fail("malformed_receipt", "constraints is not a non-empty JSON object");
  }
  if ("single_use" in receipt && receipt.single_use !== true) {
    return fail("malformed_receipt", "single_use is present but not true");
  }
  let detail = "signature valid" + (expired ? "; PERMIT has expired" : "");
  if (approvers.length > 0) detail += "; approved by " + approvers.join(", ");
  if (decision === "ESCALATE") detail += `; held for approval ${String(approvalId)}, never a permission`;
  return verdict(true, "valid", detail, keyId, decision, expired, approvalId, approvers);
}

/** The approving key ids an outcome receipt signs (none when absent); `undefined` when malformed. */
function approverKeyIds(value: unknown): string[] | undefined {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return undefined;
  const ids: string[] = [];
  for (const entry of value) {
    if (!isRecord(entry) || typeof entry.key_id !== "string") return undefined;
    ids.push(entry.key_id);
  }
  return ids;
}

/** What a relying party expects of a receipt before acting on it. */
export interface Expectations {
  surface?: string | undefined;
  actor?: string | undefined;
  requestDigest?: string | undefined;
}

/** What differs between an (authentic) receipt and the request it is meant to authorize. */
export function unmetExpectations(receipt: Record<string, unknown>, expected: Expectations): string[] {
  const problems: string[] = [];
  const pairs: [string, string | undefined][] = [
    ["surface", expected.surface],
    ["actor", expected.actor],
    ["request_digest", expected.requestDigest],
  ];
  for (const [field, value] of pairs) {
    if (value !== undefined && receipt[field] !== value) {
      problems.push(`${field} is ${JSON.stringify(receipt[field] ?? null)}, expected ${JSON.stringify(value)}`);
    }
  }
  return problems;
}
