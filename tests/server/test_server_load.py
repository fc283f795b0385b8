"""Load, on ringloop's server (both loop backends) and uvicorn (httptools) side by side: what
must still hold when many clients come at once. Nothing here measures speed.

* 10,000 concurrent keep-alive connections, each served once, then all idle at the same
  time (the server holds every one, counted in /proc), then each served again; afterwards
  the server holds none;
* requests of every shape (GET, POST with a body, chunked responses) from wrk: no error,
  no non-2xx, and resident memory does not grow between a first and a second run, nor does
  the number of tasks — the quick form. With RINGLOOP_LONG=1 the same runs go on until one
  million requests were served (`test_rss_after_a_million_requests`).
"""

from __future__ import annotations

import asyncio
import re
import subprocess

import pytest
from srv_harness import (
    LONG,
    Kind,
    MiB,
    apply_kind_markers,
    check_kind,
    ensure_wrk,
    raise_nofile,
    stats,
    wait_until,
)

pytestmark = pytest.mark.timeout(600 if LONG else 180)

KINDS3 = ("ringloop-io_uring", "ringloop-epoll", "uvicorn-httptools")
CONNECTIONS = 10_000


@pytest.fixture(params=KINDS3)
def kind(request):
    k = Kind(request.param)
    check_kind(k)
    apply_kind_markers(request, k)
    return k


# -- 10,000 connections ----------------------------------------------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    assert m, head
    status = head.split(b" ", 2)[1]
    assert status == b"200", head
    return await reader.readexactly(int(m[1]))


async def _ten_thousand(server) -> None:
    port = server.port
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def open_one():
        return await asyncio.open_connection("127.0.0.1", port)

    for start in range(0, CONNECTIONS, 500):
        conns += await asyncio.gather(*(open_one() for _ in range(min(500, CONNECTIONS - start))))

    async def exchange(i: int, rw) -> None:
        reader, writer = rw
        writer.write(b"GET /path?i=%d HTTP/1.1\r\nHost: a\r\n\r\n" % i)
        body = await _read_response(reader)
        assert body == b"GET /path i=%d" % i

    async def round_(offset: int) -> None:
        for start in range(0, CONNECTIONS, 1000):
            await asyncio.gather(
                *(exchange(offset + i, conns[i]) for i in range(start, start + 1000))
            )

    try:
        await round_(0)
        # Every connection idle at once, and all held by the server.
        held = await asyncio.to_thread(
            wait_until,
            lambda: server.tcp_connections() >= CONNECTIONS or None,
            30,
            f"{server.kind} to hold {CONNECTIONS} idle connections",
        )
        assert held
        await round_(CONNECTIONS)
    finally:
        for _, writer in conns:
            writer.transport.abort()  # RST: no TIME_WAIT left to eat the port range
        await asyncio.sleep(0)


def test_ten_thousand_idle_keep_alive_connections_all_served(kind, start_server):
    if raise_nofile(CONNECTIONS + 2000) < CONNECTIONS + 1000:
        pytest.skip("the open-file limit is below 11,000")
    server = start_server(kind, "srv_asgi_app:app", timeout_keep_alive=120, access_log=False)
    try:  # the client's own loop: uvloop when it is there (a faster client), else asyncio
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    run(_ten_thousand(server))
    server.wait_connections(0, timeout=30)
    assert server.alive()


# -- wrk: no errors, no growth ---------------------------------------------------------------------

# Three shapes of request in turn; sends nothing new after `stop_after` seconds (wrk's Lua
# has os.time()), so nothing is in flight when wrk's duration ends and every count is exact.
WRK_SCRIPT = r"""
local stop_at = nil
local n = 0
local body = string.rep("b", 1024)
function init(args)
  stop_at = os.time() + tonumber(args[1])
end
function delay()
  if os.time() >= stop_at then return 600000 end
  return 0
end
function request()
  n = n + 1
  local k = n % 3
  if k == 0 then
    return wrk.format("GET", "/path?i=" .. n)
  elseif k == 1 then
    return wrk.format("POST", "/echo", {["Content-Length"] = "1024"}, body)
  else
    return wrk.format("GET", "/stream?n=3&size=100")
  end
end
"""


def _wrk(server, tmp_path, seconds: int) -> dict:
    script = tmp_path / "shapes.lua"
    script.write_text(WRK_SCRIPT)
    cmd = [
        ensure_wrk(),
        "-t1",
        "-c32",
        f"-d{seconds + 1}s",
        "-s",
        str(script),
        server.url("/"),
        "--",
        str(seconds),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    m = re.search(r"(\d+) requests in", out)
    assert m, out
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    assert errors is None, out
    assert non2xx is None, out
    return {"requests": int(m[1]), "text": out}


def _served(server, tmp_path, rounds_until: int, seconds: int) -> tuple[int, list[int]]:
    total = 0
    rss = []
    while total < rounds_until:
        total += _wrk(server, tmp_path, seconds)["requests"]
        rss.append(server.rss())
    return total, rss


def test_no_growth_under_wrk(kind, start_server, tmp_path):
    server = start_server(kind, "srv_asgi_app:app", access_log=False, log_level="warning")
    base_tasks = stats(server)["tasks"]
    first = _wrk(server, tmp_path, 2)["requests"]
    after_first = server.rss()
    second = _wrk(server, tmp_path, 2)["requests"]
    after_second = server.rss()
    assert first > 0 and second > 0
    grown = after_second - after_first
    assert grown < 8 * MiB, f"grew {grown / MiB:.1f} MiB over {second} more requests"
    # The connections wrk closed end in the server's loop a few iterations after their EOF
    # (a natively accepted /stats may be answered before that): their tasks must all end.
    server.wait_connections(0)
    wait_until(lambda: stats(server)["tasks"] == base_tasks, 15, "the connections' tasks to end")


@pytest.mark.skipif(not LONG, reason="long: RINGLOOP_LONG=1")
def test_rss_after_a_million_requests(kind, start_server, tmp_path):
    server = start_server(kind, "srv_asgi_app:app", access_log=False, log_level="warning")
    warm, rss = _served(server, tmp_path, 100_000, 5)
    baseline = rss[-1]
    total, rss = _served(server, tmp_path, 1_000_000 - warm, 10)
    grown = max(rss) - baseline
    print(f"{kind}: {warm + total} requests, RSS {baseline / MiB:.1f} -> {rss[-1] / MiB:.1f} MiB")
    assert grown < 20 * MiB, f"grew {grown / MiB:.1f} MiB over {total} requests"
    server.wait_connections(0)
