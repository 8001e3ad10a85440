-- wrk script for benches/soak.sh: cycles through the requests named by $MIX
-- ("path|body-file;path|body-file;..."), one after another on each
-- connection, and prints one machine-readable RESULT line.
local requests = {}
for spec in string.gmatch(os.getenv("MIX"), "[^;]+") do
  local path, file = spec:match("([^|]+)|(.+)")
  local f = assert(io.open(file, "rb"))
  local body = f:read("*a")
  f:close()
  table.insert(requests, wrk.format("POST", path,
    {["Content-Type"] = "application/json", ["anthropic-version"] = "2023-06-01"}, body))
end
local next = 0

function request()
  next = next % #requests + 1
  return requests[next]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
