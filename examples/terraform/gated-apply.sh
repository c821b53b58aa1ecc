#!/usr/bin/env bash
# Apply a saved Terraform plan only under a verified PERMIT for exactly that plan.
#
#   export EXECAUTH_URL=https://execauth.example EXECAUTH_API_KEY=service_live_…
#   terraform plan -out plan.tfplan
#   APPROVED_PLAN_DIGEST=sha256:… ./gated-apply.sh plan.tfplan
#
# The request to surface infra.terraform.apply carries the plan's SHA-256 as
# context.plan_digest (and APPROVED_PLAN_DIGEST, when set, as context.approved_plan_digest),
# so the signed receipt records which plan was applied. Exit status: terraform's own, or
# execauth gate's (77 DENY, 75 SILENCE, 69 service error, 65 bad receipt, 2 usage).
#
# Optional: EXECAUTH_ACTOR (default: the user name), EXECAUTH_KEYS (a pinned key list),
# TF_WORKSPACE (default: `terraform workspace show`).
set -euo pipefail

plan="${1:?usage: gated-apply.sh PLAN_FILE}"

# Digest and apply a private copy: the plan that was authorized is the plan that is
# applied, even if someone rewrites PLAN_FILE while gate waits for the decision.
work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
cp -- "$plan" "$work/plan.tfplan"
digest="sha256:$(sha256sum -- "$work/plan.tfplan" | cut -d' ' -f1)"
workspace="${TF_WORKSPACE:-$(terraform workspace show)}"

args=(
  --surface infra.terraform.apply
  --actor "${EXECAUTH_ACTOR:-$(id -un)}"
  --context "workspace=$workspace"
  --context "plan_digest=$digest"
)
if [[ -n "${APPROVED_PLAN_DIGEST:-}" ]]; then
  args+=(--context "approved_plan_digest=$APPROVED_PLAN_DIGEST")
fi
if [[ -n "${EXECAUTH_KEYS:-}" ]]; then
  args+=(--keys "$EXECAUTH_KEYS")
fi

execauth gate "${args[@]}" -- terraform apply -input=false "$work/plan.tfplan"
