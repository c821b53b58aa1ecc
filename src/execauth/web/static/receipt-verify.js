// Offline receipt verification in the browser: RFC 8785 (JCS) and Ed25519 via WebCrypto.
//
// The same checks, in the same order and with the same reason codes, as
// src/execauth/verify.py. No network, no clock: the caller passes the key
// list document and `now` (a Date).

const SIGNATURE_PREFIX = "ed25519:";
const KEY_ID_PREFIX = "service_key_";
const UNSIGNED_FIELDS = new Set(["signature", "authoritySignature", "receiptHash"]);
// ESCALATE (held for a person's approval, docs/approvals.md) is authentic or not like the
// others, and never a permission.
const DECISIONS = new Set(["PERMIT", "DENY", "SILENCE", "ESCALATE"]);
// DER SubjectPublicKeyInfo header of an Ed25519 key (RFC 8410): 12 bytes, then 32 raw bytes.
const ED25519_SPKI_PREFIX = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

/** RFC 8785 canonical JSON text of a parsed JSON value. */
export function canonicalize(value) {
  if (value === null || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError("JCS cannot represent " + value);
    return JSON.stringify(value); // ECMAScript Number serialization is what RFC 8785 §3.2.2.3 uses
  }
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return "[" + value.map(canonicalize).join(",") + "]";
  if (typeof value === "object") {
    // Sorted by UTF-16 code units (RFC 8785 §3.2.3): JavaScript's default string order.
    const names = Object.keys(value).sort();
    return "{" + names.map((n) => JSON.stringify(n) + ":" + canonicalize(value[n])).join(",") + "}";
  }
  throw new TypeError("not a JSON value: " + typeof value);
}

/** The exact bytes a receipt's signature covers. */
export function signingPayload(receipt) {
  const signed = {};
  for (const name of Object.keys(receipt)) {
    if (!UNSIGNED_FIELDS.has(name)) signed[name] = receipt[name];
  }
  return new TextEncoder().encode(canonicalize(signed));
}

export async function sha256Hex(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Strict standard base64 (with padding), like Python's b64decode(validate=True). */
export function base64Decode(text) {
  if (typeof text !== "string" || text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) {
    throw new Error("not valid base64");
  }
  const binary = atob(text);
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Microseconds since the epoch of an RFC 3339 timestamp with a zone; throws otherwise. */
export function parseTimestamp(text) {
  const m = typeof text === "string" ? RFC3339.exec(text) : null;
  if (!m) throw new Error("not an RFC 3339 timestamp with a time zone: " + JSON.stringify(text));
  const [, y, mo, d, h, mi, s = "0", frac = "", zone] = m;
  const ms = Date.UTC(+y, +mo - 1, +d, +h, +mi, +s);
  const check = new Date(ms);
  if (check.getUTCFullYear() !== +y || check.getUTCMonth() !== +mo - 1 || check.getUTCDate() !== +d
      || +h > 23 || +mi > 59 || +s > 59) {
    throw new Error("not a valid date and time: " + text);
  }
  let offsetMinutes = 0;
  if (zone !== "Z" && zone !== "z") {
    const sign = zone[0] === "-" ? -1 : 1;
    offsetMinutes = sign * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(4, 6)));
  }
  return (ms - offsetMinutes * 60000) * 1000 + Number(frac.padEnd(6, "0"));
}

async function keyIdFor(raw) {
  return KEY_ID_PREFIX + (await sha256Hex(raw)).slice(0, 16);
}

async function parseKeyEntry(entry) {
  if (entry === null || typeof entry !== "object" || Array.isArray(entry)) return null;
  if (String(entry.algorithm ?? "").toLowerCase() !== "ed25519") return null;
  const keyId = Object.hasOwn(entry, "key_id") ? entry.key_id : entry.id;
  let der, createdAt, expiresAt, publicKey;
  try {
    der = base64Decode(entry.public_key);
    createdAt = parseTimestamp(entry.created_at);
    expiresAt = entry.expires_at == null ? null : parseTimestamp(entry.expires_at);
  } catch {
    return null;
  }
  if (der.length !== 44 || ED25519_SPKI_PREFIX.some((b, i) => der[i] !== b)) return null;
  try {
    publicKey = await crypto.subtle.importKey("spki", der, { name: "Ed25519" }, false, ["verify"]);
  } catch {
    return null;
  }
  if (typeof keyId !== "string") return null;
  if (keyId !== (await keyIdFor(der.slice(12)))) return null; // the id must match the key bytes
  if (Object.hasOwn(entry, "id") && entry.id !== keyId) return null;
  const status = Object.hasOwn(entry, "status") ? String(entry.status) : "active";
  return { keyId, publicKey, createdAt, expiresAt, status };
}

/** Parse /.well-known/service-keys.json: { keys: Map(id → key), issuer }. */
export async function parseKeyList(doc) {
  if (doc === null || typeof doc !== "object" || !Array.isArray(doc.keys)) {
    throw new Error("key list has no 'keys' array");
  }
  const keys = new Map();
  for (const entry of doc.keys) {
    const key = await parseKeyEntry(entry);
    if (key !== null) keys.set(key.keyId, key);
  }
  return { keys, issuer: typeof doc.issuer === "string" ? doc.issuer : null };
}

