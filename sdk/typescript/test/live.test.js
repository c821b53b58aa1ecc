// Live tests against a running execauth whose organization has the DEPLOY_POLICY of
// tests/conftest.py (scripts/test-live.sh sets one up). Skipped, with the reason
// shown, unless EXECAUTH_TEST_URL and EXECAUTH_TEST_API_KEY are set.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test as nodeTest } from "node:test";

import {
  Client,
  DeniedError,
  IdempotencyConflictError,
  InvalidRequestError,
  ReceiptNotUsableError,
  SilencedError,
  SurfaceNotFoundError,
  UnauthorizedError,
  guarded,
  requestDigest,
  requirePermit,
  requirePermitAndConsume,
  verify,
} from "../dist/index.js";

const url = process.env.EXECAUTH_TEST_URL;
const apiKey = process.env.EXECAUTH_TEST_API_KEY;
const skip = url && apiKey ? false : "live tests need EXECAUTH_TEST_URL and EXECAUTH_TEST_API_KEY (see scripts/test-live.sh)";

const PERMIT = { surface: "deploy.production", actor: "release-bot", context: { branch: "main" } };
const DENY = { surface: "deploy.production", actor: "release-bot", context: { branch: "feature/x" } };
const SILENCE = { surface: "deploy.production", actor: "release-bot" };

