// The client with an injected fetch, sleep and clock: retries, idempotency keys,
// error mapping for both wire profiles, the key cache, requirePermit and guarded.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  Client,
  ConnectionError,
  DeniedError,
  ExecauthError,
  ExpiredPermitError,
  ForbiddenError,
  IdempotencyConflictError,
  InternalServerError,
  InvalidReceiptError,
  InvalidRequestError,
  NotFoundError,
  PayloadTooLargeError,
  PermitRequiredError,
  PlanLimitExceededError,
  RateLimitedError,
  ReceiptMismatchError,
  ServiceUnavailableError,
  SilencedError,
  SurfaceNotFoundError,
  UnauthorizedError,
  UnexpectedResponseError,
  backoffDelayMs,
  guarded,
  parseRetryAfter,
  requestDigest,
  requirePermit,
} from "../dist/index.js";
import { json, keyList, makeSigner, receiptFields, recordingSleep, scriptedFetch, signReceipt } from "./helpers.js";

const BASE = "http://execauth.test";
const NOW = "2026-11-23T00:55:00.000Z";
const signer = makeSigner();
const keys = keyList(signer.entry);

function client(fetch, extra = {}) {
  const { sleep, delays } = recordingSleep();
  const c = new Client({ baseUrl: BASE + "/", apiKey: "service_live_test", fetch, sleep, random: () => 0.5, ...extra });
  return { client: c, delays };
}

function flatError(status, code, headers = {}) {
  return json(status, { error: code, message: `it is ${code}`, request_id: "req_1" }, headers);
}

function nestedError(status, code, headers = {}) {
  return json(status, { error: { code, message: `it is ${code}`, request_id: "req_2" } }, headers);
}

describe("authorize", () => {
  test("posts the request to /v1/execute with the bearer key and returns the receipt", async () => {
    const receipt = signReceipt(signer, receiptFields("PERMIT"));
    const { fetch, calls } = scriptedFetch(json(200, receipt));
    const { client: c } = client(fetch);
    const answer = await c.authorize({
      surface: "deploy.production",
      actor: "release-bot",
      context: { branch: "main" },
      idempotencyKey: "deploy-42",
    });
    assert.deepEqual(answer, receipt);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].url, BASE + "/v1/execute");
    assert.equal(calls[0].method, "POST");
    assert.equal(calls[0].headers.get("authorization"), "Bearer service_live_test");
    assert.equal(calls[0].headers.get("content-type"), "application/json");
    assert.equal(calls[0].headers.get("idempotency-key"), "deploy-42");
    assert.deepEqual(JSON.parse(calls[0].body), {
      surface: "deploy.production",
      actor: "release-bot",
      context: { branch: "main" },
      idempotency_key: "deploy-42",
    });
  });

  test("without an idempotency key a random UUID is sent", async () => {
    const { fetch, calls } = scriptedFetch(json(200, signReceipt(signer, receiptFields("PERMIT"))));
    await client(fetch).client.authorize({ surface: "deploy.production" });
    assert.match(calls[0].headers.get("idempotency-key"), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(JSON.parse(calls[0].body).idempotency_key, calls[0].headers.get("idempotency-key"));
  });

  test("a DENY under profile A (200) is a receipt, not an error", async () => {
    const deny = signReceipt(signer, receiptFields("DENY"));
    const { fetch } = scriptedFetch(json(200, deny));
    assert.equal((await client(fetch).client.authorize({ surface: "deploy.production" })).decision, "DENY");
  });

  test("under profile B a 403 DENY and a 422 SILENCE body are receipts", async () => {
    const deny = signReceipt(signer, receiptFields("DENY"));
    const silence = signReceipt(signer, receiptFields("SILENCE"));
    const { fetch, calls } = scriptedFetch(json(403, deny), json(422, silence));
    const { client: c } = client(fetch, { wireProfile: "b" });
    assert.deepEqual(await c.authorize({ surface: "deploy.production" }), deny);
    assert.deepEqual(await c.authorize({ surface: "deploy.production" }), silence);
    assert.equal(calls[0].headers.get("prefer"), "wire=b");
  });

  test("a 200 without a receipt is an UnexpectedResponseError", async () => {
    const { fetch } = scriptedFetch(new Response("<html>proxy</html>", { status: 200 }));
    await assert.rejects(client(fetch).client.authorize({ surface: "a.b" }), UnexpectedResponseError);
  });

  test("a value JSON cannot carry is refused before sending", async () => {
    const { fetch, calls } = scriptedFetch(json(200, {}));
    await assert.rejects(client(fetch).client.authorize({ surface: "a.b", payload: { amount: NaN } }), (error) => {
      assert.ok(error instanceof ExecauthError);
      assert.equal(error.code, "invalid_request");
      return true;
    });
    assert.equal(calls.length, 0);
  });

  test("a client without an apiKey cannot authorize", async () => {
    const c = new Client({ baseUrl: BASE, fetch: scriptedFetch(json(200, {})).fetch });
    await assert.rejects(c.authorize({ surface: "a.b" }), TypeError);
  });
});

