#!/usr/bin/env bash
# The Berkeley Function Calling Leaderboard (BFCL, the `bfcl-eval` package's
# data and AST checker) on a real model through toolgate, one arm per way of
# calling tools. Reuses tests/real_upstream.sh's cached llama.cpp build and
# models (tests/llama.sh), starts one llama-server (PARALLEL slots) and one
# toolgate whose providers are the arms, and runs benches/bfcl.py.
#
#   bash benches/bfcl.sh                              # Qwen2.5-Coder-0.5B, every arm, 25 cases a category
#   MODELS="smollm2 qwen" BFCL_N=10 bash benches/bfcl.sh
#   ARMS=tag,tag-gbnf CATEGORIES=parallel bash benches/bfcl.sh
#   TOOLGATE_BIN=/path/to/toolgate bash benches/bfcl.sh   # another build (a baseline)
#   GRAMMAR_CATEGORIES=all BFCL_N=0 bash benches/bfcl.sh  # only: does llama-server read every grammar?
#   CHECK_GRAMMARS=0 ARMS=tag-gbnf bash benches/bfcl.sh   # constrained, without that check first
#   ARMS=tag-gbnf-ask ASK_FLAGGED=target/bfcl/qwen/cases.jsonl bash benches/bfcl.sh
#       # -ask arms only where that run's answer without -ask had a call the
#       # grounding check flags (toolgate asks only then); the rest copied
#   RESUME=1 bash benches/bfcl.sh   # keep $OUT's answers so far, ask only the rest
#
# Arms: native (llama.cpp's own tool calling, passthrough), any natural
# syntax by its name (tag, tool_call, bracket, python...: natural mode in
# that syntax), with `-gbnf` (constrain = "gbnf") and then `-ask`
# (on_ungrounded = "ask"), rescue (passthrough with rescue_text_calls), and
# harness (BFCL's own prompt mode: its system prompt sent straight to
# llama-server, not through toolgate, the answer's text decoded by its
# `default_decode_ast_prompting`). With a constrained arm, every case of
# the categories (all single-turn ones with GRAMMAR_CATEGORIES=all) first has its grammar sent
# to llama-server, which must read each (the run stops otherwise). Results:
# per model on stdout, passes per arm and category and how the failures
# failed (benches/bfcl.py's MODES); every case's request, answer, verdict and
# mode in $OUT/<model>/cases.jsonl (OUT default target/bfcl), which
# `benches/bfcl.py --report FILE` judges again and tabulates. The first run
# builds llama.cpp (about 10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

BFCL_EVAL=2026.3.23
MODELS=${MODELS:-qwen}
ARMS=${ARMS:-harness,native,tag,tool_call,bracket,rescue,tag-gbnf,tool_call-gbnf,bracket-gbnf}
CATEGORIES=${CATEGORIES:-simple_python,multiple,parallel,parallel_multiple,irrelevance}
BFCL_N=${BFCL_N:-25}
PARALLEL=${PARALLEL:-2}
OUT=${OUT:-target/bfcl}

. tests/llama.sh

echo "== bfcl-eval $BFCL_EVAL ($cache/bfcl-$BFCL_EVAL)"
venv=$cache/bfcl-$BFCL_EVAL
if ! "$venv/bin/python" -c 'import bfcl_eval, tenacity, filelock, tree_sitter' 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # The package without the model SDKs it lists: the data, the type
  # conversion and the AST checker need only these.
  "$venv/bin/python" -m pip --disable-pip-version-check --quiet install --no-deps "bfcl-eval==$BFCL_EVAL"
  "$venv/bin/python" -m pip --disable-pip-version-check --quiet install --no-warn-conflicts \
    tenacity==9.1.2 filelock==3.20.0 tree_sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4
fi

toolgate_bin

for name in $MODELS; do
  llama_start "$name" "$PARALLEL"

  gw_port=$(free_port)
  config=$(mktemp -t toolgate-bfcl.XXXXXX.toml)
  {
    printf '[server]\nlisten = "127.0.0.1:%s"\nfirst_byte_timeout_secs = 900\nstream_idle_timeout_secs = 900\nmax_body_bytes = 33554432\n\n' "$gw_port"
    for arm in ${ARMS//,/ }; do
      [ "$arm" = harness ] && continue # straight to llama-server
      printf '[[providers]]\nname = "%s"\nbase_url = "http://127.0.0.1:%s/v1"\n\n[providers.tools]\n' "$arm" "$port"
      syntax=${arm%-ask}
      case $syntax in
        native) printf 'mode = "passthrough"\n' ;;
        rescue) printf 'mode = "passthrough"\nrescue_text_calls = true\n' ;;
        *-gbnf) printf 'mode = "natural"\nsyntax = "%s"\nconstrain = "gbnf"\n' "${syntax%-gbnf}" ;;
        *) printf 'mode = "natural"\nsyntax = "%s"\n' "$syntax" ;;
      esac
      [ "$syntax" = "$arm" ] || printf 'on_ungrounded = "ask"\n' 
      printf '\n'
    done
  } >"$config"
  gw_log=$(mktemp -t toolgate-bfcl.XXXXXX.log)
  TOOLGATE_LOG=warn "$bin" --config "$config" 2>"$gw_log" &
  pids+=($!)
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$gw_port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done

  echo "== BFCL ($name): $CATEGORIES, $BFCL_N cases each (every k-th), arms $ARMS"
  start=$SECONDS
  grammars=()
  case ,${ARMS//-ask,/,},${CHECK_GRAMMARS:-1} in *-gbnf,*1) grammars=(--check-grammars --toolgate "$bin"
    --grammar-categories "${GRAMMAR_CATEGORIES:-$CATEGORIES}") ;; esac
  "$venv/bin/python" benches/bfcl.py --base "http://127.0.0.1:$gw_port" --llama "http://127.0.0.1:$port" \
    --model "$name" "${grammars[@]}" \
    --arms "$ARMS" --categories "$CATEGORIES" --n "$BFCL_N" --parallel "$PARALLEL" \
    ${ASK_FLAGGED:+--ask-flagged "$ASK_FLAGGED"} ${RESUME:+--resume} \
    --out "$OUT/$name"
  echo "   $((SECONDS - start)) s; cases: $OUT/$name/cases.jsonl"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  rm -f "$config"
done