describe("live: a running execauth", () => {
  // Each test carries the skip, so the runner counts (and names) every skipped one.
  const test = (name, fn) => nodeTest(name, { skip }, fn);
  const client = new Client({ baseUrl: url ?? "http://unset", apiKey, maxRetries: 2 });
  const profileB = new Client({ baseUrl: url ?? "http://unset", apiKey, wireProfile: "b" });

  test("PERMIT: authorize returns a receipt that verifies offline against the published keys", async () => {
    const receipt = await client.authorize(PERMIT);
    assert.equal(receipt.decision, "PERMIT");
    assert.equal(receipt.enforcement, "EXECUTED");
    assert.equal(receipt.rule_id, "main-only");
    assert.equal(receipt.request_digest, requestDigest(PERMIT));
    const keys = await client.keys();
    const verdict = verify(receipt, keys);
    assert.equal(verdict.reason, "valid", verdict.detail);
    assert.equal(verdict.usable, true);
    assert.equal(requirePermit(receipt, { keys, surface: PERMIT.surface, actor: PERMIT.actor }), receipt);
  });

  test("PERMIT: client.requirePermit binds the receipt to this exact request", async () => {
    const receipt = await client.requirePermit(PERMIT);
    assert.equal(receipt.decision, "PERMIT");
    assert.ok(Date.parse(receipt.expires_at) > Date.now());
  });

  test("PERMIT with a payload: the request digest agrees with the server's", async () => {
    const request = { surface: "deploy.staging", action: "deploy", payload: { amount: 2, tags: ["a", "é"], rate: 0.1 } };
    const receipt = await client.requirePermit(request);
    assert.equal(receipt.rule_id, "anyone");
    assert.equal(receipt.request_digest, requestDigest(request));
  });

  test("DENY: an authentic receipt, and requirePermit throws DeniedError", async () => {
    const receipt = await client.authorize(DENY);
    assert.equal(receipt.decision, "DENY");
    assert.equal(receipt.reason_code, "POLICY_VIOLATION");
    assert.equal(receipt.reasonCode, "SERVICE_POLICY_WRONG_BRANCH");
    assert.equal((await client.verify(receipt)).reason, "valid");
    await assert.rejects(client.requirePermit(DENY), (error) => {
      assert.ok(error instanceof DeniedError);
      assert.equal(error.reasonCode, "SERVICE_POLICY_WRONG_BRANCH");
      return true;
    });
  });

  test("SILENCE: a missing required context path fails closed", async () => {
    const receipt = await client.authorize(SILENCE);
    assert.equal(receipt.decision, "SILENCE");
    assert.equal(receipt.reason_code, "INDETERMINATE_EVALUATION");
    assert.equal(receipt.reasonCode, "SERVICE_POLICY_MISSING_CONTEXT");
    assert.equal((await client.verify(receipt)).reason, "valid");
    await assert.rejects(client.requirePermit(SILENCE), SilencedError);
  });

  test("profile B: a DENY (403) and a SILENCE (422) are receipts, not errors", async () => {
    const deny = await profileB.authorize(DENY);
    assert.equal(deny.decision, "DENY");
    const silence = await profileB.authorize(SILENCE);
    assert.equal(silence.decision, "SILENCE");
    assert.equal((await profileB.verify(silence)).reason, "valid");
    await assert.rejects(profileB.requirePermit(DENY), DeniedError);
  });

  test("the same idempotency key returns the same receipt; another request under it is 409", async () => {
    const idempotencyKey = `ts-${randomUUID()}`;
    const first = await client.authorize({ ...PERMIT, idempotencyKey });
    const again = await client.authorize({ ...PERMIT, idempotencyKey });
    assert.deepEqual(again, first);
    assert.equal(first.request_id, idempotencyKey);
    await assert.rejects(client.authorize({ ...DENY, idempotencyKey }), IdempotencyConflictError);
  });

  test("wire errors map to typed errors in both profiles", async () => {
    await assert.rejects(client.authorize({ surface: "nothing.here" }), SurfaceNotFoundError);
    await assert.rejects(client.authorize({ surface: "Not A Surface" }), InvalidRequestError);
    for (const profile of ["a", "b"]) {
      const stranger = new Client({ baseUrl: url ?? "", apiKey: "service_live_wrong", wireProfile: profile });
      await assert.rejects(stranger.authorize(PERMIT), (error) => {
        assert.ok(error instanceof UnauthorizedError, `${profile}: ${error}`);
        assert.equal(error.status, 401);
        assert.ok(error.requestId);
        return true;
      });
    }
  });

  // A 429 from in front of the service (before it saw the request) or after it had
  // decided (a proxy's limit, a lost answer): the retry must carry the same idempotency
  // key, so the service stores one receipt, and the client returns that receipt.
  for (const afterDecision of [false, true]) {
    const when = afterDecision ? "after the service decided" : "before the service saw it";
    test(`429 ${when}: the retry carries the same idempotency key and ends in one receipt`, async () => {
      const sentKeys = [];
      const delays = [];
      const rateLimitedOnce = async (input, init = {}) => {
        if (!String(input).endsWith("/v1/execute")) return fetch(input, init);
        sentKeys.push(new Headers(init.headers).get("idempotency-key"));
        if (sentKeys.length > 1) return fetch(input, init);
        if (afterDecision) await (await fetch(input, init)).arrayBuffer();
        return new Response(JSON.stringify({ error: "rate_limited", message: "slow down" }), {
          status: 429,
          headers: { "content-type": "application/json", "retry-after": "1" },
        });
      };
      const sleep = async (ms) => void delays.push(ms);
      const limited = new Client({ baseUrl: url ?? "", apiKey, fetch: rateLimitedOnce, sleep });
      const receipt = await limited.requirePermit(PERMIT);
      assert.deepEqual(delays, [1000]); // Retry-After, honoured
      assert.equal(sentKeys.length, 2);
      assert.equal(sentKeys[1], sentKeys[0]);
      assert.equal(receipt.request_id, sentKeys[0]);
      // One receipt exists under that key: asking again returns it, marked as a replay.
      const again = await fetch(`${url}/v1/execute`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "idempotency-key": sentKeys[0] },
        body: JSON.stringify(PERMIT),
      });
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      assert.equal((await again.json()).receipt_id, receipt.receipt_id);
    });
  }

  test("the key list is public and names the issuer of the receipts", async () => {
    const keys = await new Client({ baseUrl: url ?? "" }).keys();
    assert.ok(keys.keys.size >= 1);
    const receipt = await client.authorize(PERMIT);
    assert.equal(receipt.issuer, keys.issuer);
    assert.ok(keys.keys.has(receipt.key_id));
  });
});

