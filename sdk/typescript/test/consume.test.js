// Receipts used once (docs/receipts.md, "Using a PERMIT once"): `client.consume`, and the
// guards consuming a `single_use` PERMIT before the work runs. A scripted fetch plays the
// service; it records every call, so each test can show what was (not) sent and whether
// the work ran. The live counterparts are in live.test.js.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  ConnectionError,
  InternalServerError,
  NotPermittedError,
  ReceiptNotUsableError,
  UnexpectedResponseError,
  guarded,
  requestDigest,
  requirePermit,
  requirePermitAndConsume,
} from "../dist/index.js";
import { Client } from "../dist/index.js";
import { json, keyList, makeSigner, receiptFields, recordingSleep, scriptedFetch, signReceipt } from "./helpers.js";

const BASE = "http://execauth.test";
const NOW = "2026-11-23T00:55:00.000Z";
const RECEIPT_ID = "service_rcpt_69ed8f474432b78c";
const CONSUME_URL = `${BASE}/v1/receipts/${RECEIPT_ID}/consume`;
const signer = makeSigner();
const keys = keyList(signer.entry);
const REQUEST = { surface: "deploy.production", actor: "release-bot", context: { branch: "main" } };

const singleUse = signReceipt(signer, receiptFields("PERMIT", { request_digest: requestDigest(REQUEST), single_use: true }));
const reusable = signReceipt(signer, receiptFields("PERMIT", { request_digest: requestDigest(REQUEST) }));

function consumption(actor = "release-bot") {
  return {
    receipt_id: RECEIPT_ID,
    execution_id: "service_exec_01M82Y5GK3VGDPZWQB9N29ETXV",
    consumed_at: "2026-11-23T00:55:01.000Z",
    consumed_by: { key_id: "key_01m82y5g8mb4rc2kws9mpgfb6w", actor },
  };
}

const EARLIER = consumption("agent:billing-7");

/** A 409 `receipt_already_consumed` as profile A renders it (flat) or B (nested). */
function alreadyConsumed(profile = "a") {
  const error = { code: "receipt_already_consumed", message: "receipt was already used", request_id: "req_9", details: [EARLIER] };
  if (profile === "b") return json(409, { error });
  const { code, ...rest } = error;
  return json(409, { error: code, ...rest });
}

function client(fetch, extra = {}) {
  const { sleep } = recordingSleep();
  return new Client({ baseUrl: BASE, apiKey: "service_live_test", fetch, sleep, random: () => 0.5, ...extra });
}

/** The service: keys, execute answering `receipt`, consume answering `consumeAnswer(call)`. */
function service(receipt, consumeAnswer) {
  return scriptedFetch((call) => {
    if (call.url.endsWith("/service-keys.json")) return json(200, keys);
    if (call.url.endsWith("/v1/execute")) return json(200, receipt);
    if (call.url === CONSUME_URL) return consumeAnswer(call);
    throw new Error(`unexpected call ${call.method} ${call.url}`);
  });
}

const consumeCalls = (calls) => calls.filter((call) => call.url === CONSUME_URL);

