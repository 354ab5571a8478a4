#!/usr/bin/env bash
# Smoke test of the OpenAI-compatible API with the official `openai` Python package, end to
# end: the tiny local model (llama.cpp) ← `iris serve` ← the `openai` client. Run after
# scripts/llm-install.sh (CI does); the iris binary is $IRIS_BIN, else target/debug/iris.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${IRIS_LLAMA_SERVER:?run scripts/llm-install.sh first (it prints the variables to export)}"
: "${IRIS_LLAMA_MODEL:?run scripts/llm-install.sh first}"
iris=${IRIS_BIN:-target/debug/iris}
[ -x "$iris" ] || { echo "api-smoke: no iris binary at $iris (cargo build -p gateway)" >&2; exit 1; }

venv=.venv-smoke
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check openai==3.57.0
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() {
  for _ in $(seq 1 240); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "api-smoke: $1 never answered" >&2; cat "$work"/*.log >&2 || true; return 1
}

llama_port=$(free_port)
"$IRIS_LLAMA_SERVER" -m "$IRIS_LLAMA_MODEL" --alias smollm2 --host 127.0.0.1 --port "$llama_port" \
  -c 2048 -np 1 -n 64 -t 2 --no-ui >"$work/llama.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$llama_port/health"

iris_port=$(free_port)
cat >"$work/iris.toml" <<TOML
[llm]
base_url = "http://127.0.0.1:$llama_port/v1"
model = "smollm2"
context_length = 2048
max_output_tokens = 64

[compression]
min_threshold_tokens = 1000

[api]
enabled = true
key_env = "IRIS_API_KEY"
TOML
IRIS_HOME="$work" IRIS_API_KEY=smoke-key-0123456789 NO_COLOR=1 \
  "$iris" serve --bind "127.0.0.1:$iris_port" >"$work/iris.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$iris_port/healthz"

"$venv/bin/python" scripts/api_smoke.py "http://127.0.0.1:$iris_port/v1" smoke-key-0123456789
