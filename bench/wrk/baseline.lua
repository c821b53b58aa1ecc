-- The plain-stack baseline: the same body and headers as execauth.lua, to a minimal
-- Starlette handler (bench/baseline_app.py) that decodes the JSON and answers JSON.
dofile(os.getenv("BENCH_WRK_DIR") .. "/common.lua")

function request()
   local key = next_key()
   local body = string.format(
      '{"surface":"deploy.production","action":"deploy","actor":"release-bot",' ..
      '"context":{"branch":"main","ticket":"CHG-4821","pipeline":"gh-actions/%d"},' ..
      '"payload":{"service":"checkout-api","image":"registry.example/checkout-api@sha256:' ..
      '9f2c1e7ab04d33c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6",' ..
      '"replicas":6,"region":"eu-west-1","commit":"4f9d2a1c","canary":true}}', counter)
   return wrk.format("POST", "/v1/execute", {
      ["Authorization"] = "Bearer service_live_baseline",
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key,
   }, body)
end