describe("error mapping (both wire profiles)", () => {
  const table = [
    [400, "invalid_request", InvalidRequestError],
    [401, "unauthorized", UnauthorizedError],
    [403, "forbidden", ForbiddenError],
    [404, "not_found", NotFoundError],
    [404, "surface_not_found", SurfaceNotFoundError],
    [409, "idempotency_conflict", IdempotencyConflictError],
    [413, "payload_too_large", PayloadTooLargeError],
    [429, "SERVICE_PLAN_LIMIT_EXCEEDED", PlanLimitExceededError],
  ];
  for (const [status, code, Class] of table) {
    for (const [profile, render] of [["A", flatError], ["B", nestedError]]) {
      test(`${status} ${code} (profile ${profile}) → ${Class.name}, not retried`, async () => {
        const { fetch, calls } = scriptedFetch(render(status, code));
        const error = await client(fetch).client.authorize({ surface: "deploy.production" }).then(
          () => assert.fail("no error"),
          (e) => e,
        );
        assert.ok(error instanceof Class, error.name);
        assert.ok(error instanceof ExecauthError);
        assert.equal(error.code, code);
        assert.equal(error.status, status);
        assert.equal(error.message, `it is ${code}`);
        assert.equal(error.requestId, profile === "A" ? "req_1" : "req_2");
        assert.equal(calls.length, 1);
      });
    }
  }

  test("a surface_not_found is also a NotFoundError", async () => {
    const { fetch } = scriptedFetch(flatError(404, "surface_not_found"));
    await assert.rejects(client(fetch).client.authorize({ surface: "a.b" }), NotFoundError);
  });

  test("an error body without a code maps by status; X-Request-Id is kept", async () => {
    const { fetch } = scriptedFetch(new Response("Bad Gateway", { status: 502, headers: { "x-request-id": "rid" } }));
    const error = await client(fetch, { maxRetries: 0 }).client.authorize({ surface: "a.b" }).catch((e) => e);
    assert.ok(error instanceof ServiceUnavailableError);
    assert.equal(error.status, 502);
    assert.equal(error.requestId, "rid");
  });

  test("an unknown code keeps the code on a plain ExecauthError", async () => {
    const { fetch } = scriptedFetch(flatError(418, "teapot"));
    const error = await client(fetch).client.authorize({ surface: "a.b" }).catch((e) => e);
    assert.equal(error.constructor, ExecauthError);
    assert.equal(error.code, "teapot");
  });

  test("a redirect is not followed (the bearer key stays with the configured host)", async () => {
    const { fetch, calls } = scriptedFetch(new Response(null, { status: 307, headers: { location: "https://elsewhere/" } }));
    const error = await client(fetch).client.authorize({ surface: "a.b" }).catch((e) => e);
    assert.equal(error.constructor, ExecauthError);
    assert.equal(error.code, "http_307");
    assert.equal(calls.length, 1);
  });

  test("a 403 forbidden under profile B is an error, not a receipt", async () => {
    const { fetch } = scriptedFetch(nestedError(403, "forbidden"));
    await assert.rejects(client(fetch, { wireProfile: "b" }).client.authorize({ surface: "a.b" }), ForbiddenError);
  });
});

