// The offline verifier, check by check (docs/receipts.md "How a verifier decides"),
// with receipts signed here by a throwaway key.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import {
  KeyListError,
  keyIdFor,
  parseKeyList,
  parseTimestamp,
  requestDigest,
  signingPayload,
  unmetExpectations,
  verify,
} from "../dist/index.js";
import { decodeBase64Strict } from "../dist/keys.js";
import { ISSUER, keyList, makeSigner, receiptFields, signReceipt } from "./helpers.js";

const fixture = (name) => JSON.parse(readFileSync(new URL(`fixtures/${name}`, import.meta.url), "utf8"));
const NOW = "2026-11-23T00:55:00.000Z";

const signer = makeSigner();
const keys = keyList(signer.entry);
const permit = signReceipt(signer, receiptFields("PERMIT"));

function tampered(receipt, changes) {
  return { ...receipt, ...changes };
}

describe("authentic receipts", () => {
  for (const decision of ["PERMIT", "DENY", "SILENCE"]) {
    test(`a signed ${decision} is authentic and valid`, () => {
      const receipt = signReceipt(signer, receiptFields(decision));
      const verdict = verify(receipt, keys, { now: NOW });
      assert.equal(verdict.reason, "valid", verdict.detail);
      assert.equal(verdict.authentic, true);
      assert.equal(verdict.decision, decision);
      assert.equal(verdict.keyId, signer.keyId);
      assert.equal(verdict.expired, false);
      assert.equal(verdict.usable, true);
    });
  }

  test("a PERMIT at or past expires_at is authentic but expired, not usable", () => {
    for (const now of ["2026-11-23T01:01:16.707Z", "2027-01-01T00:00:00Z"]) {
      const verdict = verify(permit, keys, { now });
      assert.equal(verdict.authentic, true);
      assert.equal(verdict.expired, true);
      assert.equal(verdict.usable, false);
    }
  });

  test("a DENY never expires", () => {
    const deny = signReceipt(signer, receiptFields("DENY"));
    assert.equal(verify(deny, keys, { now: "2099-01-01T00:00:00Z" }).expired, false);
  });

  test("now may be a Date, epoch milliseconds or a bigint of microseconds", () => {
    const at = Date.parse(NOW);
    for (const now of [new Date(at), at, BigInt(at) * 1000n]) {
      assert.equal(verify(permit, keys, { now }).usable, true);
    }
  });

  test("the unsigned fields may be absent; field order does not matter", () => {
    const { authoritySignature, receiptHash, ...bare } = permit;
    const reversed = Object.fromEntries(Object.entries(bare).reverse());
    assert.equal(verify(reversed, keys, { now: NOW }).reason, "valid");
  });

  test("keys may be a parsed KeySet or a Map", () => {
    const set = parseKeyList(keys);
    assert.equal(verify(permit, set, { now: NOW }).reason, "valid");
    assert.equal(verify(permit, new Map(set.keys), { now: NOW }).reason, "valid");
  });
});

describe("a receipt signed by a real execauth instance (docs/receipts.md)", () => {
  const { receipt, keys: published, now } = fixture("docs-receipt.json");

  test("verifies, and its request digest is the one the SDK computes", () => {
    const verdict = verify(receipt, published, { now });
    assert.equal(verdict.reason, "valid", verdict.detail);
    assert.equal(verdict.keyId, "service_key_fb38ff453314c0c9");
    assert.equal(
      receipt.request_digest,
      requestDigest({ surface: "deploy.production", actor: "release-bot", context: { branch: "main" } }),
    );
  });

  test("its receiptHash is SHA-256 of the SDK's signing payload", async () => {
    const { createHash } = await import("node:crypto");
    const digest = createHash("sha256").update(signingPayload(receipt)).digest("hex");
    assert.equal(receipt.receiptHash, "sha256:" + digest);
  });

  test("any change to a signed field breaks it", () => {
    for (const [field, value] of [["decision", "DENY"], ["policy_version", 2], ["rule_id", null], ["expires_at", "2026-11-23T02:01:16.707Z"]]) {
      assert.equal(verify({ ...receipt, [field]: value }, published, { now }).reason, "bad_signature", field);
    }
  });
});

