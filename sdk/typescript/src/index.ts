/**
 * `@execauth/client`: ask the Execution Authorization Service for a decision and verify
 * its Ed25519-signed receipts offline. No runtime dependency beyond Node's own modules.
 */
export { Client, MAX_APPROVAL_WAIT_SECONDS, VERSION } from "./client.js";
export type {
  AuthorizeOptions,
  AuthorizeRequest,
  CallOptions,
  ClientOptions,
  ClientRequirePermitOptions,
  ClientVerifyOptions,
  ConsumeOptions,
} from "./client.js";
export { verify, unmetExpectations, toKeySet } from "./verify.js";
export type { Expectations, Keys, Verdict, VerdictReason, VerifyOptions } from "./verify.js";
export { requirePermit, requirePermitAndConsume, permitOrThrow } from "./require.js";
export type { RequirePermitAndConsumeOptions, RequirePermitOptions } from "./require.js";
export { guarded } from "./guard.js";
export { checkIntent, requireIntent, IntentRefused } from "./intent.js";
export type { CheckIntentOptions, ConstraintChecker, Intent, IntentCheck } from "./intent.js";
export type { FromInput, GuardSpec } from "./guard.js";
export { parseKeyList, parseKeyEntry, keyIdFor, KeyListError, KEY_ID_PREFIX } from "./keys.js";
export type { KeyListDocument, KeyListEntry, KeySet, PublishedKey } from "./keys.js";
export { requestDigest, signingPayload, SIGNATURE_PREFIX, UNSIGNED_FIELDS } from "./receipt.js";
export type { Approval, Decision, DigestInput, Enforcement, PermitReceipt, Receipt } from "./receipt.js";
export { canonicalize, canonicalizeToBytes, CanonicalizationError } from "./jcs.js";
export { parseTimestamp, formatInstant } from "./time.js";
export type { Instant } from "./time.js";
export { backoffDelayMs, parseRetryAfter, isRetryableStatus, DEFAULT_RETRY_POLICY } from "./retry.js";
export type { RetryPolicy } from "./retry.js";
export * from "./errors.js";