describe("retries", () => {
  const receipt = signReceipt(signer, receiptFields("PERMIT"));

  test("503, 429 and network errors are retried with the same idempotency key and body", async () => {
    const { fetch, calls } = scriptedFetch(
      flatError(503, "service_unavailable"),
      new TypeError("fetch failed"),
      flatError(429, "rate_limited"),
      json(200, receipt),
    );
    const { client: c, delays } = client(fetch, { retryBaseDelayMs: 100, retryMaxDelayMs: 10_000 });
    assert.deepEqual(await c.authorize({ surface: "deploy.production", idempotencyKey: "k1" }), receipt);
    assert.equal(calls.length, 4);
    assert.deepEqual(new Set(calls.map((call) => call.headers.get("idempotency-key"))), new Set(["k1"]));
    assert.equal(new Set(calls.map((call) => call.body)).size, 1);
    // full jitter with random() = 0.5: half of 100·2^n
    assert.deepEqual(delays, [50, 100, 200]);
  });

  test("a generated idempotency key is the same on every attempt", async () => {
    const { fetch, calls } = scriptedFetch(flatError(500, "internal_error"), json(200, receipt));
    await client(fetch).client.authorize({ surface: "deploy.production" });
    assert.equal(calls.length, 2);
    assert.equal(calls[0].headers.get("idempotency-key"), calls[1].headers.get("idempotency-key"));
    assert.equal(calls[0].body, calls[1].body);
  });

  test("Retry-After (seconds) is waited for, instead of the jittered backoff", async () => {
    const { fetch } = scriptedFetch(flatError(429, "rate_limited", { "retry-after": "7" }), json(200, receipt));
    const { client: c, delays } = client(fetch);
    await c.authorize({ surface: "deploy.production" });
    assert.deepEqual(delays, [7000]);
  });

  test("Retry-After as an HTTP date is honoured", () => {
    const now = Date.parse("2026-11-23T00:00:00Z");
    assert.equal(parseRetryAfter("Mon, 23 Nov 2026 00:00:05 GMT", now), 5);
    assert.equal(parseRetryAfter("garbage", now), undefined);
    assert.equal(parseRetryAfter(null, now), undefined);
  });

  test("a Retry-After beyond maxRetryAfterSeconds is not waited for", async () => {
    const { fetch, calls } = scriptedFetch(flatError(503, "service_unavailable", { "retry-after": "3600" }));
    const { client: c, delays } = client(fetch);
    const error = await c.authorize({ surface: "a.b" }).catch((e) => e);
    assert.ok(error instanceof ServiceUnavailableError);
    assert.equal(error.retryAfter, 3600);
    assert.equal(calls.length, 1);
    assert.deepEqual(delays, []);
  });

  test("gives up after maxRetries and throws the last error", async () => {
    const { fetch, calls } = scriptedFetch(flatError(503, "service_unavailable"));
    const { client: c, delays } = client(fetch, { maxRetries: 2 });
    await assert.rejects(c.authorize({ surface: "a.b" }), ServiceUnavailableError);
    assert.equal(calls.length, 3);
    assert.equal(delays.length, 2);
  });

  test("a network failure that persists is a ConnectionError", async () => {
    const { fetch, calls } = scriptedFetch(new TypeError("fetch failed", { cause: new Error("ECONNREFUSED") }));
    const error = await client(fetch, { maxRetries: 1 }).client.authorize({ surface: "a.b" }).catch((e) => e);
    assert.ok(error instanceof ConnectionError);
    assert.match(error.message, /ECONNREFUSED/);
    assert.equal(calls.length, 2);
  });

  test("an attempt that takes longer than timeoutMs is aborted and retried", async () => {
    const hang = (call) =>
      new Promise((_, reject) => call.signal.addEventListener("abort", () => reject(call.signal.reason)));
    const { fetch, calls } = scriptedFetch(hang, json(200, receipt));
    const { client: c } = client(fetch, { timeoutMs: 20 });
    assert.deepEqual(await c.authorize({ surface: "deploy.production" }), receipt);
    assert.equal(calls.length, 2);
  });

  test("a timeout on the last attempt is a ConnectionError saying so", async () => {
    const hang = (call) =>
      new Promise((_, reject) => call.signal.addEventListener("abort", () => reject(call.signal.reason)));
    const { fetch } = scriptedFetch(hang);
    const error = await client(fetch, { timeoutMs: 10, maxRetries: 0 }).client.authorize({ surface: "a.b" }).catch((e) => e);
    assert.ok(error instanceof ConnectionError);
    assert.match(error.message, /timed out after 10 ms/);
  });

  test("the caller's abort signal stops the call without retrying", async () => {
    const controller = new AbortController();
    const hang = (call) => {
      setTimeout(() => controller.abort(new Error("stop")), 5);
      return new Promise((_, reject) => call.signal.addEventListener("abort", () => reject(call.signal.reason)));
    };
    const { fetch, calls } = scriptedFetch(hang);
    await assert.rejects(
      client(fetch, { timeoutMs: 10_000 }).client.authorize({ surface: "a.b" }, { signal: controller.signal }),
      /stop/,
    );
    assert.equal(calls.length, 1);
  });

  test("a plan limit (429 SERVICE_PLAN_LIMIT_EXCEEDED) and 4xx errors are not retried", async () => {
    for (const response of [flatError(429, "SERVICE_PLAN_LIMIT_EXCEEDED"), flatError(400, "invalid_request")]) {
      const { fetch, calls } = scriptedFetch(response);
      await assert.rejects(client(fetch).client.authorize({ surface: "a.b" }), ExecauthError);
      assert.equal(calls.length, 1);
    }
  });

  test("RateLimitedError carries retryAfter when the retries are exhausted", async () => {
    const { fetch } = scriptedFetch(flatError(429, "rate_limited", { "retry-after": "1" }));
    const error = await client(fetch, { maxRetries: 0 }).client.authorize({ surface: "a.b" }).catch((e) => e);
    assert.ok(error instanceof RateLimitedError);
    assert.equal(error.retryAfter, 1);
  });

  test("backoff windows double up to the cap and jitter spans the whole window", () => {
    const policy = { maxRetries: 5, baseDelayMs: 100, maxDelayMs: 1000, maxRetryAfterSeconds: 60 };
    assert.deepEqual([0, 1, 2, 3, 4, 5].map((n) => backoffDelayMs(policy, n, () => 0.999999)), [99, 199, 399, 799, 999, 999]);
    assert.equal(backoffDelayMs(policy, 3, () => 0), 0);
    assert.equal(backoffDelayMs(policy, 0, () => 0, 2), 2000);
    assert.equal(backoffDelayMs(policy, 9, () => 0.9, 0.5), 500);
  });

  test("500 internal_error is retried (docs/api.md: retrying with the same key is safe)", async () => {
    const { fetch, calls } = scriptedFetch(flatError(500, "internal_error"));
    await assert.rejects(client(fetch, { maxRetries: 1 }).client.authorize({ surface: "a.b" }), InternalServerError);
    assert.equal(calls.length, 2);
  });
});

