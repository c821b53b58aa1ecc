-- Shared by the wrk scripts: per-thread ids and a done() hook that prints one JSON line.
-- bench/run.py parses the line that starts with "BENCH_JSON ".

local thread_count = 0

function setup(thread)
   thread_count = thread_count + 1
   thread:set("thread_id", thread_count)
end

-- A value unique across threads and across runs (BENCH_RUN_ID is set per wrk run).
run_id = os.getenv("BENCH_RUN_ID") or tostring(os.time())
counter = 0

function next_key()
   counter = counter + 1
   return string.format("bench-%s-%d-%d", run_id, thread_id or 0, counter)
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
      '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
      '"latency_us": {"min": %d, "mean": %.1f, "max": %d, "stdev": %.1f, ' ..
      '"p50": %d, "p90": %d, "p99": %d, "p999": %d}}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.min, latency.mean, latency.max, latency.stdev,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9)))
end

-- A deploy.production request with ``context`` (a JSON object's text) and the bench's
-- usual payload, under Idempotency-Key ``key``.
function execute_request(api_key, key, context)
   local body = '{"surface":"deploy.production","action":"deploy","actor":"release-bot",' ..
      '"context":' .. context .. ',' ..
      '"payload":{"service":"checkout-api","image":"registry.example/checkout-api@sha256:' ..
      '9f2c1e7ab04d33c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6",' ..
      '"replicas":6,"region":"eu-west-1","commit":"4f9d2a1c","canary":true}}'
   return wrk.format("POST", "/v1/execute", {
      ["Authorization"] = "Bearer " .. api_key,
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key,
   }, body)
end
