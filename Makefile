# Two commands matter: `make serve` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8080

.PHONY: fuzz serve test lint typecheck pytest sdk-test sdk-test-python sdk-test-typescript lock clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# A stamp per lock file: reinstall only when the lock or the project metadata changed.
$(VENV)/.runtime-installed: requirements/runtime.lock pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements/runtime.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.dev-installed: requirements/dev.lock pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements/dev.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@ $(VENV)/.runtime-installed

# The Python SDK goes into the same venv, editable and without resolving anything new:
# its dependencies (httpx, cryptography, rfc8785) are pinned by the runtime lock.
# tests/examples and the SDK's own tests import it.
$(VENV)/.sdk-installed: sdk/python/pyproject.toml | $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet --no-deps -e sdk/python
	touch $@

# The TypeScript SDK's dev dependencies (typescript, @types/node), exactly as locked.
# npm ci writes node_modules/.package-lock.json, which serves as the stamp.
TS_SDK := sdk/typescript
$(TS_SDK)/node_modules/.package-lock.json: $(TS_SDK)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "the TypeScript SDK needs Node.js >= 20 and npm" >&2; exit 1; }
	cd $(TS_SDK) && npm ci --no-audit --no-fund

serve: $(VENV)/.runtime-installed
	$(BIN)/execauth db upgrade
	$(BIN)/execauth serve --host $(HOST) --port $(PORT)

PY_SOURCES := src tests examples sdk/python/src sdk/python/tests

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check $(PY_SOURCES)
	$(BIN)/ruff format --check $(PY_SOURCES)

# The SDK is its own distribution with its own mypy settings, so it is checked from there.
typecheck: $(VENV)/.dev-installed $(VENV)/.sdk-installed
	$(BIN)/mypy
	$(BIN)/mypy examples/agent
	cd sdk/python && ../../$(BIN)/mypy src tests

# Browser tests (tests/web/test_browser.py) drive Debian's chromium; they skip, visibly,
# when it cannot be installed. The stamp is only written once chromium is there.
$(VENV)/.chromium: | $(BIN)/python
	@command -v chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "chromium could not be installed: the browser tests will be skipped"
	@if command -v chromium >/dev/null 2>&1; then touch $@; fi

# The deployment topology test (tests/deploy/test_topology.py) runs Debian's HAProxy in
# front of three instances; it skips, visibly, when HAProxy cannot be installed.
$(VENV)/.haproxy: | $(BIN)/python
	@command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } || \
		echo "haproxy could not be installed: the deployment topology test will be skipped"
	@if command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy; then touch $@; fi

# The alert rules (deploy/prometheus) are checked and unit-tested by promtool, from Debian's
# prometheus package (tests/deploy/test_alert_rules.py); skipped, visibly, without it.
$(VENV)/.promtool: | $(BIN)/python
	@command -v promtool >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } || \
		echo "promtool could not be installed: the alert rule tests will be skipped"
	@if command -v promtool >/dev/null 2>&1; then touch $@; fi

pytest: $(VENV)/.dev-installed $(VENV)/.sdk-installed $(VENV)/.chromium $(VENV)/.haproxy $(VENV)/.promtool
	$(BIN)/pytest

# Both SDKs against a live server: the Python tests start `execauth serve` themselves;
# scripts/test-live.sh starts one, provisions a tenant and runs `npm test` (whose pretest
# builds dist/ with tsc) with EXECAUTH_TEST_URL set.
sdk-test-python: $(VENV)/.dev-installed $(VENV)/.sdk-installed
	cd sdk/python && ../../$(BIN)/pytest

sdk-test-typescript: $(VENV)/.runtime-installed $(TS_SDK)/node_modules/.package-lock.json
	$(TS_SDK)/scripts/test-live.sh

sdk-test: sdk-test-python sdk-test-typescript

test: lint typecheck pytest sdk-test

# Schemathesis against the whole openapi.yaml (tests/contract/test_schemathesis.py) with a
# larger budget than the bounded run in `make test`: FUZZ_EXAMPLES generated examples per
# operation, seed FUZZ_SEED. Prints the requests the app answered and its 5xx;
# any contract violation fails the run (docs/decisions.md, "A fuzzer in make test").
FUZZ_EXAMPLES ?= 100
FUZZ_SEED     ?= 20261124
fuzz: $(VENV)/.dev-installed
	@EXECAUTH_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) EXECAUTH_FUZZ_SEED=$(FUZZ_SEED) \
		EXECAUTH_FUZZ_REPORT=$(VENV)/fuzz-report.json \
		$(BIN)/pytest tests/contract/test_schemathesis.py -q; status=$$?; \
		cat $(VENV)/fuzz-report.json 2>/dev/null; exit $$status

# Load and micro benchmarks (bench/run.py; docs/performance.md). Not part of `make test`.
# `make bench` runs execauth, the plain-Starlette baseline and Cerbos under wrk for 20 s
# each; ARGS passes options: --postgres, --profile, --duration N, --rounds N (the run N
# times, with the median of its ratios), --micro (micro only).
$(VENV)/.bench-installed: | $(VENV)/.runtime-installed
	$(BIN)/python -m pip install --quiet pytest pytest-benchmark py-spy
	touch $@

bench: $(VENV)/.runtime-installed $(VENV)/.bench-installed
	@command -v wrk >/dev/null 2>&1 && command -v hey >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk hey; }
	@test -x bench/.cerbos/node_modules/@cerbos/cerbos-linux-x64/cerbos-linux-x64 || \
		npm install --silent --no-save --no-audit --no-fund --prefix bench/.cerbos @cerbos/cerbos-linux-x64
	$(BIN)/python bench/run.py $(ARGS)

# Regenerate the lock files after changing dependencies in pyproject.toml.
lock: $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 -o requirements/runtime.lock
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements/dev.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(TS_SDK)/node_modules $(TS_SDK)/dist
