// Provision a tenant on a running execauth for the live tests: an organization, an
// execute key and the policy of tests/conftest.py (DEPLOY_POLICY), plus a policy of
// surfaces that escalate and an admin key to approve them, and one whose PERMITs are
// single-use. Prints shell `export` lines
// for EXECAUTH_TEST_URL, EXECAUTH_TEST_API_KEY and EXECAUTH_TEST_APPROVER_KEY.
//
//   EXECAUTH_ADMIN_TOKEN=… node scripts/provision.mjs http://127.0.0.1:18383
const url = (process.argv[2] ?? process.env.EXECAUTH_TEST_URL ?? "").replace(/\/+$/, "");
const admin = process.env.EXECAUTH_ADMIN_TOKEN;
if (!url || !admin) {
  console.error("usage: EXECAUTH_ADMIN_TOKEN=… node scripts/provision.mjs BASE_URL");
  process.exit(2);
}

// Keep in step with DEPLOY_POLICY in tests/conftest.py: the live tests expect exactly it.
export const DEPLOY_POLICY = `description: Production deploys
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main" && actor.startsWith("release-")
        ttl: 10m
      - id: wrong-branch
        deny: context.branch != "main"
        reason: SERVICE_POLICY_WRONG_BRANCH
        message: Only main can be deployed
  - match: deploy.staging
    rules:
      - id: anyone
        permit: "true"
      - id: even-amount
        deny: payload.amount % 2 == 1
`;

// Surfaces of their own, so DEPLOY_POLICY stays exactly the Python tests' one.
export const APPROVAL_POLICY = `description: Held for people
surfaces:
  - match: approve.production
    rules:
      - id: a-person-decides
        escalate: "true"
        approval_ttl: 30m
        ttl: 10m
  - match: approve.hurried
    rules:
      - id: nobody-has-time
        escalate: "true"
        approval_ttl: 2s
`;

// PERMITs to be used once (docs/receipts.md, "Using a PERMIT once"); `once.reusable`
// is the same grant without single_use.
export const SINGLE_USE_POLICY = `description: Used once
surfaces:
  - match: once.production
    rules:
      - id: one-run
        permit: "true"
        single_use: true
        ttl: 10m
  - match: once.reusable
    rules:
      - id: any-run
        permit: "true"
        ttl: 10m
`;

async function call(method, path, body, contentType = "application/json") {
  const response = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${admin}`, "content-type": contentType },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text);
}

const org = await call("POST", "/console/v1/orgs", { name: "ts-sdk-live", plan: "enterprise" });
const key = await call("POST", `/console/v1/orgs/${org.org_id}/keys`, { name: "ts-sdk", role: "execute" });
await call("PUT", `/console/v1/orgs/${org.org_id}/policies/deploys`, DEPLOY_POLICY, "application/yaml");
await call("PUT", `/console/v1/orgs/${org.org_id}/policies/approvals`, APPROVAL_POLICY, "application/yaml");
await call("PUT", `/console/v1/orgs/${org.org_id}/policies/once`, SINGLE_USE_POLICY, "application/yaml");
const approver = await call("POST", `/console/v1/orgs/${org.org_id}/keys`, { name: "ts-approver", role: "admin" });
console.log(`export EXECAUTH_TEST_URL=${url}`);
console.log(`export EXECAUTH_TEST_API_KEY=${key.api_key}`);
console.log(`export EXECAUTH_TEST_ORG_ID=${org.org_id}`);
console.log(`export EXECAUTH_TEST_APPROVER_KEY=${approver.api_key}`);
