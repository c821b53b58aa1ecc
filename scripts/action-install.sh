#!/usr/bin/env bash
# action.yml, step "install": the execauth CLI from the action's own checkout (the commit
# the workflow pinned), its dependencies at the versions of requirements/runtime.lock, in
# a virtual environment of its own. Prints `bin=<path of execauth>` to $GITHUB_OUTPUT.
set -euo pipefail
source_dir="${GITHUB_ACTION_PATH:?}"
venv="${RUNNER_TEMP:?}/execauth-gate-venv"
"${EXECAUTH_PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$source_dir/requirements/runtime.lock"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$source_dir"
echo "bin=$venv/bin/execauth" >> "${GITHUB_OUTPUT:?}"
