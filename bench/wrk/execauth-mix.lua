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
   return execute_request(api_key, key, context)
end
