#!/usr/bin/env bash
# action.yml, step "gate": `execauth gate` with the action's inputs (from the environment).
#
# enforce: INPUT_RUN runs only under a verified PERMIT; the step ends with gate's status
#          (the script's own when it ran; 77 DENY, 75 SILENCE, 69 unavailable, 65 not
#          verified; with approval-timeout 79 rejected, 80 expired, 81 still pending:
#          README.md, "Gate a command").
# observe: gate asks and verifies with `true` as its command; the decision is recorded
#          (outputs, job summary, a warning unless PERMIT), then INPUT_RUN runs whatever
#          the answer, and the step ends with the script's status: it never blocks.
set -uo pipefail

case "${INPUT_MODE:-enforce}" in
  enforce | observe) ;;
  *) echo "::error::execauth: mode must be enforce or observe, not '${INPUT_MODE}'"; exit 2 ;;
esac

receipt_file="${INPUT_RECEIPT_FILE:?}"
rm -f "$receipt_file"  # a receipt left from an earlier run must not be reported as this one's
args=(gate --surface "${INPUT_SURFACE:?}" --receipt-file "$receipt_file")
if [[ -n "${INPUT_ACTOR:-}" ]]; then args+=(--actor "$INPUT_ACTOR"); fi
if [[ -n "${INPUT_KEYS:-}" ]]; then args+=(--keys "$INPUT_KEYS"); fi
# Waiting for a person is for enforce mode; observe never blocks, so it never waits.
if [[ -n "${INPUT_APPROVAL_TIMEOUT:-}" && "${INPUT_MODE:-enforce}" == enforce ]]; then
  args+=(--approval-timeout "$INPUT_APPROVAL_TIMEOUT")
fi
while IFS= read -r line; do
  line="${line#"${line%%[![:space:]]*}"}"
  if [[ -n "$line" ]]; then args+=(--context "$line"); fi
done <<< "${INPUT_CONTEXT:-}"

if [[ "${INPUT_MODE:-enforce}" == enforce && -n "${INPUT_RUN:-}" ]]; then
  command=(bash --noprofile --norc -eo pipefail -c "$INPUT_RUN")
else
  command=(true)
fi
"${EXECAUTH_BIN:-execauth}" "${args[@]}" -- "${command[@]}"
status=$?

decision=NONE
receipt_id=""
# gate writes the receipt file only once the receipt verified and matched the request.
if [[ -s "$receipt_file" ]]; then
  read -r decision receipt_id < <(python3 -c '
import json, sys
receipt = json.load(open(sys.argv[1]))
print(receipt.get("decision", "NONE"), receipt.get("receipt_id", ""))' "$receipt_file")
fi
{
  echo "decision=$decision"
  echo "receipt-id=$receipt_id"
  echo "receipt-file=$([[ -s "$receipt_file" ]] && echo "$receipt_file")"
  echo "gate-status=$status"
} >> "${GITHUB_OUTPUT:-/dev/null}"
echo "execauth ${INPUT_MODE:-enforce}: ${INPUT_SURFACE} → $decision ${receipt_id} (gate status $status)" \
  >> "${GITHUB_STEP_SUMMARY:-/dev/null}"

if [[ "${INPUT_MODE:-enforce}" == enforce ]]; then
  exit "$status"
fi
if [[ "$decision" != PERMIT || "$status" -ne 0 ]]; then
  echo "::warning::execauth observe: ${INPUT_SURFACE} answered $decision (gate status $status); enforce mode would not have run this step"
fi
if [[ -n "${INPUT_RUN:-}" ]]; then
  # As under gate: the receipt (empty when none came) but not the key to ask for more.
  unset EXECAUTH_API_KEY
  export EXECAUTH_RECEIPT_ID="$receipt_id"
  export EXECAUTH_RECEIPT_FILE
  EXECAUTH_RECEIPT_FILE="$([[ -s "$receipt_file" ]] && echo "$receipt_file")"
  exec bash --noprofile --norc -eo pipefail -c "$INPUT_RUN"
fi
exit 0
