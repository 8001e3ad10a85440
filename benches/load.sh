#!/usr/bin/env bash
# End-to-end load benchmark of toolgate against reference hops, in one command:
#
#     bash benches/load.sh                                  # toolgate, nginx
#     TOOLIFY_BIN=/path/to/toolify bash benches/load.sh     # and the peer gateway
#
# It builds toolgate (release) and two helpers (benches/mock_upstream.rs, a
# canned upstream, and benches/load_client.rs, a small measuring client) and
# starts, on 127.0.0.1:
#
#   - the mock upstream (one thread);
#   - toolgate with a plain config (passthrough, natural and to_natural providers);
#   - toolgate "two targets": the plain config with its passthrough provider
#     spread over two targets (both the mock), for what choosing one costs;
#   - toolgate "traced": the plain config with [telemetry] exporting a span
#     for every request and upstream attempt (to the mock, which accepts the
#     OTLP posts like any other), for what traces cost;
#   - toolgate "+store+tools": the same providers plus a [store] recording every
#     exchange to SQLite and a provider offering gateway tools (HTTP, built-in);
#   - toolgate "keyed": the plain config behind a key (a tenant without
#     limits), and the same tenant with limits on every axis (requests and
#     tokens per minute, concurrency, a budget), counted in memory and, with
#     REDIS=1 (the default; Debian's redis-server, installed if missing), in
#     a Redis on loopback: what enforcing limits costs;
#   - nginx (Debian's package, installed if missing; NGINX=0 skips it) as a plain
#     keep-alive proxy hop, one worker, access log and buffering off;
#   - when TOOLIFY_BIN names a toolify-rs binary (built from its public
#     repository, outside this tree): that peer gateway, passthrough for the
#     plain rows and its prompt-injected function calling for the natural row.
#
# Every row is measured straight against the mock ("direct") and through each
# hop, interleaved, REPEAT times; each cell is the median. wrk drives one
# connection (c=1) or 32 (c=32) with `wrk -t1`. Rows:
#
#   - non-stream passthrough: a canned JSON completion;
#   - stream passthrough: role + $CHUNKS content chunks + finish + [DONE];
#   - natural-mode stream: prose then a call in 4-byte tokens, turned into a
#     native tool_calls stream (toolgate: a <GetWeather> block; toolify-rs: the
#     same prose and arguments in its own trigger + <function_calls> format;
#     nginx: the same upstream stream passed through, the reference hop);
#   - to_natural stream: a native call, arguments in 4-byte fragments, written
#     out as text;
#   - front doors: the passthrough stream with a tool declared, asked through
#     the chat door of a natural-mode provider (the reference: a rewrite of
#     every chunk) and through the Responses and Messages doors of the
#     passthrough provider (translated to Chat Completions and back).
#
# It also reads each process's CPU time (utime + stime, /proc/PID/stat) around
# its runs, toolgate's RSS after the load and with $STREAMS open streams, and
# the store's own metrics. The output is Markdown for README's Performance
# section. Knobs: DURATION (s per wrk run, default 3), REPEAT (default 3),
# CHUNKS (default 32), STREAMS (default 1000), NGINX (default 1), REDIS (default 1),
# ONLY (=limits: only the limits rows; =scale: only the scale rows),
# MOCK_BIN and CLIENT_BIN (the two helpers, already built: no cargo bench),
# TOOLGATE_LOG (default info; the log goes to a temp file), TOOLIFY_BIN,
# TOOLGATE_BIN (a release binary to measure instead of building one),
# BASE_BIN (an earlier build, measured as one more hop with the plain config:
# what a change costs, in the same run).
#
# The scale rows: for each N in SCALE (default "2000 10000"; SCALE=0 skips
# them), N whole slow streams at once (SCALE_TICKS ticks SCALE_MS ms apart,
# default 16 and 500: about 8 s each), passthrough and natural mode, through
# a fresh toolgate, nginx and (with TOOLIFY_BIN) toolify-rs, all on a second
# mock that paces whole streams. An N beyond what the open-file limit allows
# (two descriptors a stream in each proxy) is lowered to fit, and the table
# says so. Memory per open stream is (peak RSS while the streams run − RSS
# before) / N, RSS read every 50 ms from /proc (nginx: its one worker).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
CHUNKS=${CHUNKS:-32}
STREAMS=${STREAMS:-1000}
SCALE=${SCALE:-2000 10000}
[ "$SCALE" = 0 ] && SCALE=
SCALE_TICKS=${SCALE_TICKS:-16}
SCALE_MS=${SCALE_MS:-500}
NGINX=${NGINX:-1}
REDIS=${REDIS:-1}
TOOLIFY_BIN=${TOOLIFY_BIN:-}
export TOOLGATE_LOG=${TOOLGATE_LOG:-info}

log() { echo "load.sh: $*" >&2; }

if ! command -v wrk >/dev/null 2>&1; then
    log "installing wrk"
    apt-get update >&2 && apt-get install -y wrk >&2
fi
if [ "$NGINX" = 1 ] && ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    log "installing nginx (the reference proxy hop)"
    apt-get update >&2 && apt-get install -y nginx-light >&2
fi
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
if [ "$REDIS" = 1 ] && ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis-server (the shared limiter's counters)"
    apt-get update >&2 && apt-get install -y redis-server >&2
fi

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# --- build -------------------------------------------------------------------
# The helpers first: building a bench target turns on dev-dependency features
# (tokio's test-util), so toolgate itself is built last, exactly as
# `cargo build --release` builds it, and copied aside.
if [ -n "${MOCK_BIN:-}" ] && [ -n "${CLIENT_BIN:-}" ]; then
    MOCK=$MOCK_BIN
    CLIENT=$CLIENT_BIN
else
    log "building the helpers (cargo bench --no-run)"
    cargo bench --no-run --bench mock_upstream --bench load_client --message-format=json \
        >"$TMP/build.json"
    exe() { sed -n "s/.*\"executable\":\"\([^\"]*\/deps\/$1-[^\"]*\)\".*/\1/p" "$TMP/build.json" | tail -1; }
    MOCK=$(exe mock_upstream)
    CLIENT=$(exe load_client)
fi
if [ -n "${TOOLGATE_BIN:-}" ]; then
    log "toolgate: $TOOLGATE_BIN"
    cp "$TOOLGATE_BIN" "$TMP/toolgate"
else
    log "building toolgate (cargo build --release)"
    cargo build --release --bin toolgate >&2
    cp "${CARGO_TARGET_DIR:-target}/release/toolgate" "$TMP/toolgate"
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((STREAMS * 2 + 100)) ]; then
    log "warning: open-file limit $(ulimit -n) is low for $STREAMS streams"
fi

# --- the mock ----------------------------------------------------------------
"$MOCK" serve --listen 127.0.0.1:0 --threads 1 --chunks "$CHUNKS" --slow-ms 1000 \
    >"$TMP/mock.out" 2>"$TMP/mock.err" &