describe("key cache", () => {
  function keyServer(...documents) {
    let served = 0;
    const { fetch, calls } = scriptedFetch(() => json(200, documents[Math.min(served++, documents.length - 1)]));
    return { fetch, calls };
  }

  test("the key list is fetched once and cached for its cache_ttl", async () => {
    let now = Date.parse(NOW);
    const { fetch, calls } = keyServer({ ...keys, cache_ttl: 60 });
    const { client: c } = client(fetch, { clock: () => now });
    await c.keys();
    await c.keys();
    now += 59_000;
    await c.keys();
    assert.equal(calls.length, 1);
    assert.equal(calls[0].url, BASE + "/.well-known/service-keys.json");
    assert.equal(calls[0].headers.get("authorization"), null);
    now += 1_000;
    await c.keys();
    assert.equal(calls.length, 2);
  });

  test("cacheTtlSeconds overrides the list's cache_ttl", async () => {
    let now = 0;
    const { fetch, calls } = keyServer(keys);
    const { client: c } = client(fetch, { clock: () => now, cacheTtlSeconds: 5 });
    await c.keys();
    now = 5_000;
    await c.keys();
    assert.equal(calls.length, 2);
  });

  test("concurrent callers share one fetch", async () => {
    const { fetch, calls } = keyServer(keys);
    const { client: c } = client(fetch);
    const sets = await Promise.all([c.keys(), c.keys(), c.keys()]);
    assert.equal(calls.length, 1);
    assert.equal(sets[0], sets[2]);
  });

  test("verify refreshes the list once when a receipt names an unknown key (rotation)", async () => {
    let now = Date.parse(NOW);
    const next = makeSigner("2026-11-01T00:00:00.000Z");
    const { fetch, calls } = keyServer(keys, keyList(signer.entry, next.entry));
    const { client: c } = client(fetch, { clock: () => now, minKeyRefreshIntervalMs: 1000 });
    const old = signReceipt(signer, receiptFields("PERMIT"));
    assert.equal((await c.verify(old)).reason, "valid");
    now += 1000;
    const rotated = signReceipt(next, receiptFields("PERMIT"));
    const verdict = await c.verify(rotated);
    assert.equal(verdict.reason, "valid");
    assert.equal(calls.length, 2);
    assert.equal((await c.verify(rotated)).reason, "valid");
    assert.equal(calls.length, 2);
  });

  test("unknown keys do not refresh more often than minKeyRefreshIntervalMs", async () => {
    let now = Date.parse(NOW);
    const stranger = makeSigner();
    const { fetch, calls } = keyServer(keys);
    const { client: c } = client(fetch, { clock: () => now, minKeyRefreshIntervalMs: 10_000 });
    const receipt = signReceipt(stranger, receiptFields("PERMIT"));
    assert.equal((await c.verify(receipt)).reason, "unknown_key");
    assert.equal((await c.verify(receipt)).reason, "unknown_key");
    assert.equal(calls.length, 1);
    now += 10_000;
    assert.equal((await c.verify(receipt)).reason, "unknown_key");
    assert.equal(calls.length, 2);
  });

  test("a malformed key list is an UnexpectedResponseError", async () => {
    const { fetch } = keyServer({ nokeys: true });
    await assert.rejects(client(fetch).client.keys(), UnexpectedResponseError);
  });

  test("client.verify judges expiry by the client's clock unless now is given", async () => {
    const { fetch } = keyServer(keys);
    const late = Date.parse("2026-11-23T02:00:00Z");
    const { client: c } = client(fetch, { clock: () => late });
    const receipt = signReceipt(signer, receiptFields("PERMIT"));
    assert.equal((await c.verify(receipt)).expired, true);
    assert.equal((await c.verify(receipt, { now: NOW })).expired, false);
  });
});

