/**
 * Key lists (`GET /.well-known/service-keys.json`, docs/receipts.md) parsed into keys a
 * verifier can trust.
 *
 * Entries are read leniently but never trusted blindly, exactly as the reference
 * verifier's `_parse_key_entry` does: an entry whose algorithm is not Ed25519, whose
 * `public_key` is not the base64 DER SubjectPublicKeyInfo of an Ed25519 key, whose
 * timestamps do not parse, or whose `key_id`/`id` is not `service_key_` + the first 16
 * hex digits of SHA-256(raw key) is dropped: a receipt naming it then fails with
 * `unknown_key`. An entry without `status` is active.
 */
import { createHash, createPublicKey, type KeyObject } from "node:crypto";

import { parseTimestamp, type Instant } from "./time.js";

export const KEY_ID_PREFIX = "service_key_";

/** One entry of the key list as published (variants A and B at once). */
export interface KeyListEntry {
  id?: string;
  key_id?: string;
  algorithm?: string;
  public_key?: string;
  created_at?: string;
  expires_at?: string | null;
  /** `active` or `revoked` as published; other text (e.g. an older list's `retired`) counts as not revoked. */
  status?: "active" | "revoked" | string;
  [field: string]: unknown;
}

/** The document served at `/.well-known/service-keys.json`. */
export interface KeyListDocument {
  keys: KeyListEntry[];
  issuer?: string;
  cache_ttl?: number;
  [field: string]: unknown;
}

/** A key whose id has been checked against its bytes. */
export interface PublishedKey {
  readonly keyId: string;
  readonly publicKey: KeyObject;
  /** Start of the signing window (microseconds since the epoch). */
  readonly createdAt: Instant;
  /** End of the signing window, or `undefined` while the key has none. */
  readonly expiresAt: Instant | undefined;
  readonly status: string;
}

/** A parsed key list: the usable keys by id, and the list's issuer when it names one. */
export interface KeySet {
  readonly keys: ReadonlyMap<string, PublishedKey>;
  readonly issuer: string | undefined;
}

/** The key list itself is malformed (no `keys` array). */
export class KeyListError extends TypeError {
  override name = "KeyListError";
}

/** `service_key_` + the first 16 hex digits of SHA-256 of a raw 32-byte Ed25519 key. */
export function keyIdFor(rawPublicKey: Uint8Array): string {
  return KEY_ID_PREFIX + createHash("sha256").update(rawPublicKey).digest("hex").slice(0, 16);
}

/** Parse a key list document; throws `KeyListError` when it has no `keys` array. */
export function parseKeyList(document: unknown): KeySet {
  if (!isRecord(document) || !Array.isArray(document.keys)) {
    throw new KeyListError("key list has no 'keys' array");
  }
  const keys = new Map<string, PublishedKey>();
  for (const entry of document.keys) {
    const key = parseKeyEntry(entry);
    if (key !== undefined) keys.set(key.keyId, key);
  }
  return { keys, issuer: typeof document.issuer === "string" ? document.issuer : undefined };
}

/** One entry, or `undefined` when it is no well-formed Ed25519 key (it then verifies nothing). */
export function parseKeyEntry(entry: unknown): PublishedKey | undefined {
  if (!isRecord(entry)) return undefined;
  const algorithm = "algorithm" in entry ? entry.algorithm : "";
  if (typeof algorithm !== "string" || algorithm.toLowerCase() !== "ed25519") return undefined;
  const keyId = "key_id" in entry ? entry.key_id : entry.id;
  const der = decodeBase64Strict(entry.public_key);
  if (der === undefined) return undefined;
  const publicKey = loadEd25519Spki(der);
  const createdAt = parseTimestamp(entry.created_at);
  const expiresRaw = entry.expires_at;
  const expiresAt = expiresRaw === undefined || expiresRaw === null ? undefined : parseTimestamp(expiresRaw);
  if (createdAt === undefined || (expiresRaw !== undefined && expiresRaw !== null && expiresAt === undefined)) {
    return undefined;
  }
  if (publicKey === undefined || typeof keyId !== "string") return undefined;
  if (keyId !== keyIdFor(publicKey.raw)) return undefined; // a key whose id does not match its bytes vouches for nothing
  if ("id" in entry && entry.id !== keyId) return undefined;
  const status = "status" in entry ? entry.status : "active";
  return {
    keyId,
    publicKey: publicKey.key,
    createdAt,
    expiresAt,
    // Only the exact string "revoked" revokes; anything else is kept as text for display.
    status: typeof status === "string" ? status : String(JSON.stringify(status)),
  };
}

/**
 * Load a DER SubjectPublicKeyInfo and insist that it is an Ed25519 key in canonical
 * DER (re-encoding must give back the same bytes), as a strict DER parser would.
 */
function loadEd25519Spki(der: Buffer): { key: KeyObject; raw: Buffer } | undefined {
  let key: KeyObject;
  try {
    key = createPublicKey({ key: der, format: "der", type: "spki" });
  } catch {
    return undefined;
  }
  if (key.asymmetricKeyType !== "ed25519") return undefined;
  const reencoded = key.export({ format: "der", type: "spki" });
  if (!reencoded.equals(der)) return undefined;
  return { key, raw: reencoded.subarray(reencoded.length - 32) };
}

const BASE64 = /^((?:[A-Za-z0-9+/]{4})*)(?:([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)|(=*))$/;

/**
 * Standard base64 with validation, accepting what Python's
 * `base64.b64decode(text, validate=True)` accepts: only alphabet characters, correct
 * padding, nothing after the padding (a run of `=` after complete quads is tolerated,
 * as there). `undefined` when the text is not such base64.
 */
export function decodeBase64Strict(text: unknown): Buffer | undefined {
  if (typeof text !== "string") return undefined;
  const match = BASE64.exec(text);
  if (!match || text.startsWith("=")) return undefined;
  return Buffer.from((match[1] ?? "") + (match[2] ?? ""), "base64");
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
