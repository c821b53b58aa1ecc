-- POST /v1/execute: a deploy.production request that bench/policy.yaml PERMITs,
-- with a unique Idempotency-Key per request (so every request is evaluated,
-- signed and committed, never answered from the idempotency cache).
dofile(os.getenv("BENCH_WRK_DIR") .. "/common.lua")

local api_key = os.getenv("BENCH_API_KEY")

function request()
   local key = next_key()
   local context = string.format(
      '{"branch":"main","ticket":"CHG-4821","pipeline":"gh-actions/%d"}', counter)
   return execute_request(api_key, key, context)
end
