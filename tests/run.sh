#!/usr/bin/env bash
# The whole test suite, from a fresh clone: checks formatting and lints, then
# runs every unit, property, golden and integration test. Everything it needs
# comes from crates.io through cargo, and for the real-client tests from PyPI
# (pip, in tests/clients/.venv) and npm (npm ci); tests talk only to loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }
# The suite builds each crate once: incremental caches would only add a GB of
# disk (CI machines can be short of it) and some time.
export CARGO_INCREMENTAL=0
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

# The real-client tests (tests/it/clients.rs) drive the official `openai` SDKs, and
# tests/it/mcp_servers.rs the real MCP servers mcp-server-time and server-everything:
# Python's from PyPI in a venv, Node's from npm. Installed once, then only
# checked (a few milliseconds) until a pin changes.
clients=tests/clients
echo "== [${SECONDS} s] client SDKs ($clients)"
command -v python3 >/dev/null || { echo "python3 is required for the client tests" >&2; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "node and npm are required for the client tests" >&2; exit 1; }
venv=$clients/.venv
want="$(python3 --version) $(sha256sum "$clients/python/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ] || ! "$venv/bin/python" -c '' 2>/dev/null; then
  start=$SECONDS
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$clients/python/requirements.txt"
  echo "$want" >"$venv/.installed"
  echo "   python venv installed in $((SECONDS - start)) s"
fi
echo "   openai (python) $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("openai"))')"
modules=$clients/node/node_modules
want="$(node --version) $(cat "$clients/node/package.json" "$clients/node/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$modules/.installed" 2>/dev/null)" != "$want" ]; then
  start=$SECONDS
  (cd "$clients/node" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" >"$modules/.installed"
  echo "   node_modules installed in $((SECONDS - start)) s"
fi
echo "   openai (node) $(node -p 'require("./'"$modules"'/openai/package.json").version')"
# Not TOOLGATE_*: the binary reads that prefix as config overrides.
export CLIENT_TESTS_PYTHON="$PWD/$venv/bin/python"
export CLIENT_TESTS_NODE_DIR="$PWD/$clients/node"

# tests/it/structural_tags.rs checks the structural tags of constrain =
# "structural_tag" with xgrammar, the engine vLLM and SGLang use: from PyPI,
# pinned, without torch (tests/xgrammar/requirements.txt says why).
xgr=tests/xgrammar
echo "== [${SECONDS} s] xgrammar ($xgr)"
want="$(python3 --version) $(sha256sum "$xgr/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$xgr/.venv/.installed" 2>/dev/null)" != "$want" ] || ! "$xgr/.venv/bin/python" -c '' 2>/dev/null; then
  start=$SECONDS
  rm -rf "$xgr/.venv"
  python3 -m venv "$xgr/.venv"
  "$xgr/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
    -r "$xgr/requirements.txt"
  echo "$want" >"$xgr/.venv/.installed"
  echo "   xgrammar venv installed in $((SECONDS - start)) s"
fi
echo "   xgrammar $("$xgr/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("xgrammar"))')"
export XGRAMMAR_TESTS_PYTHON="$PWD/$xgr/.venv/bin/python"

# The transcript tests run a throwaway PostgreSQL cluster (tests/it/common/postgres.rs)
# and drive the transcript page in headless Chromium, and the limit tests a
# throwaway Redis (tests/it/common/redis.rs): all from the distribution's
# packages, installed once when missing.
echo "== [${SECONDS} s] system packages (PostgreSQL server, Redis, Chromium, sqlite3; kubectl)"
# kubectl renders deploy/'s Kubernetes overlays; distributions ship none
# recent enough for kustomize components, so it is a prerequisite.
command -v kubectl >/dev/null ||
  { echo "kubectl 1.21 or later is required (deploy/check.sh renders the overlays with kubectl kustomize)" >&2; exit 1; }
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null || need+=(redis-server)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
command -v sqlite3 >/dev/null || need+=(sqlite3)   # docs/transcripts.md's backup example
if [ ${#need[@]} -gt 0 ]; then
  start=$SECONDS
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  echo "   installed ${need[*]} in $((SECONDS - start)) s"
fi
echo "   $(ls -d /usr/lib/postgresql/*/bin | tail -1), $(redis-server --version | cut -d' ' -f1-3), $(chromium --version 2>/dev/null || chromium-browser --version)"

echo "== [${SECONDS} s] cargo fmt --check"
cargo fmt --all -- --check
echo "== [${SECONDS} s] cargo clippy"
cargo clippy --locked --all-targets -- -D warnings
echo "== [${SECONDS} s] deploy/ checks (YAML/JSON, probes and ports, Dockerfile build)"
# The Dockerfile's build proves the image builds from exactly the files it
# copies. Which files a build needs does not depend on its profile, so it
# runs in the dev profile here: the shipped profile (the optimiser over every
# dependency, fat LTO, one codegen unit) would add minutes on 2 cores, and
# dev shares its dependencies with the test build below.
TOOLGATE_DOCKER_BUILD_PROFILE=dev TOOLGATE_PYTHON="$CLIENT_TESTS_PYTHON" bash deploy/check.sh
echo "== [${SECONDS} s] cargo test"
cargo test --locked --all-targets
echo "== [${SECONDS} s] fuzzing (fuzz/run.sh: every target for ${FUZZ_SECONDS:-15} s)"
bash fuzz/run.sh
echo "== [${SECONDS} s] disk used by builds: $(du -sh target fuzz/target 2>/dev/null | awk '{printf "%s %s  ", $2, $1}')"