/**
 * Verify `receipt` (a parsed JSON value) against parsed `keys` as of `now` (a Date).
 * Resolves to { authentic, reason, detail, keyId, decision, expired, payload, digest }.
 */
export async function verifyReceipt(receipt, keys, { now, issuer = null } = {}) {
  if (receipt === null || typeof receipt !== "object" || Array.isArray(receipt)) {
    return verdict(false, "malformed_receipt", "receipt is not a JSON object");
  }
  const keyId = typeof receipt.key_id === "string" ? receipt.key_id : null;
  const decision = typeof receipt.decision === "string" ? receipt.decision : null;
  const extra = { keyId, decision };
  let payload = null;
  let digest = null;
  try {
    payload = signingPayload(receipt);
    digest = await sha256Hex(payload);
  } catch {
    payload = null;
  }
  const fail = (reason, detail) => verdict(false, reason, detail, { ...extra, payload, digest });

  if (keyId === null) return fail("malformed_receipt", "receipt has no key_id");
  const signature = receipt.signature;
  if (typeof signature !== "string" || !signature.startsWith(SIGNATURE_PREFIX)) {
    return fail("malformed_receipt", "receipt has no 'ed25519:' signature");
  }
  if (Object.hasOwn(receipt, "authoritySignature") && receipt.authoritySignature !== signature) {
    return fail("signature_fields_disagree", "authoritySignature differs from signature");
  }
  let timestamp;
  try {
    timestamp = parseTimestamp(receipt.timestamp);
  } catch {
    return fail("malformed_receipt", "receipt has no valid RFC 3339 timestamp");
  }
  if (!DECISIONS.has(decision)) {
    return fail("malformed_receipt", "unknown decision " + JSON.stringify(receipt.decision ?? null));
  }
  const key = keys.get(keyId);
  if (key === undefined) return fail("unknown_key", `key ${keyId} is not in the key list`);
  if (key.status === "revoked") return fail("revoked_key", `key ${keyId} has been revoked`);
  if (timestamp < key.createdAt || (key.expiresAt !== null && timestamp >= key.expiresAt)) {
    return fail(
      "key_not_valid_at_timestamp",
      `receipt timestamp ${receipt.timestamp} is outside the validity of key ${keyId}`,
    );
  }
  if (issuer !== null && receipt.issuer !== issuer) {
    return fail("issuer_mismatch", `receipt issuer ${JSON.stringify(receipt.issuer ?? null)} is not ${JSON.stringify(issuer)}`);
  }
  let valid = false;
  try {
    if (payload === null) throw new Error("no payload");
    const raw = base64Decode(signature.slice(SIGNATURE_PREFIX.length));
    valid = await crypto.subtle.verify({ name: "Ed25519" }, key.publicKey, raw, payload);
  } catch {
    valid = false;
  }
  if (!valid) return fail("bad_signature", "signature does not match the receipt's contents");
  if (receipt.receiptHash != null && receipt.receiptHash !== "sha256:" + digest) {
    return fail("receipt_hash_mismatch", "receiptHash is not the SHA-256 of the signed payload");
  }
  let expired = false;
  if (decision === "PERMIT") {
    try {
      expired = now.getTime() * 1000 >= parseTimestamp(receipt.expires_at);
    } catch {
      return fail("malformed_receipt", "PERMIT receipt has no valid expires_at");
    }
  }
  if (decision === "ESCALATE" && typeof receipt.approval_id !== "string") {
    return fail("malformed_receipt", "ESCALATE receipt has no approval_id");
  }
  // The same checks of the signed grant and approvers as the SDKs' verifiers make.
  const approvers = receipt.approvers;
  if (
    approvers !== undefined && approvers !== null &&
    (!Array.isArray(approvers) ||
      approvers.some((a) => typeof a !== "object" || a === null || typeof a.key_id !== "string"))
  ) {
    return fail("malformed_receipt", "approvers is not a list of {key_id, ...} objects");
  }
  const constraints = receipt.constraints;
  if (
    "constraints" in receipt &&
    (typeof constraints !== "object" || constraints === null || Array.isArray(constraints) ||
      Object.keys(constraints).length === 0)
  ) {
    return fail("malformed_receipt", "constraints is not a non-empty JSON object");
  }
  if ("single_use" in receipt && receipt.single_use !== true) {
    return fail("malformed_receipt", "single_use is present but not true");
  }
  const detail = "signature valid" + (expired ? "; PERMIT has expired" : "");
  return verdict(true, "valid", detail, { ...extra, expired, payload, digest });
}

function verdict(authentic, reason, detail, extra = {}) {
  return {
    authentic,
    reason,
    detail,
    keyId: extra.keyId ?? null,
    decision: extra.decision ?? null,
    expired: extra.expired ?? false,
    payload: extra.payload ?? null,
    digest: extra.digest ?? null,
  };
}