describe("each failure has the reference's reason code", () => {
  const cases = [
    ["not an object", [1, 2], "malformed_receipt"],
    ["no key_id", tampered(permit, { key_id: undefined }), "malformed_receipt"],
    ["key_id not a string", tampered(permit, { key_id: 7 }), "malformed_receipt"],
    ["no signature", tampered(permit, { signature: undefined }), "malformed_receipt"],
    ["signature without the ed25519: prefix", tampered(permit, { signature: permit.signature.slice(8) }), "malformed_receipt"],
    ["authoritySignature differs", tampered(permit, { authoritySignature: "ed25519:AAAA" }), "signature_fields_disagree"],
    ["authoritySignature null", tampered(permit, { authoritySignature: null }), "signature_fields_disagree"],
    ["timestamp missing", tampered(permit, { timestamp: undefined }), "malformed_receipt"],
    ["timestamp without zone", tampered(permit, { timestamp: "2026-11-23T00:51:16.707" }), "malformed_receipt"],
    ["unknown decision", tampered(permit, { decision: "BLOCK" }), "malformed_receipt"],
    ["unknown key", tampered(permit, { key_id: "service_key_0000000000000000" }), "unknown_key"],
    ["changed content", tampered(permit, { surface: "deploy.staging" }), "bad_signature"],
    ["added field", tampered(permit, { extra: 1 }), "bad_signature"],
    ["signature not base64", tampered(permit, { signature: "ed25519:!!!", authoritySignature: "ed25519:!!!" }), "bad_signature"],
    ["signature too short", tampered(permit, { signature: "ed25519:AAAA", authoritySignature: "ed25519:AAAA" }), "bad_signature"],
    ["wrong receiptHash", tampered(permit, { receiptHash: "sha256:" + "0".repeat(64) }), "receipt_hash_mismatch"],
    ["issuer differs from the key list's", signReceipt(signer, receiptFields("PERMIT", { issuer: "https://other" })), "issuer_mismatch"],
    ["PERMIT without expires_at", signReceipt(signer, receiptFields("PERMIT", { expires_at: undefined })), "malformed_receipt"],
  ];
  for (const [name, receipt, reason] of cases) {
    test(`${name} → ${reason}`, () => {
      const clean = Array.isArray(receipt) ? receipt : JSON.parse(JSON.stringify(receipt));
      const verdict = verify(clean, keys, { now: NOW });
      assert.equal(verdict.reason, reason, verdict.detail);
      assert.equal(verdict.authentic, false);
      assert.equal(verdict.usable, false);
      assert.equal(verdict.expired, false);
    });
  }

  test("a revoked key verifies nothing it ever signed", () => {
    const revoked = keyList({ ...signer.entry, status: "revoked", expires_at: "2030-01-01T00:00:00.000Z" });
    assert.equal(verify(permit, revoked, { now: NOW }).reason, "revoked_key");
  });

  test("a retired key still verifies receipts from its window, not after", () => {
    const retiredAt = "2026-11-23T00:51:16.708Z";
    const retired = keyList({ ...signer.entry, status: "retired", expires_at: retiredAt });
    assert.equal(verify(permit, retired, { now: NOW }).reason, "valid");
    const atEnd = keyList({ ...signer.entry, status: "retired", expires_at: permit.timestamp });
    assert.equal(verify(permit, atEnd, { now: NOW }).reason, "key_not_valid_at_timestamp");
  });

  test("a receipt dated before its key was created fails", () => {
    const later = keyList({ ...signer.entry, created_at: "2026-11-23T00:51:16.708Z" });
    assert.equal(verify(permit, later, { now: NOW }).reason, "key_not_valid_at_timestamp");
    const exact = keyList({ ...signer.entry, created_at: permit.timestamp });
    assert.equal(verify(permit, exact, { now: NOW }).reason, "valid");
  });

  test("comparison is at microsecond precision", () => {
    const micro = keyList({ ...signer.entry, created_at: "2026-11-23T00:51:16.707001Z" });
    assert.equal(verify(permit, micro, { now: NOW }).reason, "key_not_valid_at_timestamp");
  });

  test("the issuer check follows the key list, and can be switched off or pinned", () => {
    const other = signReceipt(signer, receiptFields("PERMIT", { issuer: "https://other" }));
    const { issuer, ...noIssuer } = keys;
    assert.equal(verify(other, noIssuer, { now: NOW }).reason, "valid");
    assert.equal(verify(other, keys, { now: NOW, issuer: null }).reason, "valid");
    assert.equal(verify(permit, noIssuer, { now: NOW, issuer: "https://other" }).reason, "issuer_mismatch");
  });

  test("a failed verdict keeps the receipt's key_id and decision", () => {
    const verdict = verify(tampered(permit, { surface: "x.y" }), keys, { now: NOW });
    assert.equal(verdict.keyId, signer.keyId);
    assert.equal(verdict.decision, "PERMIT");
  });
});

