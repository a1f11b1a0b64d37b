-- wrk script: POST AdmissionReview bodies, one per line of the file named by the first script
-- argument, each to /validate then /mutate, in turn; prints one JSON line when done.
--   wrk -t1 -c8 -d10s -s tests/bench/bodies.lua https://127.0.0.1:8443 -- bodies.jsonl
local requests = {}
local n = 0
local i = 0

function init(args)
  local f = assert(io.open(args[1], "r"))
  for line in f:lines() do
    if #line > 0 then
      for _, path in ipairs({ "/validate", "/mutate" }) do
        requests[#requests + 1] = wrk.format("POST", path, { ["Content-Type"] = "application/json" }, line)
      end
    end
  end
  f:close()
  n = #requests
end

function request()
  i = i + 1
  return requests[(i - 1) % n + 1]
end

function done(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"non_2xx":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d,"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
