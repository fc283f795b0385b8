-- HTTP pipelining for wrk, as in TechEmpower's pipeline.lua: every write carries `depth`
-- requests back to back (depth = the first argument after `--`, default 1), and wrk counts
-- each response, so requests/s is per request, not per batch.
--
--   wrk -t1 -c64 -d3s -s benchmarks/pipeline.lua http://127.0.0.1:8080/ -- 16

init = function(args)
  local depth = tonumber(args[1]) or 1
  local r = {}
  for i = 1, depth do
    r[i] = wrk.format()
  end
  req = table.concat(r)
end

request = function()
  return req
end
