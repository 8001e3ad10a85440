-- wrk script for benches/load.sh: POSTs the JSON file named by $BODY to
-- $URL_PATH (default /v1/chat/completions) and prints one machine-readable RESULT line. The
-- bearer key is the one the peer gateway's benchmark config accepts; the
-- mock, nginx and toolgate ignore it.
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.method = "POST"
wrk.path = os.getenv("URL_PATH") or "/v1/chat/completions"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d mean_us=%.1f errors=%d non2xx=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.mean,
    e.connect + e.read + e.write + e.timeout, e.status))
end
