// The shared test vectors (testdata/vectors/, format in its README.md): every vector must
// get from this SDK the verdict the reference verifier (src/execauth/verify.py) gives it.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { canonicalize, parseKeyList, verify } from "../dist/index.js";
import { UNSIGNED } from "./helpers.js";

const DIR = fileURLToPath(new URL("../../../testdata/vectors/", import.meta.url));
const read = (path) => JSON.parse(readFileSync(DIR + path, "utf8"));

function verdictOf(receipt, keyList, now) {
  // As the README says: verify against the list's keys, with the list's issuer, at `now`.
  const verdict = verify(receipt, parseKeyList(keyList), { now });
  return {
    authentic: verdict.authentic,
    reason: verdict.reason,
    expired: verdict.expired,
    decision: verdict.decision,
    key_id: verdict.keyId,
    exit_code: verdict.authentic && !verdict.expired ? 0 : 1, // `execauth verify` without --expect-*
  };
}

describe("shared test vectors", () => {
  if (!existsSync(DIR + "index.json")) {
    test("testdata/vectors/index.json is present", { skip: `no vectors at ${DIR}` }, () => {});
    return;
  }
  const index = read("index.json");
  // The range's lower end, and a day before its upper end: the upper end is exclusive
  // (permit-valid expires at exactly 2099-01-01T00:00Z) and permit-just-before-key-expires
  // expires at 2098-12-31T23:59:59.999Z, so its last millisecond is not clock-independent
  // (the reference verifier agrees: expired there).
  const [earliest, until] = index.clock_independent_between;
  const latest = Date.parse(until) - 86_400_000;

  test("the index is format 1 and lists vectors", () => {
    assert.equal(index.format, 1);
    assert.ok(index.vectors.length > 0);
  });

  test("the PERMIT an approval issued reports its two approvers", () => {
    // Named in the vector's description; the expectations of the index hold the verdict
    // fields every verifier shares, so the approvers are pinned here.
    const vector = read("cases/permit-after-approval-valid.json");
    const verdict = verify(vector.receipt, parseKeyList(read(vector.keys)), { now: vector.now });
    assert.deepEqual(verdict.approvers, ["key_01j00000000000000000000001", "key_01j00000000000000000000002"]);
    assert.equal(verdict.approvalId, "service_appr_01JWNNSVG0PZ0FTKWVVJ6XDQVS");
  });

  test("every reason code of the reference is covered by some vector", () => {
    const covered = new Set(index.vectors.map((entry) => entry.expected.reason));
    assert.deepEqual([...covered].sort(), [...index.reasons].sort());
  });

  for (const entry of index.vectors) {
    const vector = read(entry.file);
    const keyList = read(entry.keys);

    test(`${entry.name}: ${entry.expected.reason}${entry.expected.expired ? " (expired)" : ""}`, () => {
      assert.deepEqual(vector.expected, entry.expected, "case file and index agree");
      assert.equal(vector.keys, entry.keys);
      assert.deepEqual(verdictOf(vector.receipt, keyList, vector.now), vector.expected, vector.description);
    });

    test(`${entry.name}: the same verdict across clock_independent_between`, () => {
      for (const now of [earliest, latest]) {
        assert.deepEqual(verdictOf(vector.receipt, keyList, now), vector.expected, `now = ${new Date(now).toISOString()}`);
      }
    });

    // Who approved: an expectation that names `approvers` (key ids) or `approval_id` is
    // held exactly; otherwise an authentic receipt's verdict must report what it signs.
    test(`${entry.name}: the approval and approvers the verdict reports`, () => {
      const verdict = verify(vector.receipt, parseKeyList(keyList), { now: vector.now });
      const signedIds = Array.isArray(vector.receipt?.approvers) ? vector.receipt.approvers.map((a) => a?.key_id) : [];
      const approvers = "approvers" in vector.expected ? vector.expected.approvers : verdict.authentic ? signedIds : [];
      assert.deepEqual(verdict.approvers, approvers);
      const approvalId =
        "approval_id" in vector.expected ? vector.expected.approval_id : verdict.authentic ? (vector.receipt.approval_id ?? null) : null;
      assert.equal(verdict.approvalId, approvalId);
    });

    if (typeof vector.signing_payload === "string") {
      test(`${entry.name}: the signing payload is byte for byte the Python one`, () => {
        const signed = Object.fromEntries(Object.entries(vector.receipt).filter(([name]) => !UNSIGNED.includes(name)));
        assert.equal(canonicalize(signed), vector.signing_payload);
      });
    }
  }
});
