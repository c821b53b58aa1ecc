// The intent check (src/intent.ts) against the shared intent vectors
// (testdata/vectors/intent.json): the same answers as the Python SDK's check_intent.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { checkIntent, IntentRefused, requireIntent } from "../dist/index.js";

const DIR = fileURLToPath(new URL("../../../testdata/vectors/", import.meta.url));
const read = (path) => JSON.parse(readFileSync(DIR + path, "utf8"));

// The vectors spell the intent as the Python SDK does; this SDK's names are camelCase.
function intentOf(raw) {
  const { request_digest: requestDigest, tool_args: toolArgs, ...rest } = raw;
  return { ...rest, requestDigest, toolArgs };
}

describe("intent checks", () => {
  if (!existsSync(DIR + "intent.json")) {
    test("testdata/vectors/intent.json is present", { skip: `no vectors at ${DIR}` }, () => {});
    return;
  }
  const cases = read("intent.json").cases;
  const bound = read("cases/permit-with-constraints-valid.json").receipt;
  const NOW = "2026-01-01T00:00:00Z";
  const transfer = (changes = {}) => ({
    surface: "payments.transfer",
    action: "transfer",
    actor: "agent-7",
    amount: 120,
    currency: "EUR",
    command: ["git", "status"],
    resources: ["acct-42"],
    toolArgs: { to: "acct-42", fee: 0 },
    ...changes,
  });

  for (const entry of cases) {
    test(`${entry.name}: ${entry.expected.reason ?? "ok"}`, () => {
      const check = checkIntent(read(entry.receipt).receipt, intentOf(entry.intent), { now: entry.now });
      assert.deepEqual({ ok: check.ok, reason: check.reason }, entry.expected, check.detail);
    });
  }

  test("the request stands in for its digest", () => {
    const request = {
      surface: "payments.transfer",
      action: "transfer",
      actor: "agent-7",
      payload: { amount: 120, currency: "EUR", to: "acct-42" },
    };
    assert.equal(checkIntent(bound, transfer({ request }), { now: NOW }).ok, true);
    const other = { ...request, payload: { ...request.payload, amount: 121 } };
    assert.equal(checkIntent(bound, transfer({ request: other }), { now: NOW }).reason, "request_digest_mismatch");
  });

  test("an expired PERMIT covers nothing", () => {
    assert.equal(checkIntent(bound, transfer(), { now: "2099-01-01T00:00:00Z" }).reason, "expired");
  });

  test("a custom checker decides an organization's own constraint", () => {
    const custom = read("cases/permit-with-custom-constraint-valid.json").receipt;
    const checkers = { x_region: (value) => (value === "eu-west-1" ? null : "wrong region") };
    assert.equal(checkIntent(custom, transfer(), { now: NOW, checkers }).ok, true);
    const refusing = { x_region: () => "not here" };
    const check = checkIntent(custom, transfer(), { now: NOW, checkers: refusing });
    assert.deepEqual([check.ok, check.reason, check.detail], [false, "constraint_exceeded:x_region", "not here"]);
  });

  test("requireIntent throws IntentRefused with the reason code", () => {
    assert.throws(
      () => requireIntent(bound, transfer({ currency: "USD" }), { now: NOW }),
      (error) => error instanceof IntentRefused && error.code === "constraint_exceeded:currency",
    );
    assert.equal(requireIntent(bound, transfer(), { now: NOW }), bound);
  });
});
