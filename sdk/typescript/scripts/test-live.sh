#!/usr/bin/env bash
# Build and test the TypeScript SDK against a real `execauth serve`: start a server on a
# throwaway SQLite database, provision a tenant with the DEPLOY_POLICY of
# tests/conftest.py, run `npm test` with EXECAUTH_TEST_URL / EXECAUTH_TEST_API_KEY set,
# stop the server. Run from anywhere; EXECAUTH_BIN defaults to the repo's .venv.
#
#   sdk/typescript/scripts/test-live.sh            # a free port
#   PORT=19000 sdk/typescript/scripts/test-live.sh
set -euo pipefail

sdk="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$sdk/../.." && pwd)"
# A free port unless PORT is given: several test runs may share one machine.
port="${PORT:-$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { process.stdout.write(String(s.address().port)); s.close(); })')}"
bin="${EXECAUTH_BIN:-$repo/.venv/bin/execauth}"
work="$(mktemp -d "${TMPDIR:-/tmp}/execauth-ts-sdk.XXXXXX")"
base="http://127.0.0.1:$port"

export EXECAUTH_DATABASE_URL="sqlite:///$work/execauth.db"
export EXECAUTH_SECRET_KEY_FILE="$work/execauth-secret.key"  # not ./ of whoever runs this
EXECAUTH_ADMIN_TOKEN="service_admin_ts_sdk_$(node -e 'process.stdout.write(require("crypto").randomBytes(16).toString("hex"))')"
export EXECAUTH_ADMIN_TOKEN
export EXECAUTH_ISSUER="$base"

"$bin" serve --host 127.0.0.1 --port "$port" --log-level warning >"$work/server.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  if curl -fsS "$base/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
  sleep 0.1
done
curl -fsS "$base/readyz" >/dev/null || { echo "execauth did not become ready" >&2; cat "$work/server.log" >&2; exit 1; }

eval "$(node "$sdk/scripts/provision.mjs" "$base")"
cd "$sdk"
[ -d node_modules ] || npm ci --no-audit --no-fund
npm test