describe("requirePermit (offline)", () => {
  const permit = signReceipt(signer, receiptFields("PERMIT"));

  test("returns an authentic, unexpired, matching PERMIT", () => {
    const result = requirePermit(permit, { keys, surface: "deploy.production", actor: "release-bot", now: NOW });
    assert.equal(result, permit);
  });

  test("throws DeniedError / SilencedError with the detailed reason", () => {
    const deny = signReceipt(signer, receiptFields("DENY"));
    const silence = signReceipt(signer, receiptFields("SILENCE"));
    assert.throws(() => requirePermit(deny, { keys, now: NOW }), (error) => {
      assert.ok(error instanceof DeniedError && error instanceof PermitRequiredError);
      assert.equal(error.reasonCode, "SERVICE_POLICY_WRONG_BRANCH");
      assert.equal(error.code, "denied");
      assert.equal(error.receipt, deny);
      return true;
    });
    assert.throws(() => requirePermit(silence, { keys, now: NOW }), SilencedError);
  });

  test("throws InvalidReceiptError for a forged receipt, with the verdict", () => {
    const forged = { ...permit, actor: "mallory" };
    assert.throws(() => requirePermit(forged, { keys, now: NOW }), (error) => {
      assert.ok(error instanceof InvalidReceiptError);
      assert.equal(error.verdict.reason, "bad_signature");
      return true;
    });
  });

  test("a forged DENY→PERMIT flip is not authentic", () => {
    const deny = signReceipt(signer, receiptFields("DENY"));
    assert.throws(() => requirePermit({ ...deny, decision: "PERMIT" }, { keys, now: NOW }), InvalidReceiptError);
  });

  test("throws ExpiredPermitError past expires_at", () => {
    assert.throws(() => requirePermit(permit, { keys, now: "2026-11-23T01:01:16.707Z" }), ExpiredPermitError);
  });

  test("throws ReceiptMismatchError for another surface, actor or request", () => {
    assert.throws(() => requirePermit(permit, { keys, now: NOW, surface: "deploy.staging" }), ReceiptMismatchError);
    assert.throws(() => requirePermit(permit, { keys, now: NOW, actor: "eve" }), ReceiptMismatchError);
    assert.throws(
      () => requirePermit(permit, { keys, now: NOW, requestDigest: requestDigest({ surface: "deploy.production" }) }),
      ReceiptMismatchError,
    );
  });
});

