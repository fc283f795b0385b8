-- A POST with a body on every request, for wrk: the body is `size` bytes of "x" (the first
-- argument after `--`, default 1 MiB), Content-Length set by wrk.format. Formatted once in
-- init, like pipeline.lua, so wrk's Lua costs nothing per request.
--
--   wrk -t1 -c64 -d3s -s benchmarks/upload.lua http://127.0.0.1:8080/upload -- 1048576

init = function(args)
  local size = tonumber(args[1]) or 1048576
  wrk.method = "POST"
  wrk.body = string.rep("x", size)
  wrk.headers["Content-Type"] = "application/octet-stream"
  req = wrk.format()
end

request = function()
  return req
end