describe("key list entries are never trusted blindly", () => {
  const variants = [
    ["an id that does not match the key", { key_id: "service_key_ffffffffffffffff", id: "service_key_ffffffffffffffff" }],
    ["id and key_id that differ", { id: "service_key_ffffffffffffffff" }],
    ["another algorithm", { algorithm: "RS256" }],
    ["a non-string algorithm", { algorithm: ["ed25519"] }],
    ["a public key that is not base64", { public_key: "not base64!" }],
    ["a public key that is not Ed25519 DER", { public_key: Buffer.alloc(44).toString("base64") }],
    ["no created_at", { created_at: undefined }],
    ["an unparsable expires_at", { expires_at: "soon" }],
  ];
  for (const [name, change] of variants) {
    test(`an entry with ${name} is dropped (unknown_key)`, () => {
      const list = JSON.parse(JSON.stringify(keyList({ ...signer.entry, ...change })));
      assert.equal(parseKeyList(list).keys.size, 0);
      assert.equal(verify(permit, list, { now: NOW }).reason, "unknown_key");
    });
  }

  test("algorithm is compared case-insensitively; status defaults to active", () => {
    const { status, id, ...entry } = signer.entry;
    const list = keyList({ ...entry, algorithm: "ed25519" });
    assert.equal(verify(permit, list, { now: NOW }).reason, "valid");
  });

  test("an X25519 key in SPKI form is not an Ed25519 key", async () => {
    const { generateKeyPairSync } = await import("node:crypto");
    const der = generateKeyPairSync("x25519").publicKey.export({ format: "der", type: "spki" });
    const id = keyIdFor(der.subarray(der.length - 32));
    const list = keyList({ ...signer.entry, id, key_id: id, public_key: der.toString("base64") });
    assert.equal(parseKeyList(list).keys.size, 0);
  });

  test("a list without a keys array is a KeyListError", () => {
    assert.throws(() => verify(permit, { keys: "none" }, { now: NOW }), KeyListError);
    assert.throws(() => parseKeyList([]), KeyListError);
  });
});

describe("parsing shared with the Python reference", () => {
  test("timestamps parse as execauth.wire_time.parse_timestamp does", () => {
    for (const { text, micros } of fixture("timestamps-python.json")) {
      const parsed = parseTimestamp(text);
      assert.equal(parsed === undefined ? null : String(parsed), micros, text);
    }
  });

  test("base64 is accepted as b64decode(validate=True) accepts it", () => {
    for (const { text, hex } of fixture("base64-python.json")) {
      const decoded = decodeBase64Strict(text);
      assert.equal(decoded === undefined ? null : decoded.toString("hex"), hex, JSON.stringify(text));
    }
  });
});