// Receipts used once (docs/receipts.md "Using a PERMIT once"): the `once` policy of
// scripts/provision.mjs makes once.production's PERMITs single_use, once.reusable's not.
describe("live: a single-use PERMIT on a running execauth", () => {
  const test = (name, fn) => nodeTest(name, { skip }, fn);
  const client = new Client({ baseUrl: url ?? "http://unset", apiKey, maxRetries: 2 });
  const ONCE = (run = randomUUID()) => ({ surface: "once.production", actor: "release-bot", context: { run } });
  const refusedWith = (code) => (error) => {
    assert.ok(error instanceof ReceiptNotUsableError, String(error));
    assert.equal(error.code, code);
    return true;
  };

  test("requirePermit consumes it; the next consumer is told when and by whom it was used", async () => {
    const permit = await client.requirePermit(ONCE());
    assert.equal(permit.single_use, true);
    await assert.rejects(client.consume(permit, { actor: "someone-else" }), (error) => {
      refusedWith("receipt_already_consumed")(error);
      assert.equal(error.status, 409);
      assert.equal(error.consumed.receipt_id, permit.receipt_id);
      assert.equal(error.consumed.consumed_by.actor, "release-bot");
      assert.ok(Date.parse(error.consumed.consumed_at) > 0);
      return true;
    });
  });

  test("concurrent consumers of one PERMIT: exactly one succeeds", async () => {
    const permit = await client.requirePermit(ONCE(), { deferConsumption: true });
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) => client.consume(permit, { actor: `worker-${i}` })),
    );
    const won = results.filter((r) => r.status === "fulfilled");
    assert.equal(won.length, 1);
    for (const lost of results.filter((r) => r.status === "rejected")) {
      refusedWith("receipt_already_consumed")(lost.reason);
      assert.equal(lost.reason.consumed.consumed_by.actor, won[0].value.consumed_by.actor);
    }
  });

  test("guarded: the tool runs under a fresh PERMIT each call, and each PERMIT is used up", async () => {
    const used = [];
    const tool = guarded(client, { surface: "once.production", actor: "release-bot", context: (run) => ({ run }) }, (_run, receipt) => {
      used.push(receipt);
      return receipt.receipt_id;
    });
    await tool(randomUUID());
    await tool(randomUUID());
    assert.equal(used.length, 2);
    assert.notEqual(used[0].receipt_id, used[1].receipt_id);
    for (const receipt of used) await assert.rejects(client.consume(receipt), refusedWith("receipt_already_consumed"));
  });

  test("deferConsumption returns it unused; the caller's consume records its note", async () => {
    const permit = await client.requirePermit(ONCE(), { deferConsumption: true });
    const consumption = await client.consume(permit, { actor: "release-bot", note: "ts sdk live" });
    assert.equal(consumption.receipt_id, permit.receipt_id);
    assert.equal(consumption.execution_id, permit.execution_id);
    assert.equal(consumption.note, "ts sdk live");
  });

  test("offline: requirePermit refuses it without a consumer; requirePermitAndConsume uses it", async () => {
    const asked = ONCE();
    const receipt = await client.authorize(asked);
    const keys = await client.keys();
    const expected = { keys, surface: asked.surface, actor: asked.actor, requestDigest: requestDigest(asked) };
    assert.throws(() => requirePermit(receipt, expected), refusedWith("consumer_required"));
    assert.equal(await requirePermitAndConsume(receipt, { ...expected, consumer: client }), receipt);
    await assert.rejects(requirePermitAndConsume(receipt, { ...expected, consumer: client }), refusedWith("receipt_already_consumed"));
  });

  test("a PERMIT without single_use is not consumed by requirePermit", async () => {
    const permit = await client.requirePermit({ surface: "once.reusable", actor: "release-bot" });
    assert.equal(permit.single_use, undefined);
    assert.equal((await client.consume(permit)).receipt_id, permit.receipt_id); // still unused
  });

  test("a DENY cannot be consumed (receipt_not_permit); an unknown receipt is not_found", async () => {
    const deny = await client.authorize(DENY);
    await assert.rejects(client.consume(deny), refusedWith("receipt_not_permit"));
    const unknown = { ...deny, receipt_id: "service_rcpt_0000000000000000" };
    await assert.rejects(client.consume(unknown), (error) => refusedWith("not_found")(error) && error.status === 404);
  });
});
