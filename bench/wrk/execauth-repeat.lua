-- POST /v1/execute: the same request as execauth.lua, but every Idempotency-Key is one
-- of 1,000 (BENCH_KEY_SET names the set, the same for the warm-up and the measured
-- run), so after the warm-up every request is an idempotent repeat of a stored
-- decision: what a repeat costs, against execauth.lua's new decisions.
dofile(os.getenv("BENCH_WRK_DIR") .. "/common.lua")

local api_key = os.getenv("BENCH_API_KEY")
local key_set = os.getenv("BENCH_KEY_SET")
local context = '{"branch":"main","ticket":"CHG-4821","pipeline":"gh-actions/1"}'

function request()
   counter = counter + 1
   return execute_request(api_key, string.format("repeat-%s-%d", key_set, counter % 1000), context)
end
