#!/usr/bin/env bash
# End-to-end load benchmark of toolgate, in one command:
#
#     bash benches/load.sh
#
# It builds toolgate (release) and two helpers (benches/mock_upstream.rs, a
# canned upstream, and benches/load_client.rs, a small measuring client),
# starts the mock and toolgate on 127.0.0.1, and drives both with wrk
# (installed from Debian's packages if missing) at concurrency 1 and 32 for:
#
#   - non-stream passthrough   (model bench-json:    canned JSON completion)
#   - stream passthrough       (model bench-sse:     role + $CHUNKS content chunks + finish + DONE)
#   - natural-mode stream      (model bench-natural: prose then a <GetWeather> call, 4-byte tokens)
#   - to_natural stream        (model bench-tools:   a native tool_calls call, arguments in 4-byte fragments)
#
# For scale, the two passthrough scenarios also go through nginx (installed
# from Debian's packages if missing; NGINX=0 skips it), configured as a plain
# keep-alive proxy hop to the same mock with one worker process per core.
#
# Every scenario is measured directly against the mock and through toolgate in
# the same run, so the table shows what toolgate adds. It also measures the
# time to first event of streams, toolgate's CPU per natural-mode upstream
# chunk (/proc/PID/stat utime+stime over the natural runs / chunks relayed),
# toolgate's RSS (VmRSS, VmHWM) after the load and with 1,000 open streams.
# The output is a Markdown report ready for README's Performance section.
#
# Knobs (environment): DURATION (s per wrk run, default 5), CHUNKS (content
# chunks of the passthrough stream, default 32), STREAMS (open streams,
# default 1000), TOOLGATE_LOG (toolgate's log filter, default info; its log
# goes to a temp file), MOCK_THREADS (default 1), NGINX (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
CHUNKS=${CHUNKS:-32}
STREAMS=${STREAMS:-1000}
MOCK_THREADS=${MOCK_THREADS:-1}
NGINX=${NGINX:-1}
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
log "building the helpers (cargo bench --no-run)"
cargo bench --no-run --bench mock_upstream --bench load_client --message-format=json \
    >"$TMP/build.json"
exe() { sed -n "s/.*\"executable\":\"\([^\"]*\/deps\/$1-[^\"]*\)\".*/\1/p" "$TMP/build.json" | tail -1; }
MOCK=$(exe mock_upstream)
CLIENT=$(exe load_client)
log "building toolgate (cargo build --release)"
cargo build --release --bin toolgate >&2
cp target/release/toolgate "$TMP/toolgate"
TOOLGATE="$TMP/toolgate"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((STREAMS * 2 + 100)) ]; then
    log "warning: open-file limit $(ulimit -n) is low for $STREAMS streams"
fi

# --- start the mock and toolgate --------------------------------------------
"$MOCK" serve --listen 127.0.0.1:0 --threads "$MOCK_THREADS" --chunks "$CHUNKS" --slow-ms 1000 \
    >"$TMP/mock.out" 2>"$TMP/mock.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$TMP/mock.out" && break; sleep 0.05; done
MOCK_PORT=$(awk '/listening/ {print $2}' "$TMP/mock.out")
[ -n "$MOCK_PORT" ] || { log "the mock did not start"; cat "$TMP/mock.err" >&2; exit 1; }
read -r _ SSE_EVENTS < <("$MOCK" describe --chunks "$CHUNKS" | grep sse_events)
read -r _ NATURAL_EVENTS < <("$MOCK" describe --chunks "$CHUNKS" | grep natural_events)
read -r _ TOOLS_EVENTS < <("$MOCK" describe --chunks "$CHUNKS" | grep tools_events)

GW_PORT=$("$CLIENT" freeport)
cat >"$TMP/toolgate.toml" <<EOF
[server]
listen = "127.0.0.1:$GW_PORT"
shutdown_grace_secs = 1

[[providers]]
name = "pt"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
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
"$TOOLGATE" check --config "$TMP/toolgate.toml" >/dev/null 2>"$TMP/check.err" ||
    { cat "$TMP/check.err" >&2; exit 1; }