MOCK_PID=$!
PIDS+=("$MOCK_PID")
for _ in $(seq 100); do grep -q listening "$TMP/mock.out" && break; sleep 0.05; done
MOCK_PORT=$(awk '/listening/ {print $2}' "$TMP/mock.out")
[ -n "$MOCK_PORT" ] || { log "the mock did not start"; cat "$TMP/mock.err" >&2; exit 1; }
describe() { "$MOCK" describe --chunks "$CHUNKS" | awk -v k="$1" '$1 == k {print $2}'; }
SSE_EVENTS=$(describe sse_events)
NATURAL_EVENTS=$(describe natural_events)
TOOLS_EVENTS=$(describe tools_events)
TOOLIFY_EVENTS=$(describe toolify_events)

# --- toolgate, twice -----------------------------------------------------------
providers() {
    # PT_TWO=1: the passthrough provider has two targets (the same mock), to
    # show what choosing a target costs.
    local pt_target="base_url = \"http://127.0.0.1:$MOCK_PORT/v1\""
    [ "${PT_TWO:-0}" = 1 ] && pt_target="targets = [{ name = \"a\", base_url = \"http://127.0.0.1:$MOCK_PORT/v1\" }, { name = \"b\", base_url = \"http://127.0.0.1:$MOCK_PORT/v1\" }]"
    cat <<EOF
[[providers]]
name = "pt"
$pt_target
models = ["bench-json", "bench-sse", "bench-slow"]

[[providers]]
name = "nat"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
models = ["bench-natural", "bench-slow-natural"]

[providers.tools]
mode = "natural"
syntax = "tag"

[[providers]]
name = "tn"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
models = ["bench-tools"]

[providers.tools]
mode = "to_natural"
syntax = "tag"
EOF
}
# start_toolgate NAME EXTRA-CONFIG -> "port pid"
start_toolgate() {
    local port
    port=$("$CLIENT" freeport)
    {
        printf '[server]\nlisten = "127.0.0.1:%s"\nshutdown_grace_secs = 1\n\n' "$port"
        providers
        printf '%s\n' "$2"
    } >"$TMP/$1.toml"
    local bin=${BIN:-$TMP/toolgate}
    "$bin" check --config "$TMP/$1.toml" >/dev/null 2>"$TMP/$1.check" ||
        { cat "$TMP/$1.check" >&2; exit 1; }
    "$bin" --config "$TMP/$1.toml" 2>"$TMP/$1.log" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do
        curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        sleep 0.05
    done
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null ||
        { log "toolgate ($1) did not start"; cat "$TMP/$1.log" >&2; exit 1; }
    echo "$port $pid"
}
# (start_toolgate runs in a subshell: its processes are added to PIDS here.)
read -r GW_PORT GW_PID < <(start_toolgate plain "")
PIDS+=("$GW_PID")
read -r TWO_PORT TWO_PID < <(PT_TWO=1 start_toolgate two "")
PIDS+=("$TWO_PID")
read -r TRACED_PORT TRACED_PID < <(start_toolgate traced "
[telemetry]
otlp_endpoint = \"http://127.0.0.1:$MOCK_PORT\"
")
PIDS+=("$TRACED_PID")
BASE_PORT=
if [ -n "${BASE_BIN:-}" ]; then
    cp "$BASE_BIN" "$TMP/toolgate-base"
    read -r BASE_PORT BASE_PID < <(BIN="$TMP/toolgate-base" start_toolgate base "")
    PIDS+=("$BASE_PID")
fi
read -r FULL_PORT FULL_PID < <(start_toolgate full "
[store]
url = \"sqlite://$TMP/store.db\"
record = \"all\"

[[http_tools]]
name = \"GetForecast\"
description = \"Forecast for a place.\"
url = \"http://127.0.0.1:$MOCK_PORT/forecast\"
parameters = { type = \"object\", properties = { location = { type = \"string\" } } }

[[providers]]
name = \"agent\"
base_url = \"http://127.0.0.1:$MOCK_PORT/v1\"
models = [\"bench-agent\"]

[providers.tools]
mode = \"natural\"
gateway_tools = [\"GetForecast\", \"builtin:clock\"]
")
PIDS+=("$FULL_PID")

# --- limits: the same tenant without and with limits ---------------------------
# The key is the one benches/post.lua sends. Limits high enough never to refuse:
# every request is checked and charged, none is turned away.
export BENCH_KEYS=sk-bench
KEYED='
[server.auth]
[[server.auth.keys]]
name = "bench"
key_env = "BENCH_KEYS"
'
LIMITS='[server.auth.keys.limits]
requests_per_minute = 1000000000
tokens_per_minute = 1000000000000
max_concurrent_requests = 100000
[server.auth.keys.budget]
tokens = 1000000000000000
period = "30d"
'
read -r KEYED_PORT KEYED_PID < <(start_toolgate keyed "$KEYED")
PIDS+=("$KEYED_PID")
read -r MEMLIM_PORT MEMLIM_PID < <(start_toolgate memlimited "$KEYED$LIMITS")
PIDS+=("$MEMLIM_PID")
REDIS_PORT=
REDLIM_PORT=
if [ "$REDIS" = 1 ]; then
    REDIS_PORT=$("$CLIENT" freeport)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$TMP/redis.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    read -r REDLIM_PORT REDLIM_PID < <(start_toolgate redislimited "$KEYED$LIMITS
[server.limits]
redis_url = \"redis://127.0.0.1:$REDIS_PORT\"
")
    PIDS+=("$REDLIM_PID")
fi

# --- nginx, the reference hop ------------------------------------------------
NGINX_PORT=
NGINX_PID=
if [ "$NGINX" = 1 ]; then
    port=$("$CLIENT" freeport)
    mkdir -p "$TMP/nginx"
    cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx;
    proxy_temp_path $TMP/nginx;
    upstream mock { server 127.0.0.1:$MOCK_PORT; keepalive 64; }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
    "$NGINX_BIN" -c "$TMP/nginx/nginx.conf" -g 'daemon off;' 2>"$TMP/nginx/stderr" &
    PIDS+=($!)
    for _ in $(seq 100); do
        curl -fs "http://127.0.0.1:$port/v1/chat/completions" -d '{"model":"bench-json"}' >/dev/null 2>&1 && break
        sleep 0.05
    done
    NGINX_PID=$(pgrep -P "$(cat "$TMP/nginx/nginx.pid" 2>/dev/null || echo 0)" | head -1 || true)
    if [ -n "$NGINX_PID" ]; then
        NGINX_PORT=$port
    else
        log "nginx did not start; its rows are left out"
        cat "$TMP/nginx/stderr" >&2 || true
    fi
fi

# --- toolify-rs, the peer gateway (optional) ----------------------------------
TOOLIFY_PORT=
TOOLIFY_PID=
if [ -n "$TOOLIFY_BIN" ]; then
    if [ -x "$TOOLIFY_BIN" ]; then
        port=$("$CLIENT" freeport)
        mkdir -p "$TMP/toolify"
        # It reads ./config.yaml. Passthrough ("native") for the plain rows, its
        # prompt-injected calling ("inject") for the natural row; no log; one
        # worker per core, as toolgate.
        cat >"$TMP/toolify/config.yaml" <<EOF
server:
  host: "127.0.0.1"
  port: $port
  timeout: 60
  models_cache_ttl_secs: 0
  http_use_env_proxy: false
  http_pool_max_idle_per_host: 256
upstream_services:
  - name: "pt"
    provider: "openai"
    base_url: "http://127.0.0.1:$MOCK_PORT/v1"
    api_key: "unused"
    fc_mode: "native"
    models: ["bench-json", "bench-sse", "bench-slow"]
  - name: "nat"
    provider: "openai"
    base_url: "http://127.0.0.1:$MOCK_PORT/v1"
    api_key: "unused"
    fc_mode: "inject"
    models: ["bench-toolify", "bench-slow-toolify"]
client_authentication:
  allowed_keys: ["sk-bench"]
features:
  enable_function_calling: true
  log_level: "DISABLED"
  enable_fc_error_retry: false
EOF
        (cd "$TMP/toolify" && exec "$TOOLIFY_BIN") >"$TMP/toolify/out" 2>&1 &
        TOOLIFY_PID=$!
        PIDS+=("$TOOLIFY_PID")
        for _ in $(seq 100); do
            curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
            sleep 0.05
        done
        if curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1; then
            TOOLIFY_PORT=$port
        else
            log "toolify-rs did not start; its rows are left out"
            cat "$TMP/toolify/out" >&2 || true
        fi
    else
        log "TOOLIFY_BIN=$TOOLIFY_BIN is not an executable; the peer rows are left out"
    fi
fi

# --- request bodies ----------------------------------------------------------
MSG='"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the weather in Paris today?"}]'
TOOLS='"tools":[{"type":"function","function":{"name":"GetWeather","description":"Current weather for a place.","parameters":{"type":"object","properties":{"location":{"type":"string","description":"City and country"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}}}]'
echo "{\"model\":\"bench-json\",$MSG}" >"$TMP/json.json"
echo "{\"model\":\"bench-sse\",\"stream\":true,$MSG}" >"$TMP/sse.json"
echo "{\"model\":\"bench-natural\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/natural.json"
echo "{\"model\":\"bench-tools\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/tools.json"
echo "{\"model\":\"bench-toolify\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/toolify.json"
# What the mock streams for toolify-rs's rewritten request, asked for directly:
# a system prompt naming a trigger.
echo "{\"model\":\"bench-toolify\",\"stream\":true,\"messages\":[{\"role\":\"system\",\"content\":\"<Function_abcd_Start/>\"},{\"role\":\"user\",\"content\":\"hi\"}]}" >"$TMP/toolify-direct.json"
echo "{\"model\":\"bench-slow\",\"stream\":true,$MSG}" >"$TMP/slow.json"
echo "{\"model\":\"bench-slow-natural\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/slow-natural.json"
# The front doors' row: one upstream stream (bench-sse), one tool declared.
SCHEMA='{"type":"object","properties":{"location":{"type":"string","description":"City and country"}},"required":["location"]}'
echo "{\"model\":\"nat/bench-sse\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/door-chat.json"
echo "{\"model\":\"bench-sse\",\"stream\":true,\"input\":\"What is the weather in Paris today?\",\"instructions\":\"You are a helpful assistant.\",\"tools\":[{\"type\":\"function\",\"name\":\"GetWeather\",\"description\":\"Current weather for a place.\",\"parameters\":$SCHEMA}]}" >"$TMP/door-responses.json"
echo "{\"model\":\"bench-sse\",\"stream\":true,\"max_tokens\":256,\"system\":\"You are a helpful assistant.\",\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris today?\"}],\"tools\":[{\"name\":\"GetWeather\",\"description\":\"Current weather for a place.\",\"input_schema\":$SCHEMA}]}" >"$TMP/door-messages.json"

post() { curl -fsN "http://$1/v1/chat/completions" -H 'content-type: application/json' -H 'authorization: Bearer sk-bench' --data-binary @"$TMP/$2.json"; }
# Sanity: each hop does the job its row claims.
post "127.0.0.1:$GW_PORT" natural >"$TMP/natural.out"
grep -q '"tool_calls"' "$TMP/natural.out" && grep -q '"finish_reason":"tool_calls"' "$TMP/natural.out" ||
    { log "natural mode did not produce a tool call:"; head -c 2000 "$TMP/natural.out" >&2; exit 1; }
post "127.0.0.1:$GW_PORT" tools >"$TMP/tools.out"
grep -q 'GetWeather>' "$TMP/tools.out" && ! grep -q '"tool_calls"' "$TMP/tools.out" ||
    { log "to_natural did not render the call as text:"; head -c 2000 "$TMP/tools.out" >&2; exit 1; }
if [ -n "$TOOLIFY_PORT" ]; then
    post "127.0.0.1:$TOOLIFY_PORT" toolify >"$TMP/toolify.out" || true
    if ! grep -q '"finish_reason":"tool_calls"' "$TMP/toolify.out"; then
        log "toolify-rs did not turn the mock's call into tool_calls; its rows are left out"
        head -c 1000 "$TMP/toolify.out" >&2
        TOOLIFY_PORT=
    fi
fi

# --- measuring -------------------------------------------------------------------
field() { sed -n "s/.*[ ^]$1=\([0-9.]*\).*/\1/p" <<<" $2"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

# The hops: name -> address and the process whose CPU is read.
declare -A ADDR PID
ADDR[direct]="127.0.0.1:$MOCK_PORT";  PID[direct]=$MOCK_PID
ADDR[toolgate]="127.0.0.1:$GW_PORT";  PID[toolgate]=$GW_PID
ADDR[full]="127.0.0.1:$FULL_PORT";    PID[full]=$FULL_PID
ADDR[two]="127.0.0.1:$TWO_PORT";      PID[two]=$TWO_PID
ADDR[traced]="127.0.0.1:$TRACED_PORT"; PID[traced]=$TRACED_PID
# The same gateway under three names, one per front door (cells are keyed by hop).
for door in chatdoor respdoor msgdoor; do ADDR[$door]="127.0.0.1:$GW_PORT"; PID[$door]=$GW_PID; done
if [ -n "$BASE_PORT" ]; then ADDR[base]="127.0.0.1:$BASE_PORT"; PID[base]=$BASE_PID; fi
ADDR[keyed]="127.0.0.1:$KEYED_PORT";   PID[keyed]=$KEYED_PID
ADDR[memlimited]="127.0.0.1:$MEMLIM_PORT"; PID[memlimited]=$MEMLIM_PID
if [ -n "$REDLIM_PORT" ]; then ADDR[redislimited]="127.0.0.1:$REDLIM_PORT"; PID[redislimited]=$REDLIM_PID; fi
if [ -n "$NGINX_PORT" ]; then ADDR[nginx]="127.0.0.1:$NGINX_PORT"; PID[nginx]=$NGINX_PID; fi
if [ -n "$TOOLIFY_PORT" ]; then
    ADDR[toolify]="127.0.0.1:$TOOLIFY_PORT"; PID[toolify]=$TOOLIFY_PID
    ADDR[tdirect]="127.0.0.1:$MOCK_PORT";    PID[tdirect]=$MOCK_PID
fi

# wrk_run ADDR BODY CONNS SECONDS -> the RESULT line
wrk_run() {
    local out line
    local path=/v1/chat/completions
    case $2 in
        door-responses) path=/v1/responses ;;
        door-messages) path=/v1/messages ;;
    esac
    out=$(BODY="$TMP/$2.json" URL_PATH=$path wrk -t1 -c"$3" -d"$4s" --timeout 10s -s benches/post.lua "http://$1" 2>&1)
    line=$(grep '^RESULT' <<<"$out") || { log "wrk failed: $out"; exit 1; }
    if [ "$(field errors "$line")" != 0 ] || [ "$(field non2xx "$line")" != 0 ]; then
        log "errors during wrk run against $1 with $2: $line"
    fi
    echo "$line"
}

# cell ROW CONNS HOP:BODY... : every hop REPEAT times, interleaved. Fills
# M[row/conns/hop.rps|p50|p99] (medians), and per hop the CPU ticks and
# requests of its runs.
declare -A M SAMPLES
cell() {
    local row=$1 conns=$2
    shift 2
    local r spec hop body line t0 t1 k
    for r in $(seq "$REPEAT"); do
        for spec in "$@"; do
            hop=${spec%%:*}
            body=${spec#*:}
            [ -n "${ADDR[$hop]:-}" ] || continue
            log "$row c=$conns, run $r/$REPEAT: $hop"
            t0=$(ticks "${PID[$hop]}")
            line=$(wrk_run "${ADDR[$hop]}" "$body" "$conns" "$DURATION")
            t1=$(ticks "${PID[$hop]}")
            k="$row/$conns/$hop"
            SAMPLES[$k.rps]+=" $(awk -v r="$(field requests "$line")" -v d="$(field duration_us "$line")" 'BEGIN {printf "%.0f", r / (d / 1e6)}')"
            SAMPLES[$k.p50]+=" $(field p50_us "$line")"
            SAMPLES[$k.p99]+=" $(field p99_us "$line")"
            M[$k.ticks]=$(( ${M[$k.ticks]:-0} + t1 - t0 ))
            M[$k.reqs]=$(( ${M[$k.reqs]:-0} + $(field requests "$line") ))
        done
    done
    for spec in "$@"; do
        hop=${spec%%:*}
        k="$row/$conns/$hop"
        [ -n "${SAMPLES[$k.rps]:-}" ] || continue
        for s in rps p50 p99; do M[$k.$s]=$(median <<<"${SAMPLES[$k.$s]}"); done
    done
}

RSS_IDLE=$(status_kb "$GW_PID" VmRSS)
if [ "${ONLY:-}" != scale ]; then
log "warming up"
for b in json sse natural tools; do
    for hop in direct toolgate full two traced keyed memlimited ${REDLIM_PORT:+redislimited} ${BASE_PORT:+base}; do wrk_run "${ADDR[$hop]}" "$b" 8 1 >/dev/null; done
done
for b in door-chat door-responses door-messages; do wrk_run "${ADDR[toolgate]}" "$b" 8 1 >/dev/null; done
[ -z "$NGINX_PORT" ] || wrk_run "${ADDR[nginx]}" json 8 1 >/dev/null
[ -z "$TOOLIFY_PORT" ] || { wrk_run "${ADDR[toolify]}" json 8 1 >/dev/null; wrk_run "${ADDR[toolify]}" toolify 8 1 >/dev/null; }

# ONLY=limits: the limits rows alone (what a change to the limiter costs).
for conns in 1 32; do
    if [ "${ONLY:-}" = limits ]; then
        cell ljson "$conns" direct:json keyed:json memlimited:json redislimited:json
        cell lsse "$conns" direct:sse keyed:sse memlimited:sse redislimited:sse
        continue
    fi
    cell json "$conns" direct:json toolgate:json nginx:json toolify:json full:json two:json traced:json base:json
    cell sse "$conns" direct:sse toolgate:sse nginx:sse toolify:sse full:sse two:sse traced:sse base:sse
    cell natural "$conns" direct:natural toolgate:natural nginx:natural tdirect:toolify-direct toolify:toolify
    cell tools "$conns" direct:tools toolgate:tools
    cell doors "$conns" direct:sse chatdoor:door-chat respdoor:door-responses msgdoor:door-messages
    cell ljson "$conns" direct:json keyed:json memlimited:json redislimited:json
    cell lsse "$conns" direct:sse keyed:sse memlimited:sse redislimited:sse
done

RSS_AFTER=$(status_kb "$GW_PID" VmRSS)
HWM_AFTER=$(status_kb "$GW_PID" VmHWM)
log "$STREAMS open passthrough streams"
HOLD_PT=$("$CLIENT" hold "${ADDR[toolgate]}" "$TMP/slow.json" "$STREAMS" "$GW_PID")
sleep 1
log "$STREAMS open natural-mode streams"
HOLD_NAT=$("$CLIENT" hold "${ADDR[toolgate]}" "$TMP/slow-natural.json" "$STREAMS" "$GW_PID")
sleep 1
RSS_END=$(status_kb "$GW_PID" VmRSS)
fi

# --- scale: N whole slow streams at once -----------------------------------------
# Fresh processes on a second mock that paces whole streams; each warmed by
# 100 streams first.
declare -A SC
SCALE_NS=
if [ -n "$SCALE" ]; then
    "$MOCK" serve --listen 127.0.0.1:0 --threads 1 --chunks "$CHUNKS" --slow-ms "$SCALE_MS" \
        --slow-count "$SCALE_TICKS" >"$TMP/smock.out" 2>"$TMP/smock.err" &
    PIDS+=($!)
    for _ in $(seq 100); do grep -q listening "$TMP/smock.out" && break; sleep 0.05; done
    SMOCK_PORT=$(awk '/listening/ {print $2}' "$TMP/smock.out")
    sdescribe() { "$MOCK" describe --chunks "$CHUNKS" --slow-count "$SCALE_TICKS" | awk -v k="$1" '$1 == k {print $2}'; }
    SC[events.pt]=$(sdescribe slow_events)
    SC[events.nat]=$(sdescribe slow_natural_events)
    SC[events.tnat]=$(sdescribe slow_toolify_events)
    FD_LIMIT=$(ulimit -n)
    [ "$FD_LIMIT" = unlimited ] && FD_LIMIT=1048576
    # No cap on requests in flight (4096 by default): every stream is let in.
    export TOOLGATE_SERVER__MAX_CONCURRENT_REQUESTS=0
    read -r SGW_PORT SGW_PID < <(MOCK_PORT=$SMOCK_PORT start_toolgate scale "")
    PIDS+=("$SGW_PID")
    declare -A SADDR SPID
    SADDR[toolgate]="127.0.0.1:$SGW_PORT"; SPID[toolgate]=$SGW_PID
    if [ -n "$BASE_PORT" ]; then
        read -r port pid < <(MOCK_PORT=$SMOCK_PORT BIN="$TMP/toolgate-base" start_toolgate sbase "")
        PIDS+=("$pid")
        SADDR[base]="127.0.0.1:$port"; SPID[base]=$pid
    fi
    if [ -n "$NGINX_PORT" ]; then
        port=$("$CLIENT" freeport)
        mkdir -p "$TMP/snginx"
        sed -e "s|listen 127.0.0.1:$NGINX_PORT;|listen 127.0.0.1:$port;|" \
            -e "s|server 127.0.0.1:$MOCK_PORT;|server 127.0.0.1:$SMOCK_PORT;|" \
            -e "s|pid $TMP/nginx/nginx.pid;|pid $TMP/snginx/nginx.pid; worker_rlimit_nofile $FD_LIMIT;|" \
            -e "s|worker_connections 4096;|worker_connections $FD_LIMIT;|" \
            -e "s|error_log $TMP/nginx/error.log;|error_log $TMP/snginx/error.log;|" \
            "$TMP/nginx/nginx.conf" >"$TMP/snginx/nginx.conf"
        "$NGINX_BIN" -c "$TMP/snginx/nginx.conf" -g 'daemon off;' 2>"$TMP/snginx/stderr" &
        PIDS+=($!)
        for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/v1/chat/completions" -d '{"model":"bench-json"}' >/dev/null 2>&1 && break; sleep 0.05; done
        pid=$(pgrep -P "$(cat "$TMP/snginx/nginx.pid" 2>/dev/null || echo 0)" | head -1 || true)
        if [ -n "$pid" ]; then SADDR[nginx]="127.0.0.1:$port"; SPID[nginx]=$pid; fi
    fi
    if [ -n "$TOOLIFY_PORT" ]; then
        port=$("$CLIENT" freeport)
        mkdir -p "$TMP/stoolify"
        sed -e "s|port: $TOOLIFY_PORT|port: $port|" -e "s|127.0.0.1:$MOCK_PORT|127.0.0.1:$SMOCK_PORT|" \
            "$TMP/toolify/config.yaml" >"$TMP/stoolify/config.yaml"
        (cd "$TMP/stoolify" && exec "$TOOLIFY_BIN") >"$TMP/stoolify/out" 2>&1 &
        pid=$!
        PIDS+=("$pid")
        for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.05; done
        if curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1; then SADDR[toolify]="127.0.0.1:$port"; SPID[toolify]=$pid; fi
    fi
    echo "{\"model\":\"bench-slow-toolify\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/slow-toolify.json"
    # hop -> "pt body, expected text | nat body, expected text"
    sbody() {
        case $1/$2 in
            */pt) echo "slow [DONE]" ;;
            toolgate/nat | base/nat | toolify/nat) echo "$([ "$1" = toolify ] && echo slow-toolify || echo slow-natural) \"finish_reason\":\"tool_calls\"" ;;
            nginx/nat) echo "slow-natural [DONE]" ;;
        esac
    }
    log "scale: warming up each hop with 100 streams"
    warming=()
    for hop in "${!SADDR[@]}"; do
        (
            for mode in pt nat; do
                read -r b e <<<"$(sbody "$hop" "$mode")"
                "$CLIENT" scale "${SADDR[$hop]}" "$TMP/$b.json" 100 "${SPID[$hop]}" "$e" >/dev/null
            done
        ) &
        warming+=($!)
    done
    wait "${warming[@]}"
    for asked in $SCALE; do
        n=$(( asked < (FD_LIMIT - 200) / 2 ? asked : (FD_LIMIT - 200) / 2 ))
        SCALE_NS+=" $n"
        SC[asked.$n]=$asked
        for mode in pt nat; do
            for hop in toolgate base nginx toolify; do
                [ -n "${SADDR[$hop]:-}" ] || continue
                read -r b e <<<"$(sbody "$hop" "$mode")"
                log "scale: $n $mode streams through $hop"
                SC[$n.$mode.$hop]=$("$CLIENT" scale "${SADDR[$hop]}" "$TMP/$b.json" "$n" "${SPID[$hop]}" "$e")
                log "  ${SC[$n.$mode.$hop]}"
            done
        done
    done
fi
STORE_METRICS=$(curl -fs "http://127.0.0.1:$FULL_PORT/metrics" || true)
# Redis calls per request through the Redis-limited gateway: its scripts
# (EVALSHA, and EVAL the first time) over the requests it served.
REDIS_CALLS=–
REDIS_USEC=–
LIMITER_ERRORS=–
if [ -n "$REDLIM_PORT" ]; then
    calls=$(redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '/^cmdstat_eval/ {s += $3} END {print s + 0}')
    REDIS_USEC=$(redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '/^cmdstat_evalsha/ {printf "%.1f", $7}')
    served=$(curl -fs "http://127.0.0.1:$REDLIM_PORT/metrics" | awk '/^toolgate_requests_total\{/ {s += $NF} END {print s + 0}')
    REDIS_CALLS=$(awk -v c="$calls" -v r="$served" 'BEGIN {printf "%.2f", r ? c / r : 0}')
    LIMITER_ERRORS=$(curl -fs "http://127.0.0.1:$REDLIM_PORT/metrics" | awk '/^toolgate_limiter_errors_total/ {s += $NF} END {print s + 0}')
fi
# The recording gateway holds its SQLite file exclusively: stopped (it drains
# and closes the database), its rows can be counted.
kill -TERM "$FULL_PID" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$FULL_PID" 2>/dev/null || break; sleep 0.1; done
store_metric() { awk -v m="$1" 'index($0, m) == 1 {s += $NF} END {printf "%.0f", s}' <<<"$STORE_METRICS"; }
store_rows() { python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(f"SELECT count(*) FROM {sys.argv[2]}").fetchone()[0])' "$TMP/store.db" "$1"; }

for f in plain full; do
    if grep -qiE '(^| )(ERROR|WARN)' "$TMP/$f.log"; then
        log "toolgate ($f) logged warnings or errors:"
        grep -iE '(^| )(ERROR|WARN)' "$TMP/$f.log" | head -5 >&2
    fi
done

# --- report --------------------------------------------------------------------
HZ=$(getconf CLK_TCK)
# µs of CPU per unit for one hop over both concurrencies: cpu ROW HOP EVENTS
cpu() {
    local t=$(( ${M[$1/1/$2.ticks]:-0} + ${M[$1/32/$2.ticks]:-0} ))
    local n=$(( ${M[$1/1/$2.reqs]:-0} + ${M[$1/32/$2.reqs]:-0} ))
    [ "$n" -gt 0 ] || { echo "–"; return; }
    awk -v t="$t" -v hz="$HZ" -v n="$n" -v e="$3" 'BEGIN {printf "%.2f", t / hz * 1e6 / n / e}'
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", 100 * a / b}'; }
# hop cell text: "req/s % of direct / added p50"
hopcell() {
    local row=$1 c=$2 hop=$3 base=${4:-direct}
    local k="$row/$c/$hop" d="$row/$c/$base"
    [ -n "${M[$k.rps]:-}" ] || { echo "–"; return; }
    echo "$(pct "${M[$k.rps]}" "${M[$d.rps]}") % · +$(( M[$k.p50] - M[$d.p50] ))"
}
added() { echo $(( M[$1/$2/$3.p50] - M[$1/$2/${4:-direct}.p50] )); }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
verdict() { awk -v v="$1" -v op="$2" -v lim="$3" 'BEGIN {ok = (op == "<=") ? (v <= lim) : (v >= lim); print ok ? "yes" : "**no**"}'; }
have() { [ -n "${M[$1.rps]:-}" ]; }
# req/s of the recording gateway over the plain one: ratio ROW CONNS
ratio() { awk -v a="${M[$1/$2/full.rps]:-0}" -v b="${M[$1/$2/toolgate.rps]:-1}" 'BEGIN {printf "%.2f", a / b}'; }

# The scale rows: one line per N, mode and hop.
scale_table() {
    [ -n "$SCALE_NS" ] || return 0
    echo "| scale: N whole streams at once ($SCALE_TICKS ticks ${SCALE_MS} ms apart) | N | memory per open stream | RSS before → peak → after | most open at once | streams complete | CPU per upstream chunk |"
    echo "|---|---|---|---|---|---|---|"
    local n mode hop line name ev kb
    for n in $SCALE_NS; do
        for mode in pt nat; do
            for hop in toolgate base nginx toolify; do
                line=${SC[$n.$mode.$hop]:-}
                [ -n "$line" ] || continue
                case $mode/$hop in
                    pt/base) name="BASE_BIN ($(basename "$BASE_BIN")), passthrough"; ev=${SC[events.pt]} ;;
                    nat/base) name="BASE_BIN ($(basename "$BASE_BIN")), natural mode"; ev=${SC[events.nat]} ;;
                    pt/*) name="$hop, passthrough"; ev=${SC[events.pt]} ;;
                    nat/nginx) name="nginx, the natural-mode upstream stream (plain hop)"; ev=${SC[events.nat]} ;;
                    nat/toolify) name="toolify-rs, its prompt-injected calling"; ev=${SC[events.tnat]} ;;
                    nat/*) name="$hop, natural mode (tag, a call parsed)"; ev=${SC[events.nat]} ;;
                esac
                kb=$(awk -v p="$(field rss_peak_kb "$line")" -v b="$(field rss_before_kb "$line")" -v n="$n" 'BEGIN {printf "%.1f", (p - b) / n}')
                printf '| %s | %s%s | %s KB | %s → %s → %s MB | %s | %s / %s | %s µs |\n' "$name" "$n" \
                    "$([ "${SC[asked.$n]}" = "$n" ] || echo " (${SC[asked.$n]} asked; open-file limit $FD_LIMIT)")" "$kb" \
                    "$(mb "$(field rss_before_kb "$line")")" "$(mb "$(field rss_peak_kb "$line")")" "$(mb "$(field rss_after_kb "$line")")" \
                    "$(field max_open "$line")" "$(field complete "$line")" "$n" \
                    "$(awk -v t="$(field ticks "$line")" -v hz="$HZ" -v c="$(field complete "$line")" -v e="$ev" 'BEGIN {if (c * e > 0) printf "%.2f", t / hz * 1e6 / (c * e); else print "–"}')"
            done
        done
    done
}
# scale_kb N MODE HOP: memory per open stream, KB
scale_kb() {
    local line=${SC[$1.$2.$3]:-}
    [ -n "$line" ] || { echo; return; }
    awk -v p="$(field rss_peak_kb "$line")" -v b="$(field rss_before_kb "$line")" -v n="$1" 'BEGIN {printf "%.1f", (p - b) / n}'
}

# The scale rows' targets, as rows of the target table.
scale_targets() {
    for n in $SCALE_NS; do
        ng=$(scale_kb "$n" pt nginx)
        [ -n "$ng" ] || continue
        pt=$(scale_kb "$n" pt toolgate)
        nat=$(scale_kb "$n" nat toolgate)
        echo "| $n streams, passthrough: memory per open stream vs nginx's | $pt KB | $ng KB | $(verdict "$pt" "<=" "$ng") |"
        lim=$(awk -v a="$ng" 'BEGIN {printf "%.1f", 1.5 * a}')
        echo "| $n streams, natural mode: memory per open stream vs 1.5 × nginx's passthrough | $nat KB | $lim KB | $(verdict "$nat" "<=" "$lim") |"
        for mode in pt nat; do
            line=${SC[$n.$mode.toolgate]}
            echo "| $n streams, $mode: streams complete | $(field complete "$line") | $n | $(verdict "$(field complete "$line")" ">=" "$n") |"
            d=$(awk -v a="$(field rss_after_kb "$line")" -v b="$(field rss_before_kb "$line")" 'BEGIN {printf "%.1f", (a - b) / 1024}')
            echo "| $n streams, $mode: RSS after − before | $d MB | 10 MB | $(verdict "$d" "<=" 10) |"
        done
    done
}

CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
NGINX_VERSION=$("$NGINX_BIN" -v 2>&1 | sed 's|.*/||' || echo "not run")
PEER_NOTE="toolify-rs: not run (set TOOLIFY_BIN)."
[ -z "$TOOLIFY_PORT" ] || PEER_NOTE="toolify-rs ($TOOLIFY_BIN): passthrough for the plain rows, its prompt-injected calling for the natural row (its own call format, $TOOLIFY_EVENTS events, measured against the same stream asked for directly)."

LIMITS_TABLE=$(cat <<EOF
| limits, same run: req/s share · added p50 | c | a key, no limits | limits counted in memory | limits counted in Redis | req/s with Redis limits ÷ without limits |
|---|---|---|---|---|---|
$(for row in ljson lsse; do for c in 1 32; do
    printf '| %s | %s | %s | %s | %s | %s |\n' "$([ "$row" = ljson ] && echo non-stream || echo "stream (usage asked for and dropped)")" "$c" "$(hopcell "$row" "$c" keyed)" "$(hopcell "$row" "$c" memlimited)" "$(hopcell "$row" "$c" redislimited)" "$(awk -v a="${M[$row/$c/redislimited.rps]:-0}" -v b="${M[$row/$c/keyed.rps]:-1}" 'BEGIN {printf "%.2f", a / b}')"
done; done)
| CPU per request (non-stream) | | $(cpu ljson keyed 1) µs | $(cpu ljson memlimited 1) µs | $(cpu ljson redislimited 1) µs | |

Redis script calls per request through the Redis-limited gateway: $REDIS_CALLS (each call carries the admissions and settlements of the tenant that queued while its last call was in Redis), each taking $REDIS_USEC µs of Redis's own CPU (on the same cores): $(awk -v c="$REDIS_CALLS" -v u="$REDIS_USEC" 'BEGIN {if (c + 0 > 0) printf "%.1f", c * u; else print "–"}') µs a request; limiter errors: $LIMITER_ERRORS.
EOF
)
if [ "${ONLY:-}" = scale ]; then
    echo "### Scale rows ($(date -u +%Y-%m-%d), toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src 2>/dev/null || echo '+changes'))"
    echo
    scale_table
    echo
    echo "| target | measured | limit | met |"
    echo "|---|---|---|---|"
    scale_targets
    exit 0
fi
if [ "${ONLY:-}" = limits ]; then
    echo "### Limits rows ($(date -u +%Y-%m-%d), toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo
    echo "$LIMITS_TABLE"
    exit 0
fi

cat <<EOF
### Load benchmark ($(date -u +%Y-%m-%d), toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src 2>/dev/null || echo '+changes'))

$(nproc) cores ($CPU_MODEL) shared by the mock (1 thread), wrk (1 thread) and the hop. Each cell is the median
of $REPEAT interleaved ${DURATION}-second \`wrk -t1\` runs; "direct" goes straight to the mock. A hop's cell is its
requests/s as a share of direct, then the p50 latency it adds, in µs. nginx $NGINX_VERSION: one worker, keep-alive
upstream, access log and buffering off. $PEER_NOTE Streams: passthrough $SSE_EVENTS events, natural
$NATURAL_EVENTS, to_natural $TOOLS_EVENTS. toolgate log level: $TOOLGATE_LOG.

| row | c | direct req/s · p50 µs | toolgate | nginx | toolify-rs |
|---|---|---|---|---|---|
$(for c in 1 32; do
    printf '| non-stream passthrough | %s | %s · %s | %s | %s | %s |\n' "$c" "${M[json/$c/direct.rps]}" "${M[json/$c/direct.p50]}" "$(hopcell json "$c" toolgate)" "$(hopcell json "$c" nginx)" "$(hopcell json "$c" toolify)"
    printf '| stream passthrough | %s | %s · %s | %s | %s | %s |\n' "$c" "${M[sse/$c/direct.rps]}" "${M[sse/$c/direct.p50]}" "$(hopcell sse "$c" toolgate)" "$(hopcell sse "$c" nginx)" "$(hopcell sse "$c" toolify)"
    printf '| natural-mode stream with a call | %s | %s · %s | %s | %s (plain hop) | %s |\n' "$c" "${M[natural/$c/direct.rps]}" "${M[natural/$c/direct.p50]}" "$(hopcell natural "$c" toolgate)" "$(hopcell natural "$c" nginx)" "$(hopcell natural "$c" toolify tdirect)"
    printf '| to_natural stream | %s | %s · %s | %s | | |\n' "$c" "${M[tools/$c/direct.rps]}" "${M[tools/$c/direct.p50]}" "$(hopcell tools "$c" toolgate)"
done)

| CPU (utime + stime) | toolgate | nginx | toolify-rs |
|---|---|---|---|
| non-stream passthrough, per request | $(cpu json toolgate 1) µs | $(cpu json nginx 1) µs | $(cpu json toolify 1) µs |
| stream passthrough, per upstream chunk | $(cpu sse toolgate "$SSE_EVENTS") µs | $(cpu sse nginx "$SSE_EVENTS") µs | $(cpu sse toolify "$SSE_EVENTS") µs |
| natural-mode stream, per upstream chunk | $(cpu natural toolgate "$NATURAL_EVENTS") µs | $(cpu natural nginx "$NATURAL_EVENTS") µs (plain hop) | $(cpu natural toolify "$TOOLIFY_EVENTS") µs |
| to_natural stream, per upstream chunk | $(cpu tools toolgate "$TOOLS_EVENTS") µs | | |

| toolgate memory | VmRSS | VmHWM (peak) |
|---|---|---|
| idle, after start-up | $(mb "$RSS_IDLE") MB | |
| after the load above | $(mb "$RSS_AFTER") MB | $(mb "$HWM_AFTER") MB |
| $(field open "$HOLD_PT") open passthrough streams | $(mb "$(field rss_kb "$HOLD_PT")") MB | $(mb "$(field hwm_kb "$HOLD_PT")") MB |
| $(field open "$HOLD_NAT") open natural-mode streams | $(mb "$(field rss_kb "$HOLD_NAT")") MB | $(mb "$(field hwm_kb "$HOLD_NAT")") MB |
| after the streams closed | $(mb "$RSS_END") MB | |

$(scale_table)

| front doors, same upstream stream, one tool declared: req/s share · added p50 | c | chat door, natural-mode provider (the reference) | Responses door | Messages door |
|---|---|---|---|---|
$(for c in 1 32; do
    printf '| %s events | %s | %s | %s | %s |\n' "$SSE_EVENTS" "$c" "$(hopcell doors "$c" chatdoor)" "$(hopcell doors "$c" respdoor)" "$(hopcell doors "$c" msgdoor)"
done)
| CPU per request | | $(cpu doors chatdoor 1) µs | $(cpu doors respdoor 1) µs | $(cpu doors msgdoor 1) µs |

| passthrough, same run | c | toolgate | toolgate +store (record = all) +gateway tools on another provider | req/s with the store ÷ without |
|---|---|---|---|---|
$(for row in json sse; do for c in 1 32; do
    printf '| %s: req/s share · added p50 · added p99 | %s | %s · +%s | %s · +%s | %s |\n' "$([ "$row" = json ] && echo non-stream || echo stream)" "$c" "$(hopcell "$row" "$c" toolgate)" "$(( M[$row/$c/toolgate.p99] - M[$row/$c/direct.p99] ))" "$(hopcell "$row" "$c" full)" "$(( M[$row/$c/full.p99] - M[$row/$c/direct.p99] ))" "$(ratio "$row" "$c")"
done; done)
| CPU per request (non-stream) | | $(cpu json toolgate 1) µs | $(cpu json full 1) µs | |

| passthrough, same run: req/s share · added p50 | c | one target | two targets (weights 1:1, one attempt each) |
|---|---|---|---|
$(for row in json sse; do for c in 1 32; do
    printf '| %s | %s | %s | %s |\n' "$([ "$row" = json ] && echo non-stream || echo stream)" "$c" "$(hopcell "$row" "$c" toolgate)" "$(hopcell "$row" "$c" two)"
done; done)
| CPU per request (non-stream) | | $(cpu json toolgate 1) µs | $(cpu json two 1) µs |

| passthrough, same run: req/s share · added p50 | c | toolgate | with traces (every request: a server and a chat span, exported) |$([ -z "$BASE_PORT" ] || echo " BASE_BIN ($(basename "$BASE_BIN")) |")
|---|---|---|---|$([ -z "$BASE_PORT" ] || echo "---|")
$(for row in json sse; do for c in 1 32; do
    printf '| %s | %s | %s | %s |%s\n' "$([ "$row" = json ] && echo non-stream || echo stream)" "$c" "$(hopcell "$row" "$c" toolgate)" "$(hopcell "$row" "$c" traced)" "$([ -z "$BASE_PORT" ] || echo " $(hopcell "$row" "$c" base) |")"
done; done)
| CPU per request (non-stream) | | $(cpu json toolgate 1) µs | $(cpu json traced 1) µs |$([ -z "$BASE_PORT" ] || echo " $(cpu json base 1) µs |")
| CPU per upstream chunk (stream) | | $(cpu sse toolgate "$SSE_EVENTS") µs | $(cpu sse traced "$SSE_EVENTS") µs |$([ -z "$BASE_PORT" ] || echo " $(cpu sse base "$SSE_EVENTS") µs |")

$LIMITS_TABLE

The store wrote $(store_metric toolgate_store_write_seconds_count) batches (dropped rows: $(store_metric toolgate_store_dropped_total), queue depth at the end: $(store_metric toolgate_store_queue_depth)); it holds $(store_rows chats) chats and $(store_rows messages) message rows for $(store_metric 'toolgate_requests_total{') requests the recording gateway served.

| target | measured | limit | met |
|---|---|---|---|
EOF
if have json/1/nginx; then
    echo "| non-stream c=1: added p50 vs nginx's | $(added json 1 toolgate) µs | $(added json 1 nginx) µs | $(verdict "$(added json 1 toolgate)" "<=" "$(added json 1 nginx)") |"
    echo "| non-stream c=32: req/s vs nginx's | ${M[json/32/toolgate.rps]} | ${M[json/32/nginx.rps]} | $(verdict "${M[json/32/toolgate.rps]}" ">=" "${M[json/32/nginx.rps]}") |"
    lim=$(awk -v a="$(added natural 1 nginx)" 'BEGIN {printf "%.0f", 1.5 * a}')
    echo "| natural stream c=1: added p50 vs 1.5 × nginx's on the same stream | $(added natural 1 toolgate) µs | $lim µs | $(verdict "$(added natural 1 toolgate)" "<=" "$lim") |"
fi
for row in json sse; do
    echo "| $row c=32: req/s recording every exchange ÷ without a store | $(ratio "$row" 32) | 0.80 | $(verdict "$(ratio "$row" 32)" ">=" 0.8) |"
done
for door in respdoor msgdoor; do
    name=$([ "$door" = respdoor ] && echo Responses || echo Messages)
    lim=$(awk -v a="$(added doors 1 chatdoor)" 'BEGIN {printf "%.0f", 1.5 * a}')
    echo "| $name door c=1: added p50 vs 1.5 × the natural chat door's | $(added doors 1 $door) µs | $lim µs | $(verdict "$(added doors 1 $door)" "<=" "$lim") |"
    r=$(awk -v a="${M[doors/32/$door.rps]}" -v b="${M[doors/32/chatdoor.rps]}" 'BEGIN {printf "%.2f", a / b}')
    echo "| $name door c=32: req/s ÷ the natural chat door's | $r | 0.80 | $(verdict "$r" ">=" 0.8) |"
done
echo "| natural stream: CPU per upstream chunk | $(cpu natural toolgate "$NATURAL_EVENTS") µs | 1.5 µs | $(verdict "$(cpu natural toolgate "$NATURAL_EVENTS")" "<=" 1.5) |"
echo "| to_natural stream: CPU per upstream chunk | $(cpu tools toolgate "$TOOLS_EVENTS") µs | 3 µs | $(verdict "$(cpu tools toolgate "$TOOLS_EVENTS")" "<=" 3) |"
if have json/1/toolify; then
    for c in 1 32; do
        for row in json sse; do
            echo "| $row c=$c: ahead of toolify-rs (added p50; req/s) | +$(added $row $c toolgate) µs; ${M[$row/$c/toolgate.rps]} | +$(added $row $c toolify) µs; ${M[$row/$c/toolify.rps]} | $(awk -v a="$(added $row $c toolgate)" -v b="$(added $row $c toolify)" -v r="${M[$row/$c/toolgate.rps]}" -v s="${M[$row/$c/toolify.rps]}" 'BEGIN {print (a <= b && r >= s) ? "yes" : "**no**"}') |"
        done
        a=$(added natural $c toolgate); b=$(added natural $c toolify tdirect)
        x=$(pct "${M[natural/$c/toolgate.rps]}" "${M[natural/$c/direct.rps]}"); y=$(pct "${M[natural/$c/toolify.rps]}" "${M[natural/$c/tdirect.rps]}")
        echo "| natural c=$c: ahead of toolify-rs (added p50; req/s share) | +$a µs; $x % | +$b µs; $y % | $(awk -v a="$a" -v b="$b" -v x="$x" -v y="$y" 'BEGIN {print (a <= b && x >= y) ? "yes" : "**no**"}') |"
    done
fi
if have ljson/32/redislimited; then
    r=$(awk -v a="${M[ljson/32/redislimited.rps]}" -v b="${M[ljson/32/keyed.rps]}" 'BEGIN {printf "%.2f", a / b}')
    echo "| non-stream c=32: req/s with limits in Redis ÷ the same key without limits | $r | 0.90 | $(verdict "$r" ">=" 0.9) |"
fi
echo "| RSS after the load | $(mb "$RSS_AFTER") MB | 15 MB | $(verdict "$(mb "$RSS_AFTER")" "<=" 15) |"
echo "| peak RSS (VmHWM) after the load | $(mb "$HWM_AFTER") MB | 15 MB | $(verdict "$(mb "$HWM_AFTER")" "<=" 15) |"
scale_targets
echo "| RSS with $(field open "$HOLD_NAT") open natural-mode streams | $(mb "$(field rss_kb "$HOLD_NAT")") MB | 40 MB | $(verdict "$(mb "$(field rss_kb "$HOLD_NAT")")" "<=" 40) |"
