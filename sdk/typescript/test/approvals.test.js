// Waiting for people: `authorize`/`requirePermit` with `waitForApprovalMs` on an ESCALATE
// (docs/approvals.md). The scripted tests pin what the client sends and refuses; the
// live ones run against a real execauth (scripts/test-live.sh) while a second key votes.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test, test as nodeTest } from "node:test";

import {
  ApprovalPendingError,
  Client,
  DeniedError,
  UnexpectedResponseError,
  requestDigest,
} from "../dist/index.js";
import { json, keyList, makeSigner, receiptFields, recordingSleep, scriptedFetch, signReceipt } from "./helpers.js";

const BASE = "http://execauth.test";
const APPROVAL_ID = "service_appr_01M85AAAAAAAAAAAAAAAAAAAAA";
const REQUEST = { surface: "deploy.production", actor: "release-bot", context: { branch: "main" } };
const signer = makeSigner();
const keys = keyList(signer.entry);

function escalation() {
  return signReceipt(
    signer,
    receiptFields("ESCALATE", {
      receipt_id: "service_rcpt_e5ca1a7e00000001",
      rule_id: "a-person-decides",
      reason_code: "APPROVAL_REQUIRED",
      request_digest: requestDigest(REQUEST),
      approval_id: APPROVAL_ID,
      approval_expires_at: "2026-11-23T01:30:00.000Z",
      approval_quorum: 1,
    }),
  );
}

function outcome(decision, overrides = {}) {
  return signReceipt(
    signer,
    receiptFields(decision, {
      receipt_id: "service_rcpt_0a7c0e0000000002",
      request_digest: requestDigest(REQUEST),
      approval_id: APPROVAL_ID,
      escalation_receipt_id: "service_rcpt_e5ca1a7e00000001",
      approval_outcome: decision === "PERMIT" ? "approved" : "rejected",
      ...overrides,
    }),
  );
}

function approval(state, outcomeReceipt = null) {
  return { approval_id: APPROVAL_ID, state, quorum: 1, approvals: 0, outcome_receipt: outcomeReceipt };
}

/** A client whose clock moves `stepMs` with every request (the server's long-poll). */
function scriptedClient(fetch, stepMs = 0) {
  let now = Date.parse("2026-11-23T00:55:00.000Z");
  const { sleep } = recordingSleep();
  const tick = async (...args) => {
    const answer = await fetch(...args);
    now += stepMs;
    return answer;
  };
  return new Client({ baseUrl: BASE, apiKey: "service_live_test", fetch: tick, sleep, clock: () => now });
}

describe("waitForApprovalMs (scripted)", () => {
  test("without it, an ESCALATE is returned at once and nothing is followed", async () => {
    const { fetch, calls } = scriptedFetch(json(200, escalation()));
    const receipt = await scriptedClient(fetch).authorize(REQUEST);
    assert.equal(receipt.decision, "ESCALATE");
    assert.equal(calls.length, 1);
  });

  test("follows the approval on baseUrl with a bounded long-poll and returns the linked outcome", async () => {
    const permit = outcome("PERMIT");
    const { fetch, calls } = scriptedFetch(
      json(202, escalation()),
      json(200, approval("pending")),
      json(200, approval("approved", permit)),
    );
    const receipt = await scriptedClient(fetch, 60_000).authorize(REQUEST, { waitForApprovalMs: 15 * 60_000 });
    assert.deepEqual(receipt, permit);
    assert.equal(calls[1].url, `${BASE}/v1/approvals/${APPROVAL_ID}?wait=60s`);
    assert.equal(calls[1].method, "GET");
    assert.equal(calls[1].headers.get("authorization"), "Bearer service_live_test");
  });

  test("the last long-poll asks only for the time left", async () => {
    const { fetch, calls } = scriptedFetch(json(200, escalation()), json(200, approval("pending")));
    await scriptedClient(fetch, 100_000).authorize(REQUEST, { waitForApprovalMs: 130_000 });
    assert.deepEqual(
      calls.slice(1).map((call) => new URL(call.url).searchParams.get("wait")),
      ["60s", "30s"],
    );
  });

  test("an outcome of another ESCALATE is refused", async () => {
    const stray = outcome("PERMIT", { escalation_receipt_id: "service_rcpt_0the000000000000" });
    const { fetch } = scriptedFetch(json(200, escalation()), json(200, approval("approved", stray)));
    await assert.rejects(
      scriptedClient(fetch).authorize(REQUEST, { waitForApprovalMs: 60_000 }),
      UnexpectedResponseError,
    );
  });

  test("a final approval without an outcome receipt is refused", async () => {
    const { fetch } = scriptedFetch(json(200, escalation()), json(200, approval("approved")));
    await assert.rejects(
      scriptedClient(fetch).authorize(REQUEST, { waitForApprovalMs: 60_000 }),
      UnexpectedResponseError,
    );
  });

  test("requirePermit: still pending when the wait ends is ApprovalPendingError", async () => {
    const steps = [json(200, escalation()), json(200, approval("pending"))];
    const ordered = async (url) => (String(url).includes("service-keys") ? json(200, keys) : steps.shift());
    await assert.rejects(
      scriptedClient(ordered, 30_000).requirePermit(REQUEST, { waitForApprovalMs: 20_000 }),
      (error) => {
        assert.ok(error instanceof ApprovalPendingError);
        assert.equal(error.approvalId, APPROVAL_ID);
        return true;
      },
    );
  });

  test("requirePermit: a rejection is a DeniedError carrying the outcome", async () => {
    const denied = outcome("DENY", { reasonCode: "SERVICE_POLICY_APPROVAL_REJECTED" });
    const steps = [json(200, escalation()), json(200, approval("rejected", denied))];
    const ordered = async (url) => (String(url).includes("service-keys") ? json(200, keys) : steps.shift());
    await assert.rejects(scriptedClient(ordered).requirePermit(REQUEST, { waitForApprovalMs: 60_000 }), (error) => {
      assert.ok(error instanceof DeniedError);
      assert.equal(error.reasonCode, "SERVICE_POLICY_APPROVAL_REJECTED");
      return true;
    });
  });
});

