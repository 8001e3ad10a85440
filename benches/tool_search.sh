#!/usr/bin/env bash
# Tool search (`tool_search`) on a 200-tool catalog through toolgate, on a
# real model: the catalog is mcp-server-time's and server-everything's tools
# plus generated HTTP tools, offered to Qwen2.5-Coder-0.5B (llama-server,
# from tests/real_upstream.sh's cache, tests/llama.sh) by one provider per
# arm: natural mode (tag) and passthrough with rescue_text_calls, each with
# search off and on. Prints the first request's prompt tokens and the share
# of tasks where the model called the right tool (benches/tool_search.py).
#
#   bash benches/tool_search.sh                 # 20 tasks per arm
#   PROMPTS=40 ARMS=natural,natural+search bash benches/tool_search.sh
#
# Needs the test clients (tests/run.sh installs them: tests/clients/.venv
# and tests/clients/node). The first run builds llama.cpp (about 10 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

PROMPTS=${PROMPTS:-20}
ARMS=${ARMS:-natural,natural+search,rescue,rescue+search}
OUT=${OUT:-target/tool_search}
venv=${CLIENT_TESTS_PYTHON:-$PWD/tests/clients/.venv/bin/python}
node_dir=${CLIENT_TESTS_NODE_DIR:-$PWD/tests/clients/node}
time_bin=$(dirname "$venv")/mcp-server-time
everything=$node_dir/node_modules/.bin/mcp-server-everything
for f in "$time_bin" "$everything"; do
  [ -x "$f" ] || { echo "missing $f: run tests/run.sh once (it installs the test clients)" >&2; exit 1; }
done

. tests/llama.sh

toolgate_bin

# Without search the 200 contracts take most of 16K tokens.
LLAMA_CTX=32768 llama_start qwen
echo "== tool search: $PROMPTS tasks per arm, arms $ARMS"
start=$SECONDS
python3 benches/tool_search.py --toolgate "$bin" --llama "http://127.0.0.1:$port" \
  --time "[\"$time_bin\", \"--local-timezone=UTC\"]" --everything "[\"$everything\", \"stdio\"]" \
  --arms "$ARMS" --prompts "$PROMPTS" --out "$OUT"
echo "   $((SECONDS - start)) s; cases: $OUT/cases.jsonl"