describe("client.requirePermit and guarded", () => {
  const request = { surface: "deploy.production", actor: "release-bot", context: { branch: "main" } };
  const matching = signReceipt(signer, receiptFields("PERMIT", { request_digest: requestDigest(request) }));

  function service(executeAnswer) {
    return scriptedFetch((call) => (call.url.endsWith("/service-keys.json") ? json(200, keys) : executeAnswer(call)));
  }

  test("authorize + verify + require: the PERMIT for exactly this request", async () => {
    const { fetch, calls } = service(() => json(200, matching));
    const { client: c } = client(fetch);
    assert.deepEqual(await c.requirePermit(request, { now: NOW }), matching);
    assert.deepEqual(calls.map((call) => call.method), ["POST", "GET"]);
  });

  test("a PERMIT whose request_digest is for another request is refused", async () => {
    const other = signReceipt(signer, receiptFields("PERMIT", { request_digest: requestDigest({ ...request, payload: { n: 1 } }) }));
    const { fetch } = service(() => json(200, other));
    const { client: c } = client(fetch);
    await assert.rejects(c.requirePermit(request, { now: NOW }), ReceiptMismatchError);
    assert.ok(await c.requirePermit(request, { now: NOW, checkRequestDigest: false }));
  });

  test("a DENY from the service is a DeniedError", async () => {
    const { fetch } = service(() => json(200, signReceipt(signer, receiptFields("DENY"))));
    await assert.rejects(client(fetch).client.requirePermit(request, { now: NOW }), DeniedError);
  });

  test("guarded runs the tool only under a PERMIT and hands it the receipt", async () => {
    const { fetch, calls } = service(() => json(200, matching));
    const { client: c } = client(fetch);
    const deploy = guarded(
      c,
      { surface: "deploy.production", actor: "release-bot", context: (input) => ({ branch: input.branch }), options: { now: NOW } },
      async (input, receipt) => `deployed ${input.branch} under ${receipt.receipt_id}`,
    );
    assert.equal(await deploy({ branch: "main" }), "deployed main under service_rcpt_69ed8f474432b78c");
    assert.equal(JSON.parse(calls[0].body).context.branch, "main");
  });

  test("guarded does not run the tool on DENY: it throws, or answers through onNotPermitted", async () => {
    const { fetch } = service(() => json(200, signReceipt(signer, receiptFields("DENY"))));
    const { client: c } = client(fetch);
    let ran = false;
    const tool = () => {
      ran = true;
    };
    const spec = { surface: "deploy.production", options: { now: NOW } };
    await assert.rejects(guarded(c, spec, tool)({}), DeniedError);
    const polite = guarded(c, { ...spec, onNotPermitted: (error) => `refused: ${error.reasonCode}` }, tool);
    assert.equal(await polite({}), "refused: SERVICE_POLICY_WRONG_BRANCH");
    assert.equal(ran, false);
  });

  test("guarded never turns an unauthentic receipt into a run, even with onNotPermitted", async () => {
    const { fetch } = service(() => json(200, { ...matching, actor: "mallory" }));
    const tool = guarded(client(fetch).client, { surface: "deploy.production", onNotPermitted: () => "nope", options: { now: NOW } }, () => "ran");
    await assert.rejects(tool({}), InvalidReceiptError);
  });
});