describe("client.consume", () => {
  test("posts actor and note to the receipt's consume route with the bearer key and returns the consumption", async () => {
    const { fetch, calls } = scriptedFetch(json(200, { ...consumption(), note: "invoice 1042" }));
    const used = await client(fetch).consume(singleUse, { actor: "release-bot", note: "invoice 1042" });
    assert.equal(used.consumed_at, "2026-11-23T00:55:01.000Z");
    assert.equal(calls.length, 1);
    assert.equal(calls[0].method, "POST");
    assert.equal(calls[0].url, CONSUME_URL);
    assert.equal(calls[0].headers.get("authorization"), "Bearer service_live_test");
    assert.deepEqual(JSON.parse(calls[0].body), { actor: "release-bot", note: "invoice 1042" });
  });

  test("sends an empty object when neither actor nor note is given", async () => {
    const { fetch, calls } = scriptedFetch(json(200, consumption()));
    await client(fetch).consume(singleUse);
    assert.deepEqual(JSON.parse(calls[0].body), {});
  });

  for (const profile of ["a", "b"]) {
    test(`used already (profile ${profile}): ReceiptNotUsableError says when and by whom`, async () => {
      const { fetch } = scriptedFetch(alreadyConsumed(profile));
      await assert.rejects(client(fetch).consume(singleUse), (error) => {
        assert.ok(error instanceof ReceiptNotUsableError);
        assert.ok(error instanceof NotPermittedError, "a refusal the guards' onNotPermitted can read");
        assert.equal(error.code, "receipt_already_consumed");
        assert.equal(error.status, 409);
        assert.deepEqual(error.consumed, EARLIER);
        assert.equal(error.receipt, singleUse);
        return true;
      });
    });
  }

  for (const code of ["receipt_expired", "receipt_not_permit"]) {
    test(`409 ${code}: ReceiptNotUsableError with that code and no earlier consumption`, async () => {
      const { fetch } = scriptedFetch(json(409, { error: code, message: code, request_id: "req_3" }));
      await assert.rejects(client(fetch).consume(singleUse), (error) => {
        assert.ok(error instanceof ReceiptNotUsableError);
        assert.equal(error.code, code);
        assert.equal(error.consumed, undefined);
        return true;
      });
    });
  }

  test("404 (no such receipt in this organization): ReceiptNotUsableError not_found", async () => {
    const { fetch } = scriptedFetch(json(404, { error: "not_found", message: "no such receipt", request_id: "req_4" }));
    await assert.rejects(client(fetch).consume(singleUse), (error) => {
      assert.ok(error instanceof ReceiptNotUsableError);
      assert.equal(error.code, "not_found");
      assert.equal(error.status, 404);
      return true;
    });
  });

  test("a 200 about another receipt is not a consumption of this one", async () => {
    const { fetch } = scriptedFetch(json(200, { ...consumption(), receipt_id: "service_rcpt_0000000000000000" }));
    await assert.rejects(client(fetch).consume(singleUse), UnexpectedResponseError);
  });

  test("a 503 is retried with the same body, and the retry's consumption is returned", async () => {
    const { fetch, calls } = scriptedFetch(json(503, { error: "service_unavailable" }), json(200, consumption()));
    assert.equal((await client(fetch).consume(singleUse, { actor: "a" })).receipt_id, RECEIPT_ID);
    assert.equal(calls.length, 2);
    assert.equal(calls[1].body, calls[0].body);
  });

  test("a retry after a lost answer finds its own earlier use and is refused: fail closed", async () => {
    const { fetch } = scriptedFetch(new TypeError("fetch failed"), alreadyConsumed());
    await assert.rejects(client(fetch).consume(singleUse), ReceiptNotUsableError);
  });

  test("a receipt without a receipt_id is refused before anything is sent", async () => {
    const { fetch, calls } = scriptedFetch(json(200, consumption()));
    await assert.rejects(client(fetch).consume({ decision: "PERMIT" }), TypeError);
    assert.equal(calls.length, 0);
  });
});

describe("client.requirePermit with a single_use PERMIT", () => {
  test("consumes it as the request's actor before returning it", async () => {
    const { fetch, calls } = service(singleUse, () => json(200, consumption()));
    const permit = await client(fetch).requirePermit(REQUEST, { now: NOW });
    assert.equal(permit.receipt_id, RECEIPT_ID);
    assert.equal(consumeCalls(calls).length, 1);
    assert.deepEqual(JSON.parse(consumeCalls(calls)[0].body), { actor: "release-bot" });
  });

  test("used already: throws ReceiptNotUsableError instead of returning the PERMIT", async () => {
    const { fetch } = service(singleUse, () => alreadyConsumed());
    await assert.rejects(client(fetch).requirePermit(REQUEST, { now: NOW }), ReceiptNotUsableError);
  });

  test("the service unreachable when consuming: throws ConnectionError, never the PERMIT", async () => {
    const { fetch } = service(singleUse, () => new TypeError("fetch failed"));
    await assert.rejects(client(fetch, { maxRetries: 1 }).requirePermit(REQUEST, { now: NOW }), ConnectionError);
  });

  test("a 500 that outlasts the retries: throws the wire error, never the PERMIT", async () => {
    const { fetch } = service(singleUse, () => json(500, { error: "internal_error" }));
    await assert.rejects(client(fetch, { maxRetries: 1 }).requirePermit(REQUEST, { now: NOW }), InternalServerError);
  });

  test("deferConsumption: returns the PERMIT unconsumed, for the caller to consume", async () => {
    const { fetch, calls } = service(singleUse, () => json(200, consumption()));
    const permit = await client(fetch).requirePermit(REQUEST, { now: NOW, deferConsumption: true });
    assert.equal(permit.single_use, true);
    assert.equal(consumeCalls(calls).length, 0);
  });

  test("a PERMIT without single_use is not consumed", async () => {
    const { fetch, calls } = service(reusable, () => json(200, consumption()));
    await client(fetch).requirePermit(REQUEST, { now: NOW });
    assert.equal(consumeCalls(calls).length, 0);
  });
});

