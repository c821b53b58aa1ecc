-- Cerbos POST /api/check/resources: the request comparable to execauth.lua's
-- (principal release-bot, a deployment on main with a change ticket, action deploy),
-- which bench/cerbos/policies/deployment.yaml allows. Unique requestId per request.
dofile(os.getenv("BENCH_WRK_DIR") .. "/common.lua")

function request()
   local key = next_key()
   local body = string.format(
      '{"requestId":"%s","principal":{"id":"release-bot","roles":["release"],' ..
      '"attr":{"team":"release"}},"resources":[{"actions":["deploy"],"resource":' ..
      '{"kind":"deployment","id":"checkout-api","attr":{"branch":"main","ticket":"CHG-4821",' ..
      '"pipeline":"gh-actions/%d","service":"checkout-api","image":"registry.example/checkout-api' ..
      '@sha256:9f2c1e7ab04d33c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6",' ..
      '"replicas":6,"region":"eu-west-1","commit":"4f9d2a1c","canary":true}}}]}', key, counter)
   return wrk.format("POST", "/api/check/resources", {
      ["Content-Type"] = "application/json",
   }, body)
end