"$TOOLGATE" --config "$TMP/toolgate.toml" 2>"$TMP/toolgate.log" &
GW_PID=$!
PIDS+=("$GW_PID")
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$GW_PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.05
done
curl -fs "http://127.0.0.1:$GW_PORT/healthz" >/dev/null || { log "toolgate did not start"; cat "$TMP/toolgate.log" >&2; exit 1; }

DIRECT="127.0.0.1:$MOCK_PORT"
GATEWAY="127.0.0.1:$GW_PORT"

# --- nginx, the reference hop ------------------------------------------------
NGINX_ADDR=
if [ "$NGINX" = 1 ]; then
    NGINX_PORT=$("$CLIENT" freeport)
    mkdir -p "$TMP/nginx"
    cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes $(nproc);
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx;
    proxy_temp_path $TMP/nginx;
    upstream mock { server 127.0.0.1:$MOCK_PORT; keepalive 64; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
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
    nginx_up() { curl -fs "http://127.0.0.1:$NGINX_PORT/v1/chat/completions" -d '{"model":"bench-json"}' >/dev/null 2>&1; }
    for _ in $(seq 100); do nginx_up && break; sleep 0.05; done
    if nginx_up; then
        NGINX_ADDR="127.0.0.1:$NGINX_PORT"
    else
        log "nginx did not start; the reference rows are left out"
        cat "$TMP/nginx/stderr" >&2 || true
    fi
fi

# --- request bodies ----------------------------------------------------------
MSG='"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the weather in Paris today?"}]'
TOOLS='"tools":[{"type":"function","function":{"name":"GetWeather","description":"Current weather for a place.","parameters":{"type":"object","properties":{"location":{"type":"string","description":"City and country"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}}}]'
echo "{\"model\":\"bench-json\",$MSG}" >"$TMP/json.json"
echo "{\"model\":\"bench-sse\",\"stream\":true,$MSG}" >"$TMP/sse.json"
echo "{\"model\":\"bench-natural\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/natural.json"
echo "{\"model\":\"bench-tools\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/tools.json"
echo "{\"model\":\"bench-slow\",\"stream\":true,$MSG}" >"$TMP/slow.json"
echo "{\"model\":\"bench-slow-natural\",\"stream\":true,$MSG,$TOOLS}" >"$TMP/slow-natural.json"

# Sanity: the natural stream through toolgate must carry a native call.
curl -fsN "http://$GATEWAY/v1/chat/completions" -H 'content-type: application/json' \
    --data-binary @"$TMP/natural.json" >"$TMP/natural.out"
grep -q '"tool_calls"' "$TMP/natural.out" && grep -q '"finish_reason":"tool_calls"' "$TMP/natural.out" ||
    { log "natural mode did not produce a tool call:"; head -c 2000 "$TMP/natural.out" >&2; exit 1; }
# And the to_natural stream must carry the call as text.
curl -fsN "http://$GATEWAY/v1/chat/completions" -H 'content-type: application/json' \
    --data-binary @"$TMP/tools.json" >"$TMP/tools.out"
grep -q 'GetWeather>' "$TMP/tools.out" && ! grep -q '"tool_calls"' "$TMP/tools.out" ||
    { log "to_natural did not render the call as text:"; head -c 2000 "$TMP/tools.out" >&2; exit 1; }

# --- helpers -------------------------------------------------------------------
cpu_ticks() { awk '{print $14 + $15}' "/proc/$GW_PID/stat"; }
status_kb() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$GW_PID/status"; }
field() { sed -n "s/.*[ ^]$1=\([0-9.]*\).*/\1/p" <<<" $2"; }

# wrk_run ADDR BODY CONNS [SECONDS] -> the RESULT line
wrk_run() {
    local out
    out=$(BODY="$2" wrk -t1 -c"$3" -d"${4:-$DURATION}s" --timeout 10s -s benches/post.lua "http://$1" 2>&1)
    local line
    line=$(grep '^RESULT' <<<"$out") || { log "wrk failed: $out"; exit 1; }
    if [ "$(field errors "$line")" != 0 ] || [ "$(field non2xx "$line")" != 0 ]; then
        log "errors during wrk run against $1 with $2: $line"
    fi
    echo "$line"
}

rps() { awk -v r="$(field requests "$1")" -v d="$(field duration_us "$1")" 'BEGIN {printf "%.0f", r / (d / 1e6)}'; }

ROWS=()
declare -A R
# measure NAME BODY CONNS [ADDR]: direct, then through ADDR (default toolgate)
# in the same run; fills R[] and ROWS. toolgate's CPU is read around its run.
measure() {
    local name=$1 body=$2 conns=$3 via=${4:-$GATEWAY} direct gw t0 t1
    log "$name, concurrency $conns: direct"
    direct=$(wrk_run "$DIRECT" "$body" "$conns")
    log "$name, concurrency $conns: through $via"
    t0=$(cpu_ticks)
    gw=$(wrk_run "$via" "$body" "$conns")
    t1=$(cpu_ticks)
    local k="$name/$conns"
    R[$k.d_rps]=$(rps "$direct")
    R[$k.g_rps]=$(rps "$gw")
    R[$k.d_p50]=$(field p50_us "$direct")
    R[$k.d_p99]=$(field p99_us "$direct")
    R[$k.g_p50]=$(field p50_us "$gw")
    R[$k.g_p99]=$(field p99_us "$gw")
    R[$k.g_req]=$(field requests "$gw")
    R[$k.cpu_ticks]=$((t1 - t0))
    R[$k.ratio]=$(awk -v g="${R[$k.g_rps]}" -v d="${R[$k.d_rps]}" 'BEGIN {printf "%.0f", 100 * g / d}')
    R[$k.add50]=$((R[$k.g_p50] - R[$k.d_p50]))
    R[$k.add99]=$((R[$k.g_p99] - R[$k.d_p99]))
    ROWS+=("| $name | $conns | ${R[$k.d_rps]} | ${R[$k.g_rps]} | ${R[$k.ratio]} % | ${R[$k.d_p50]} / ${R[$k.d_p99]} | ${R[$k.g_p50]} / ${R[$k.g_p99]} | **${R[$k.add50]} / ${R[$k.add99]}** |")
}

# --- warm-up: connections pooled, contracts cached ---------------------------
log "warming up"
RSS_IDLE=$(status_kb VmRSS)
for b in json sse natural tools; do
    wrk_run "$GATEWAY" "$TMP/$b.json" 8 1 >/dev/null
    wrk_run "$DIRECT" "$TMP/$b.json" 8 1 >/dev/null
done
if [ -n "$NGINX_ADDR" ]; then
    wrk_run "$NGINX_ADDR" "$TMP/json.json" 8 1 >/dev/null
fi

# --- throughput and latency --------------------------------------------------
for conns in 1 32; do
    measure "non-stream passthrough" "$TMP/json.json" "$conns"
    measure "stream passthrough" "$TMP/sse.json" "$conns"
    measure "natural-mode stream (1 call)" "$TMP/natural.json" "$conns"
    measure "to_natural stream (1 call)" "$TMP/tools.json" "$conns"
    if [ -n "$NGINX_ADDR" ]; then
        measure "nginx: non-stream passthrough" "$TMP/json.json" "$conns" "$NGINX_ADDR"
        measure "nginx: stream passthrough" "$TMP/sse.json" "$conns" "$NGINX_ADDR"
    fi
done

# --- time to first event of a stream -----------------------------------------
ttfb() { "$CLIENT" ttfb "$1" "$2" 300; }
log "time to first event"
TT_SSE_D=$(ttfb "$DIRECT" "$TMP/sse.json")
TT_SSE_G=$(ttfb "$GATEWAY" "$TMP/sse.json")
TT_NAT_D=$(ttfb "$DIRECT" "$TMP/natural.json")
TT_NAT_G=$(ttfb "$GATEWAY" "$TMP/natural.json")

RSS_AFTER=$(status_kb VmRSS)
HWM_AFTER=$(status_kb VmHWM)

# --- open streams ------------------------------------------------------------
log "$STREAMS open passthrough streams"
HOLD_PT=$("$CLIENT" hold "$GATEWAY" "$TMP/slow.json" "$STREAMS" "$GW_PID")
sleep 1
log "$STREAMS open natural-mode streams"
HOLD_NAT=$("$CLIENT" hold "$GATEWAY" "$TMP/slow-natural.json" "$STREAMS" "$GW_PID")
sleep 1
RSS_END=$(status_kb VmRSS)

if grep -qiE '(^| )(ERROR|WARN)' "$TMP/toolgate.log"; then
    log "toolgate logged warnings or errors:"
    grep -iE '(^| )(ERROR|WARN)' "$TMP/toolgate.log" | head -5 >&2
fi

# --- report --------------------------------------------------------------------
CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
HZ=$(getconf CLK_TCK)
NAT_CHUNKS=$(( (R["natural-mode stream (1 call)/1.g_req"] + R["natural-mode stream (1 call)/32.g_req"]) * NATURAL_EVENTS ))
NAT_TICKS=$(( R["natural-mode stream (1 call)/1.cpu_ticks"] + R["natural-mode stream (1 call)/32.cpu_ticks"] ))
US_PER_CHUNK=$(awk -v t="$NAT_TICKS" -v hz="$HZ" -v n="$NAT_CHUNKS" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}')
PT_TICKS=$(( R["stream passthrough/1.cpu_ticks"] + R["stream passthrough/32.cpu_ticks"] ))
PT_CHUNKS=$(( (R["stream passthrough/1.g_req"] + R["stream passthrough/32.g_req"]) * SSE_EVENTS ))
US_PER_PT_CHUNK=$(awk -v t="$PT_TICKS" -v hz="$HZ" -v n="$PT_CHUNKS" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}')
TN_TICKS=$(( R["to_natural stream (1 call)/1.cpu_ticks"] + R["to_natural stream (1 call)/32.cpu_ticks"] ))
TN_CHUNKS=$(( (R["to_natural stream (1 call)/1.g_req"] + R["to_natural stream (1 call)/32.g_req"]) * TOOLS_EVENTS ))
US_PER_TN_CHUNK=$(awk -v t="$TN_TICKS" -v hz="$HZ" -v n="$TN_CHUNKS" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}')
JSON_TICKS=$(( R["non-stream passthrough/1.cpu_ticks"] + R["non-stream passthrough/32.cpu_ticks"] ))
JSON_REQS=$(( R["non-stream passthrough/1.g_req"] + R["non-stream passthrough/32.g_req"] ))
US_PER_JSON=$(awk -v t="$JSON_TICKS" -v hz="$HZ" -v n="$JSON_REQS" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
added_tt() { awk -v g="$(field "$1" "$2")" -v d="$(field "$1" "$3")" 'BEGIN {printf "%.0f", g - d}'; }
verdict() { awk -v v="$1" -v op="$2" -v lim="$3" 'BEGIN {ok = (op == "<=") ? (v <= lim) : (v >= lim); print ok ? "yes" : "**no**"}'; }

NGINX_NOTE=
NGINX_ROWS=
if [ -n "$NGINX_ADDR" ]; then
    NGINX_NOTE="\"nginx:\" rows send the same requests through nginx $("$NGINX_BIN" -v 2>&1 | sed 's|.*/||') as a plain
keep-alive proxy hop ($(nproc) workers, access log off, buffering off), for scale."
    for c in 1 32; do
        for s in "non-stream passthrough" "stream passthrough"; do
            NGINX_ROWS+="| $s, concurrency $c | ${R[$s/$c.ratio]} % / ${R[nginx: $s/$c.ratio]} % | ${R[$s/$c.add50]} / ${R[nginx: $s/$c.add50]} µs |"$'\n'
        done
    done
fi
PT1="non-stream passthrough/1"
PT32="non-stream passthrough/32"
NAT1="natural-mode stream (1 call)/1"
HOLD_PT_RSS=$(field rss_kb "$HOLD_PT")
HOLD_NAT_RSS=$(field rss_kb "$HOLD_NAT")

cat <<EOF
### Load benchmark ($(date -u +%Y-%m-%d), toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src 2>/dev/null || echo '+changes'))

Machine: $(nproc) cores, $CPU_MODEL, shared by toolgate, the mock upstream
($MOCK_THREADS thread) and wrk (1 thread) during the run. Each cell is one
${DURATION}-second \`wrk -t1\` run; "direct" goes straight to the mock, "toolgate"
through it, in the same run. Latencies in µs. Streams: passthrough = role +
$CHUNKS content chunks + finish + DONE ($SSE_EVENTS JSON events); natural =
$NATURAL_EVENTS JSON events of 4-byte tokens, prose then a \`<GetWeather>\`
call, re-emitted as a native \`tool_calls\` stream; to_natural = $TOOLS_EVENTS JSON
events of a native call (arguments in 4-byte fragments), re-emitted as text.
$NGINX_NOTE
toolgate log level: $TOOLGATE_LOG.

| scenario | concurrency | direct req/s | toolgate req/s | toolgate / direct | direct p50 / p99 | toolgate p50 / p99 | added p50 / p99 |
|---|---|---|---|---|---|---|---|
$(printf '%s\n' "${ROWS[@]}")

| stream (concurrency 1, keep-alive, 300 requests) | direct first event p50 / p99 | toolgate first event p50 / p99 | added time to first event p50 |
|---|---|---|---|
| passthrough | $(field ttfb_p50_us "$TT_SSE_D") / $(field ttfb_p99_us "$TT_SSE_D") | $(field ttfb_p50_us "$TT_SSE_G") / $(field ttfb_p99_us "$TT_SSE_G") | $(added_tt ttfb_p50_us "$TT_SSE_G" "$TT_SSE_D") |
| natural mode | $(field ttfb_p50_us "$TT_NAT_D") / $(field ttfb_p99_us "$TT_NAT_D") | $(field ttfb_p50_us "$TT_NAT_G") / $(field ttfb_p99_us "$TT_NAT_G") | $(added_tt ttfb_p50_us "$TT_NAT_G" "$TT_NAT_D") |

| toolgate CPU (utime + stime, /proc/PID/stat) | per unit |
|---|---|
| non-stream passthrough, per request | $US_PER_JSON µs |
| stream passthrough, per upstream chunk | $US_PER_PT_CHUNK µs |
| natural-mode stream, per upstream chunk (request rewrite included) | $US_PER_CHUNK µs |
| to_natural stream, per upstream chunk (request rewrite included) | $US_PER_TN_CHUNK µs |

| toolgate memory | VmRSS | VmHWM (peak) |
|---|---|---|
| idle, after start-up | $(mb "$RSS_IDLE") MB | |
| after the load above | $(mb "$RSS_AFTER") MB | $(mb "$HWM_AFTER") MB |
| $(field open "$HOLD_PT") open passthrough streams | $(mb "$HOLD_PT_RSS") MB | $(mb "$(field hwm_kb "$HOLD_PT")") MB |
| $(field open "$HOLD_NAT") open natural-mode streams | $(mb "$HOLD_NAT_RSS") MB | $(mb "$(field hwm_kb "$HOLD_NAT")") MB |
| after the streams closed | $(mb "$RSS_END") MB | |

$(if [ -n "$NGINX_ROWS" ]; then
    printf '| same requests, same run | req/s vs direct: toolgate / nginx | added p50: toolgate / nginx |\n|---|---|---|\n%s\n' "$NGINX_ROWS"
fi)

| target | measured | limit | met |
|---|---|---|---|
| passthrough, concurrency 1: added p50 | ${R[$PT1.add50]} µs | 40 µs | $(verdict "${R[$PT1.add50]}" "<=" 40) |
| passthrough, concurrency 1: added p99 | ${R[$PT1.add99]} µs | 150 µs | $(verdict "${R[$PT1.add99]}" "<=" 150) |
| passthrough, concurrency 32: req/s vs direct | ${R[$PT32.ratio]} % | ≥ 70 % | $(verdict "${R[$PT32.ratio]}" ">=" 70) |
| natural-mode stream: CPU per upstream chunk | $US_PER_CHUNK µs | 5 µs | $(verdict "$US_PER_CHUNK" "<=" 5) |
| natural-mode stream, concurrency 1: added p50 | ${R[$NAT1.add50]} µs | 100 µs | $(verdict "${R[$NAT1.add50]}" "<=" 100) |
| RSS after the load | $(mb "$RSS_AFTER") MB | 15 MB | $(verdict "$(mb "$RSS_AFTER")" "<=" 15) |
| RSS with $(field open "$HOLD_PT") open streams (passthrough / natural) | $(mb "$HOLD_PT_RSS") / $(mb "$HOLD_NAT_RSS") MB | 60 MB | $(verdict "$(mb "$(( HOLD_PT_RSS > HOLD_NAT_RSS ? HOLD_PT_RSS : HOLD_NAT_RSS ))")" "<=" 60) |
EOF