describe("guarded with a single_use PERMIT", () => {
  const spec = { surface: "deploy.production", actor: "release-bot", context: { branch: "main" }, options: { now: NOW } };

  test("the tool runs after the consumption", async () => {
    const { fetch, calls } = service(singleUse, () => json(200, consumption()));
    const order = [];
    const tool = guarded(client(fetch), spec, () => {
      order.push(`ran after ${consumeCalls(calls).length} consumption`);
      return "done";
    });
    assert.equal(await tool({}), "done");
    assert.deepEqual(order, ["ran after 1 consumption"]);
  });

  test("used already: the tool does not run; onNotPermitted gets the earlier consumption", async () => {
    const { fetch } = service(singleUse, () => alreadyConsumed());
    let ran = false;
    const tool = guarded(
      client(fetch),
      { ...spec, onNotPermitted: (error) => `refused: used at ${error.consumed.consumed_at}` },
      () => {
        ran = true;
      },
    );
    assert.equal(await tool({}), `refused: used at ${EARLIER.consumed_at}`);
    assert.equal(ran, false);
  });

  test("the service unreachable when consuming: the tool does not run, even with onNotPermitted", async () => {
    const { fetch } = service(singleUse, () => new TypeError("fetch failed"));
    let ran = false;
    const tool = guarded(client(fetch, { maxRetries: 0 }), { ...spec, onNotPermitted: () => "refused" }, () => {
      ran = true;
    });
    await assert.rejects(tool({}), ConnectionError);
    assert.equal(ran, false);
  });

  test("deferConsumption: the tool gets the PERMIT unconsumed", async () => {
    const { fetch, calls } = service(singleUse, () => json(200, consumption()));
    const tool = guarded(client(fetch), { ...spec, options: { now: NOW, deferConsumption: true } }, (_input, receipt) => {
      assert.equal(consumeCalls(calls).length, 0);
      return receipt.single_use;
    });
    assert.equal(await tool({}), true);
  });
});

describe("requirePermit (offline) with a single_use PERMIT", () => {
  test("is refused: nothing offline stops a second use", () => {
    assert.throws(() => requirePermit(singleUse, { keys, now: NOW }), (error) => {
      assert.ok(error instanceof ReceiptNotUsableError);
      assert.equal(error.code, "consumer_required");
      assert.equal(error.verdict.reason, "valid");
      return true;
    });
  });

  test("deferConsumption: returned, for the caller to consume before acting", () => {
    assert.equal(requirePermit(singleUse, { keys, now: NOW, deferConsumption: true }), singleUse);
  });

  test("requirePermitAndConsume consumes it through the consumer, as the given actor", async () => {
    const { fetch, calls } = scriptedFetch(json(200, consumption("agent:7")));
    const permit = await requirePermitAndConsume(singleUse, {
      keys,
      now: NOW,
      consumer: client(fetch),
      actor: "release-bot",
      consumeActor: "agent:7",
      note: "run 12",
    });
    assert.equal(permit, singleUse);
    assert.deepEqual(JSON.parse(calls[0].body), { actor: "agent:7", note: "run 12" });
  });

  test("requirePermitAndConsume throws when the consumption is refused", async () => {
    const { fetch } = scriptedFetch(alreadyConsumed());
    await assert.rejects(requirePermitAndConsume(singleUse, { keys, now: NOW, consumer: client(fetch) }), ReceiptNotUsableError);
  });

  test("requirePermitAndConsume leaves a PERMIT without single_use alone", async () => {
    const { fetch, calls } = scriptedFetch(json(200, consumption()));
    assert.equal(await requirePermitAndConsume(reusable, { keys, now: NOW, consumer: client(fetch) }), reusable);
    assert.equal(calls.length, 0);
  });
});
