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