describe("request binding", () => {
  test("requestDigest normalizes absent fields as the server does", () => {
    const digest = requestDigest({ surface: "deploy.production" });
    const explicit = requestDigest({ surface: "deploy.production", action: null, actor: null, context: {}, payload: {} });
    assert.equal(digest, explicit);
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    assert.notEqual(digest, requestDigest({ surface: "deploy.production", context: { branch: "main" } }));
  });

  test("requestDigest matches the digest in docs/receipts.md's example receipt", () => {
    // surface deploy.production, actor release-bot, context {branch: main}, as in the README walkthrough
    const digest = requestDigest({ surface: "deploy.production", actor: "release-bot", context: { branch: "main" } });
    assert.equal(digest, "sha256:ec225a276a60c2eb7d7f6b8bdd5c74cb2a0fdbfaff34e360c516c20e3a36069c");
  });

  test("unmetExpectations names every differing field", () => {
    assert.deepEqual(unmetExpectations(permit, { surface: "deploy.production", actor: "release-bot" }), []);
    const problems = unmetExpectations(permit, { surface: "deploy.staging", actor: "eve", requestDigest: "sha256:00" });
    assert.equal(problems.length, 3);
    assert.match(problems[0], /^surface is "deploy.production", expected "deploy.staging"$/);
  });

  test("the signing payload leaves out exactly the three unsigned fields", () => {
    const payload = JSON.parse(signingPayload(permit).toString("utf8"));
    assert.equal("signature" in payload || "authoritySignature" in payload || "receiptHash" in payload, false);
    assert.equal(Object.keys(payload).length, Object.keys(permit).length - 3);
  });

  test("the example issuer is the helper's", () => assert.equal(permit.issuer, ISSUER));
});

describe("approvals: who approved, and ESCALATE never a permission (docs/approvals.md)", () => {
  const APPROVAL_ID = "service_appr_01M85AAAAAAAAAAAAAAAAAAAAA";
  const approvers = [
    { key_id: "key_01m82y5g8mb4rc2kws9mpgfb60", vote: "approve", actor: "alice@example.test", reason: "ok", at: "2026-11-23T00:52:00Z" },
    { key_id: "key_01m82y5g8mb4rc2kws9mpgfb61", vote: "approve", reason: "ok", at: "2026-11-23T00:53:00Z" },
  ];
  const linked = (overrides = {}) =>
    signReceipt(
      signer,
      receiptFields("PERMIT", {
        approval_id: APPROVAL_ID,
        approval_outcome: "approved",
        escalation_receipt_id: "service_rcpt_e5ca1a7e00000001",
        approvers,
        ...overrides,
      }),
    );

  test("the PERMIT an approval issued names its approval and approvers, in signed order", () => {
    const verdict = verify(linked(), keys, { now: NOW });
    assert.equal(verdict.reason, "valid", verdict.detail);
    assert.equal(verdict.approvalId, APPROVAL_ID);
    assert.deepEqual(verdict.approvers, ["key_01m82y5g8mb4rc2kws9mpgfb60", "key_01m82y5g8mb4rc2kws9mpgfb61"]);
    assert.match(verdict.detail, /approved by key_01m82y5g8mb4rc2kws9mpgfb60, key_01m82y5g8mb4rc2kws9mpgfb61$/);
  });

  test("a receipt with no approval names none", () => {
    const verdict = verify(permit, keys, { now: NOW });
    assert.equal(verdict.approvalId, null);
    assert.deepEqual(verdict.approvers, []);
  });

  test("an unauthentic receipt reports no approvers, whatever it claims", () => {
    const verdict = verify(tampered(linked(), { approvers: [...approvers, { key_id: "key_mallory" }] }), keys, { now: NOW });
    assert.equal(verdict.reason, "bad_signature");
    assert.deepEqual(verdict.approvers, []);
  });

  for (const [what, value] of [
    ["not a list", { key_id: "key_01m82y5g8mb4rc2kws9mpgfb60" }],
    ["an entry without a key_id", [{ vote: "approve" }]],
    ["an entry that is not an object", ["key_01m82y5g8mb4rc2kws9mpgfb60"]],
  ]) {
    test(`approvers ${what} is a malformed_receipt, even signed`, () => {
      const verdict = verify(linked({ approvers: value }), keys, { now: NOW });
      assert.equal(verdict.reason, "malformed_receipt");
      assert.equal(verdict.authentic, false);
    });
  }

  test("an ESCALATE is authentic, names its approval, and says it is never a permission", () => {
    const escalate = signReceipt(signer, receiptFields("ESCALATE", { approval_id: APPROVAL_ID, reason_code: "APPROVAL_REQUIRED" }));
    const verdict = verify(escalate, keys, { now: NOW });
    assert.equal(verdict.authentic, true);
    assert.equal(verdict.decision, "ESCALATE");
    assert.equal(verdict.approvalId, APPROVAL_ID);
    assert.match(verdict.detail, /never a permission/);
  });
});
