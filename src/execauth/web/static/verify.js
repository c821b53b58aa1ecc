// The /verify page: read a pasted or dropped receipt, fetch the public key list,
// verify in the browser (receipt-verify.js), show the verdict. Nothing is uploaded.
import { parseKeyList, verifyReceipt } from "./receipt-verify.js";

const KEY_LIST_URL = "/.well-known/service-keys.json";
const TAMPERED = new Set(["bad_signature", "receipt_hash_mismatch", "signature_fields_disagree"]);
const KEY_PROBLEMS = new Set(["unknown_key", "revoked_key", "key_not_valid_at_timestamp"]);
const SHOWN_FIELDS = ["decision", "enforcement", "surface", "action", "actor", "org_id", "issuer",
  "timestamp", "expires_at", "policy_id", "policy_version", "rule_id", "reason_code", "reasonCode",
  "message", "receipt_id", "execution_id", "request_digest", "key_id", "approval_id",
  "approval_expires_at", "escalation_receipt_id"];

const $ = (id) => document.getElementById(id);

/** A verdict's category: authentic, expired, tampered, key, issuer or malformed. */
export function category(v) {
  if (v.authentic) return v.expired ? "expired" : "authentic";
  if (TAMPERED.has(v.reason)) return "tampered";
  if (KEY_PROBLEMS.has(v.reason)) return "key";
  if (v.reason === "issuer_mismatch") return "issuer";
  return "malformed";
}

const HEADLINES = {
  authentic: "Authentic: signed by the service and unchanged",
  expired: "Authentic, but this PERMIT has expired",
  tampered: "Tampered: the receipt does not match its signature",
  key: "Unknown or revoked key",
  issuer: "Issued by a different service",
  malformed: "Not a receipt this page can verify",
};

const DECISIONS = new Set(["PERMIT", "DENY", "SILENCE", "ESCALATE"]);

/**
 * What the receipt's decision means for the reader, shown beside the signature verdict and
 * just as large: an authentic DENY is a refusal, never an approval, and a decision whose
 * signature does not verify is a claim nobody may act on.
 */
export function decisionShown(v, receipt) {
  const claimed = receipt && typeof receipt === "object" ? receipt.decision : undefined;
  const decision = DECISIONS.has(claimed) ? claimed : null;
  if (!decision) {
    return { kind: "unknown", decision: "", text: "No decision", detail: "The receipt names no PERMIT, DENY, SILENCE or ESCALATE." };
  }
  if (!v || !v.authentic) {
    return { kind: "unverified", decision, text: `Unverified ${decision}`,
      detail: "The signature does not verify, so this decision is only a claim: do not act on it." };
  }
  if (decision === "PERMIT" && v.expired) {
    return { kind: "expired", decision, text: "PERMIT, expired",
      detail: `It allowed the action until ${receipt.expires_at}; it allows nothing now. Ask again.` };
  }
  if (decision === "PERMIT") {
    const until = receipt.expires_at ? ` until ${receipt.expires_at}` : "";
    // A PERMIT that an approval issued names who approved (signed with the rest).
    const approvers = Array.isArray(receipt.approvers) && receipt.approvers.length
      ? ` Approved by ${receipt.approvers.map((a) => (a && typeof a === "object" ? a.actor ?? a.key_id : a)).join(", ")}.`
      : "";
    return { kind: "permit", decision, text: "PERMIT: allowed",
      detail: `The service allowed this action${until}, for this surface and request only.${approvers}` };
  }
  if (decision === "ESCALATE") {
    return { kind: "silence", decision, text: "ESCALATE: waiting for approval",
      detail: "A person must approve this first; it allows nothing by itself. Do not proceed." };
  }
  if (decision === "DENY") {
    const why = receipt.message ? ` ${receipt.message}.` : "";
    return { kind: "deny", decision, text: "DENY: refused",
      detail: `The service refused this action: do not proceed.${why}` };
  }
  return { kind: "silence", decision, text: "SILENCE: not decided",
    detail: "The service could not decide (missing context or an evaluation error): do not proceed." };
}

async function keyList() {
  const response = await fetch(KEY_LIST_URL, { credentials: "omit", cache: "no-cache" });
  if (!response.ok) throw new Error(`could not load ${KEY_LIST_URL}: HTTP ${response.status}`);
  return parseKeyList(await response.json());
}

function asOf() {
  const text = $("as-of").value.trim();
  if (!text) return new Date();
  const when = new Date(text);
  if (Number.isNaN(when.getTime())) throw new Error("'As of' is not a valid time");
  return when;
}

function show(v, receipt, error) {
  const result = $("result");
  result.hidden = false;
  const kind = v ? category(v) : "malformed";
  const verdictEl = $("verdict");
  verdictEl.className = "verdict " + kind;
  verdictEl.dataset.category = kind;
  verdictEl.dataset.reason = v ? v.reason : "error";
  verdictEl.dataset.authentic = v ? String(v.authentic) : "false";
  verdictEl.dataset.expired = v ? String(v.expired) : "false";
  verdictEl.textContent = HEADLINES[kind];
  $("verdict-detail").textContent = v ? `${v.reason}: ${v.detail}` : error;
  const shown = decisionShown(v, receipt);
  const decisionEl = $("decision");
  decisionEl.className = "decision-shown " + shown.kind;
  decisionEl.dataset.kind = shown.kind;
  decisionEl.dataset.decision = shown.decision;
  decisionEl.textContent = shown.text;
  $("decision-detail").textContent = shown.detail;
  const fields = $("fields");
  fields.replaceChildren();
  if (receipt && typeof receipt === "object" && !Array.isArray(receipt)) {
    for (const name of SHOWN_FIELDS) {
      if (!Object.hasOwn(receipt, name)) continue;
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      const value = receipt[name];
      dd.textContent = typeof value === "string" ? value : JSON.stringify(value);
      fields.append(dt, dd);
    }
  }
  const hasPayload = Boolean(v && v.payload);
  $("payload-details").hidden = !hasPayload;
  $("payload").textContent = hasPayload ? new TextDecoder().decode(v.payload) : "";
  $("payload-digest").textContent = hasPayload ? "sha256:" + v.digest : "";
  // How many verdicts this page has shown: lets tests (and curious users) see a re-check happened.
  document.body.dataset.verdicts = String(Number(document.body.dataset.verdicts || 0) + 1);
}

async function check() {
  let receipt = null;
  try {
    receipt = JSON.parse($("receipt").value);
  } catch (e) {
    show(null, null, "The text is not valid JSON: " + e.message);
    return;
  }
  try {
    const { keys, issuer } = await keyList();
    show(await verifyReceipt(receipt, keys, { now: asOf(), issuer }), receipt);
  } catch (e) {
    show(null, receipt, e.message);
  }
}

async function readFile(file) {
  if (!file) return;
  $("receipt").value = await file.text();
  await check();
}

function setUp() {
  const form = $("verify-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    check();
  });
  const zone = $("dropzone");
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("dragging");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    readFile(event.dataTransfer.files[0]);
  });
  $("receipt-file").addEventListener("change", (event) => readFile(event.target.files[0]));
  document.body.dataset.verifyReady = "true";
}

setUp();
