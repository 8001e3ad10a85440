#!/usr/bin/env bash
# Soak of the transcript store under mixed traffic, in one command:
#
#     bash benches/soak.sh                  # 180 s, 8 clients
#     SOAK=60 CLIENTS=16 bash benches/soak.sh
#
# Starts, on 127.0.0.1, the canned upstream of benches/load.sh and toolgate
# (release; TOOLGATE_BIN reuses a built binary) recording every exchange to
# SQLite (`record = "all"`), then drives CLIENTS connections for SOAK seconds
# with wrk, cycling through five kinds of request:
#
#   - a plain chat completion (passthrough);
#   - a natural-mode stream whose reply is turned into a tool call;
#   - a demo-model answer that runs a gateway tool (builtin:calculator);
#   - a Responses request (stored, for previous_response_id);
#   - a Messages request.
#
# Every one is a first turn, so each starts its own chat. Once the load ends
# and the writer's queue is empty, it counts what the database holds against
# what toolgate served: chats against requests, the chats' message counters
# against the message rows, stored responses against Responses requests, and
# toolgate's RSS every 10 s. The output is Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."

SOAK=${SOAK:-180}
CLIENTS=${CLIENTS:-8}
export TOOLGATE_LOG=${TOOLGATE_LOG:-warn}

log() { echo "soak.sh: $*" >&2; }

if ! command -v wrk >/dev/null 2>&1; then
    log "installing wrk"
    apt-get update >&2 && apt-get install -y wrk >&2
fi

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

log "building the helpers (cargo bench --no-run)"
cargo bench --no-run --bench mock_upstream --bench load_client --message-format=json >"$TMP/build.json"
exe() { sed -n "s/.*\"executable\":\"\([^\"]*\/deps\/$1-[^\"]*\)\".*/\1/p" "$TMP/build.json" | tail -1; }
MOCK=$(exe mock_upstream)
CLIENT=$(exe load_client)
if [ -z "${TOOLGATE_BIN:-}" ]; then
    log "building toolgate (cargo build --release)"
    cargo build --release --bin toolgate >&2
    TOOLGATE_BIN=${CARGO_TARGET_DIR:-target}/release/toolgate
fi

"$MOCK" serve --listen 127.0.0.1:0 --threads 1 >"$TMP/mock.out" 2>"$TMP/mock.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$TMP/mock.out" && break; sleep 0.05; done
MOCK_PORT=$(awk '/listening/ {print $2}' "$TMP/mock.out")
[ -n "$MOCK_PORT" ] || { log "the mock did not start"; cat "$TMP/mock.err" >&2; exit 1; }

PORT=$("$CLIENT" freeport)
DB="$TMP/store.db"
cat >"$TMP/toolgate.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
shutdown_grace_secs = 1

[store]
url = "sqlite://$DB"
record = "all"

[[providers]]
name = "pt"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
models = ["bench-json"]

[[providers]]
name = "nat"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
models = ["bench-natural"]

[providers.tools]
mode = "natural"
syntax = "tag"

[[providers]]
name = "agent"
models = ["demo"]

[providers.demo]
chunk_delay_ms = 0

[providers.tools]
mode = "natural"
gateway_tools = ["builtin:calculator"]
EOF
"$TOOLGATE_BIN" --config "$TMP/toolgate.toml" 2>"$TMP/toolgate.log" &
GW_PID=$!
PIDS+=("$GW_PID")
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null || { log "toolgate did not start"; cat "$TMP/toolgate.log" >&2; exit 1; }

MSG='"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the weather in Paris today?"}]'
TOOLS='"tools":[{"type":"function","function":{"name":"GetWeather","description":"Current weather for a place.","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]'
echo "{\"model\":\"bench-json\",$MSG}" >"$TMP/chat.json"
echo "{\"model\":\"bench-natural\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/natural.json"
echo '{"model":"demo","stream":true,"messages":[{"role":"user","content":"Ask the calculator: what is `6 * 7`?"}]}' >"$TMP/agent.json"
echo '{"model":"bench-json","input":"What is the weather in Paris today?"}' >"$TMP/responses.json"
echo '{"model":"bench-json","max_tokens":256,"messages":[{"role":"user","content":"What is the weather in Paris today?"}]}' >"$TMP/messages.json"
MIX="/v1/chat/completions|$TMP/chat.json;/v1/chat/completions|$TMP/natural.json;/v1/chat/completions|$TMP/agent.json;/v1/responses|$TMP/responses.json;/v1/messages|$TMP/messages.json"

