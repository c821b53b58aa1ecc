-- POST /v1/execute: a mix of outcomes on deploy.production, by request number:
-- 16 of 20 PERMIT (main branch), 3 of 20 DENY (another branch, rule wrong-branch),
-- 1 of 20 SILENCE (no context.branch, which the block requires). Unique keys.
dofile(os.getenv("BENCH_WRK_DIR") .. "/common.lua")

local api_key = os.getenv("BENCH_API_KEY")

function request()
   local key = next_key()
   local slot = counter % 20
   local context
   if slot < 16 then
      context = string.format('{"branch":"main","ticket":"CHG-4821","pipeline":"gh-actions/%d"}', counter)
   elseif slot < 19 then
      context = string.format('{"branch":"feature/x","ticket":"CHG-4821","pipeline":"gh-actions/%d"}', counter)
   else
      context = string.format('{"ticket":"CHG-4821","pipeline":"gh-actions/%d"}', counter)
   end
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
