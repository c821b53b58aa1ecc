// Test helpers: an in-memory signer that issues receipts the way the server does
// (docs/receipts.md), and a scripted fetch.
import { createHash, generateKeyPairSync, sign } from "node:crypto";

import { canonicalizeToBytes, keyIdFor } from "../dist/index.js";

export const UNSIGNED = ["signature", "authoritySignature", "receiptHash"];

export function makeSigner(createdAt = "2026-01-01T00:00:00.000Z", extra = {}) {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const der = publicKey.export({ format: "der", type: "spki" });
  const keyId = keyIdFor(der.subarray(der.length - 32));
  const entry = {
    id: keyId,
    key_id: keyId,
    algorithm: "Ed25519",
    public_key: der.toString("base64"),
    created_at: createdAt,
    status: "active",
    ...extra,
  };
  return { keyId, entry, privateKey, publicKey };
}

export function signReceipt(signer, fields) {
  const receipt = { ...fields, key_id: signer.keyId };
  for (const name of UNSIGNED) delete receipt[name];
  const payload = canonicalizeToBytes(receipt);
  const signature = "ed25519:" + sign(null, payload, signer.privateKey).toString("base64");
  return {
    ...receipt,
    signature,
    authoritySignature: signature,
    receiptHash: "sha256:" + createHash("sha256").update(payload).digest("hex"),
  };
}

export const ISSUER = "http://127.0.0.1:18181";

export function receiptFields(decision = "PERMIT", overrides = {}) {
  const base = {
    receipt_id: "service_rcpt_69ed8f474432b78c",
    execution_id: "service_exec_01M82Y5GK3VGDPZWQB9N29ETXV",
    decision,
    enforcement: decision === "PERMIT" ? "EXECUTED" : "BLOCKED",
    surface: "deploy.production",
    actor: "release-bot",
    org_id: "org_01m82y5g8mb4rc2kws9mpgfb6v",
    issuer: ISSUER,
    timestamp: "2026-11-23T00:51:16.707Z",
    policy_id: "deploys",
    policy_version: 1,
    policy_hash: "sha256:b4e666f4423477c5c2e764010cecb7c9950f7ca73bef04bf50fab204e506bdde",
    rule_id: decision === "PERMIT" ? "main-only" : null,
    request_digest: "sha256:ec225a276a60c2eb7d7f6b8bdd5c74cb2a0fdbfaff34e360c516c20e3a36069c",
  };
  if (decision === "PERMIT") base.expires_at = "2026-11-23T01:01:16.707Z";
  if (decision === "DENY") {
    Object.assign(base, { reason_code: "POLICY_VIOLATION", reasonCode: "SERVICE_POLICY_WRONG_BRANCH", message: "Only main can be deployed" });
  }
  if (decision === "SILENCE") {
    Object.assign(base, {
      reason_code: "INDETERMINATE_EVALUATION",
      reasonCode: "SERVICE_POLICY_MISSING_CONTEXT",
      message: "required field context.branch is missing",
    });
  }
  return { ...base, ...overrides };
}

export function keyList(...entries) {
  return { keys: entries, issuer: ISSUER, cache_ttl: 3600 };
}

/** A fetch that answers from a script of (request) => Response|Error, recording every call. */
export function scriptedFetch(...steps) {
  const calls = [];
  const fetch = async (url, init = {}) => {
    const headers = new Headers(init.headers);
    calls.push({ url: String(url), method: init.method ?? "GET", headers, body: init.body, signal: init.signal });
    const step = steps.length > 1 ? steps.shift() : steps[0];
    if (step === undefined) throw new Error("scriptedFetch: no step left");
    const result = typeof step === "function" ? await step(calls.at(-1)) : step;
    if (result instanceof Error) throw result;
    return result.clone ? result.clone() : result;
  };
  return { fetch, calls };
}

export function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

/** A sleep that records its delays and returns at once. */
export function recordingSleep() {
  const delays = [];
  return { delays, sleep: async (ms) => void delays.push(ms) };
}