const url = process.env.EXECAUTH_TEST_URL;
const apiKey = process.env.EXECAUTH_TEST_API_KEY;
const approverKey = process.env.EXECAUTH_TEST_APPROVER_KEY;
const skip =
  url && apiKey && approverKey
    ? false
    : "live approval tests need EXECAUTH_TEST_URL, EXECAUTH_TEST_API_KEY and EXECAUTH_TEST_APPROVER_KEY (see scripts/test-live.sh)";

describe("live: waiting for a person on a running execauth", () => {
  const liveTest = (name, fn) => nodeTest(name, { skip }, fn);
  const client = new Client({ baseUrl: url ?? "http://unset", apiKey });

  /** What the approver sees: the approval of the request tagged `run`, once listed. */
  async function pendingApproval(run) {
    for (let attempt = 0; attempt < 300; attempt++) {
      const listed = await fetch(`${url}/operator/approvals`, { headers: { authorization: `Bearer ${approverKey}` } });
      assert.equal(listed.status, 200);
      const item = (await listed.json()).items.find((i) => i.context?.run === run);
      if (item) return item.approval_id;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`no approval listed for run ${run}`);
  }

  async function vote(approvalId, verb) {
    const answer = await fetch(`${url}/operator/approvals/${approvalId}/${verb}`, {
      method: "POST",
      headers: { authorization: `Bearer ${approverKey}`, "content-type": "application/json" },
      body: JSON.stringify({ reason: "reviewed by the TS SDK tests", actor: "alice@example.test" }),
    });
    assert.equal(answer.status, 200, await answer.text());
  }

  const request = (surface) => ({ surface, actor: "release-bot", context: { run: randomUUID() } });

  liveTest("approved while waiting: requirePermit returns the linked PERMIT, verified, with its approver", async () => {
    const asked = request("approve.production");
    const waiting = client.requirePermit(asked, { waitForApprovalMs: 60_000 });
    const approvalId = await pendingApproval(asked.context.run);
    await vote(approvalId, "approve");
    const permit = await waiting;
    assert.equal(permit.decision, "PERMIT");
    assert.equal(permit.approval_id, approvalId);
    assert.equal(permit.approval_outcome, "approved");
    assert.equal(permit.request_digest, requestDigest(asked));
    assert.equal(permit.approvers[0].actor, "alice@example.test");
    const verdict = await client.verify(permit);
    assert.equal(verdict.reason, "valid");
    // Who approved, from the signed receipt alone: the approver's key, once.
    assert.equal(verdict.approvalId, approvalId);
    assert.deepEqual(verdict.approvers, [permit.approvers[0].key_id]);
    assert.match(verdict.detail, new RegExp(`approved by ${permit.approvers[0].key_id}$`));
  });

  liveTest("rejected while waiting: DeniedError with SERVICE_POLICY_APPROVAL_REJECTED", async () => {
    const asked = request("approve.production");
    const waiting = client.requirePermit(asked, { waitForApprovalMs: 60_000 });
    const rejected = assert.rejects(waiting, (error) => {
      assert.ok(error instanceof DeniedError);
      assert.equal(error.reasonCode, "SERVICE_POLICY_APPROVAL_REJECTED");
      return true;
    });
    await vote(await pendingApproval(asked.context.run), "reject");
    await rejected;
  });

  liveTest("expired while waiting: DeniedError with SERVICE_POLICY_APPROVAL_EXPIRED", async () => {
    await assert.rejects(client.requirePermit(request("approve.hurried"), { waitForApprovalMs: 60_000 }), (error) => {
      assert.ok(error instanceof DeniedError);
      assert.equal(error.reasonCode, "SERVICE_POLICY_APPROVAL_EXPIRED");
      return true;
    });
  });

  liveTest("nobody decides within the wait: ApprovalPendingError, never a permission", async () => {
    await assert.rejects(
      client.requirePermit(request("approve.production"), { waitForApprovalMs: 1_500 }),
      ApprovalPendingError,
    );
  });
});