# Sanity: every kind is answered.
for kind in chat natural agent; do
    curl -fs "http://127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' --data-binary @"$TMP/$kind.json" >/dev/null ||
        { log "$kind was not answered"; exit 1; }
done
curl -fs "http://127.0.0.1:$PORT/v1/responses" -H 'content-type: application/json' --data-binary @"$TMP/responses.json" >/dev/null || { log "responses was not answered"; exit 1; }
curl -fs "http://127.0.0.1:$PORT/v1/messages" -H 'content-type: application/json' --data-binary @"$TMP/messages.json" >/dev/null || { log "messages was not answered"; exit 1; }

status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
metric() { curl -fs "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" 'index($0, m) == 1 && $0 !~ /^#/ {s += $NF} END {printf "%.0f", s}'; }

log "soaking for ${SOAK}s with $CLIENTS clients"
RSS=()
(
    for _ in $(seq $((SOAK / 10))); do
        sleep 10
        echo "$(status_kb "$GW_PID" VmRSS)"
    done
) >"$TMP/rss" &
SAMPLER=$!
THREADS=$(( CLIENTS < 2 ? 1 : 2 ))
OUT=$(MIX="$MIX" wrk -t"$THREADS" -c"$CLIENTS" -d"${SOAK}s" --timeout 10s -s benches/mixed.lua "http://127.0.0.1:$PORT" 2>&1)
wait "$SAMPLER" 2>/dev/null || true
mapfile -t RSS <"$TMP/rss"
LINE=$(grep '^RESULT' <<<"$OUT") || { log "wrk failed: $OUT"; exit 1; }
field() { sed -n "s/.*[ ^]$1=\([0-9.]*\).*/\1/p" <<<" $2"; }

log "waiting for the writer's queue to empty"
for _ in $(seq 300); do
    [ "$(metric toolgate_store_queue_depth)" = 0 ] && break
    sleep 0.1
done
sleep 2

SERVED=$(metric 'toolgate_requests_total{')
DROPPED=$(metric toolgate_store_dropped_total)
BATCHES=$(metric toolgate_store_write_seconds_count)
# toolgate holds the SQLite file exclusively: it is read once toolgate has
# stopped (SIGTERM: it drains and closes the database).
kill -TERM "$GW_PID"
wait "$GW_PID" 2>/dev/null || true
read -r CHATS COUNTED ROWS RESPONSES MARKED < <(python3 - "$DB" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
one = lambda q: db.execute(q).fetchone()[0] or 0
print(one("SELECT count(*) FROM chats"), one("SELECT sum(messages) FROM chats"),
      one("SELECT count(*) FROM messages"), one("SELECT count(*) FROM responses"),
      one("SELECT count(*) FROM messages WHERE kind = 'error' AND message_json LIKE '%not_recorded%'"))
EOF
)
REQUESTS=$(field requests "$LINE")
RPS=$(awk -v r="$REQUESTS" -v d="$(field duration_us "$LINE")" 'BEGIN {printf "%.0f", r / (d / 1e6)}')
# Five sanity requests were served before the soak.
cat <<EOF
### Store soak ($(date -u +%Y-%m-%d), toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?'))

$(nproc) cores; $CLIENTS wrk connections for ${SOAK} s, cycling chat, natural-mode stream, gateway tool (demo model),
Responses and Messages requests, each a first turn; SQLite, \`record = "all"\`.

| measure | value |
|---|---|
| requests answered (wrk) · req/s · p50 · p99 | $REQUESTS · $RPS · $(field p50_us "$LINE") µs · $(field p99_us "$LINE") µs |
| wrk errors · non-2xx | $(field errors "$LINE") · $(field non2xx "$LINE") |
| requests toolgate served (toolgate_requests_total, incl. 5 sanity and any cut at the end) | $SERVED |
| chats stored | $CHATS |
| message rows stored · the chats' counters add up to | $ROWS · $COUNTED |
| stored responses (one Responses request in five) | $RESPONSES |
| rows dropped (toolgate_store_dropped_total) · chats marked not_recorded | $DROPPED · $MARKED |
| batches written | $BATCHES |
| RSS every 10 s (MB) | $(for k in "${RSS[@]}"; do awk -v k="$k" 'BEGIN {printf "%.0f ", k / 1024}'; done) |
EOF
if [ "$CHATS" = "$SERVED" ] && [ "$ROWS" = "$COUNTED" ] && [ "$DROPPED" = 0 ]; then
    echo
    echo "Every request served has its chat, and every chat all its rows."
else
    echo
    echo "**Rows were lost**: $SERVED requests, $CHATS chats, $ROWS of $COUNTED rows, $DROPPED dropped."
fi
