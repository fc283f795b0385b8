"""`ringloop serve --watch-threshold` and `--metrics-port`: a block of the loop is logged
with the request that owned it, and `/metrics` counts requests, latency, connections, loop
lag and blocks by route.

Each test starts real `ringloop serve` processes (srv_watch_app.py, whose blocking lines are
marked `# BLOCKS: <tag>`), talks to them over loopback and reads their log and `/metrics`;
the in-process test checks that without the flag no request is kept for the watch.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import subprocess
import sys
import threading
import urllib.request

import pytest
from harness_basics import free_port, wait_until
from prometheus_client.parser import text_string_to_metric_families
from srv_harness import HERE, HOST

pytestmark = [pytest.mark.timeout(120), pytest.mark.ringloop_only("a ringloop flag")]

APP_FILE = HERE / "srv_watch_app.py"
REPORT = re.compile(
    r"loop blocked (?P<ms>[\d.]+) ms by (?P<method>\S+) (?P<path>\S+) route=(?P<route>\S+) "
    r"request_id=(?P<rid>\S+) client=(?P<client>\S+) at (?P<file>\S+):(?P<line>\d+) "
    r"in (?P<func>\S+) \[\w+\](?P<rest>[^\n]*)"
)
# A block the machine made (the worker waiting for a CPU on a loaded machine) is logged too,
# with this note; no request's line is in it, so the tests below look past it.
MACHINE = "(no line of the request is to blame)"
BLOCK_MS = 150  # srv_watch_app.BLOCK


def marked_line(tag: str) -> int:
    for n, text in enumerate(APP_FILE.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# BLOCKS: {tag}"):
            return n
    raise AssertionError(f"no '# BLOCKS: {tag}' line in {APP_FILE}")


def get(port: int, path: str, request_id: str | None = None) -> tuple[int, str]:
    """One request on a connection of its own: the status and the client's address."""
    conn = http.client.HTTPConnection(HOST, port, timeout=20)
    try:
        conn.connect()
        host, cport = conn.sock.getsockname()[:2]
        conn.request("GET", path, headers={"X-Request-ID": request_id} if request_id else {})
        resp = conn.getresponse()
        resp.read()
        return resp.status, f"{host}:{cport}"
    finally:
        conn.close()


def reports_since(server, mark: int, count: int) -> list[dict[str, str]]:
    """The block reports that blame a request, logged since `mark`, once there are `count`."""

    def enough():
        found = [m.groupdict() for m in REPORT.finditer(server.log_since(mark))]
        found = [f for f in found if MACHINE not in f["rest"]]
        return found if len(found) >= count else None

    return wait_until(enough, 15, f"{count} block report(s) in the log")


def the_report(server, mark: int) -> dict[str, str]:
    """The one block report that blames a request since `mark` (all of them shown if not)."""
    found = reports_since(server, mark, 1)
    assert len(found) == 1, "\n".join(map(str, found)) + "\n" + server.log_since(mark)[-4000:]
    return found[0]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """`/metrics` as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def assert_report(rep, *, method, path, route, rid, client, tag, func):
    assert (rep["method"], rep["path"], rep["route"]) == (method, path, route), rep
    assert re.fullmatch(rid, rep["rid"]), rep
    assert rep["client"] == client, rep
    assert float(rep["ms"]) >= BLOCK_MS, rep
    assert (rep["file"], int(rep["line"]), rep["func"]) == (str(APP_FILE), marked_line(tag), func)


def test_a_block_names_its_request_and_moves_the_metrics(ringloop_kind, start_server):
    mport = free_port()
    server = start_server(
        ringloop_kind, "srv_watch_app:app", "asgi", watch_threshold=0.05, metrics_port=mport
    )
    mark = server.log_mark()
    # Blocked in the first step (run inline by the read callback, no task step yet).
    status, client = get(server.port, "/items/7", request_id="req-first-7")
    assert status == 200
    rep = the_report(server, mark)
    assert_report(
        rep,
        method="GET",
        path="/items/7",
        route="/items/{item_id}",
        rid="req-first-7",
        client=client,
        tag="first-step",
        func="item",
    )
    # Blocked after an await (a task step); no X-Request-ID: one is made from the pid.
    mark = server.log_mark()
    status, client = get(server.port, "/after/x")
    assert status == 200
    rep = the_report(server, mark)
    assert_report(
        rep,
        method="GET",
        path="/after/x",
        route="/after/{name}",
        rid=rf"{server.proc.pid:x}-\d+-1",
        client=client,
        tag="task-step",
        func="after",
    )
    # A request that does not block is not reported.
    mark = server.log_mark()
    assert get(server.port, "/fast")[0] == 200
    wait_until(lambda: '"GET /fast HTTP/1.1" 200' in server.log_since(mark), 10, "/fast logged")
    assert "loop blocked" not in server.log_since(mark)

    m = scrape(mport)
    ok = (("status", "200"),)
    assert m["ringloop_http_requests_total", ok] == 3
    assert m["ringloop_http_request_duration_seconds_count", ok] == 3
    assert m["ringloop_http_request_duration_seconds_bucket", (("le", "+Inf"), *ok)] == 3
    # Only /fast answered within 100 ms; the two blocked ones took BLOCK_MS at least.
    assert m["ringloop_http_request_duration_seconds_bucket", (("le", "0.1"), *ok)] <= 1
    assert m["ringloop_http_request_duration_seconds_sum", ok] >= 2 * BLOCK_MS / 1000
    for route in ("/items/{item_id}", "/after/{name}"):
        assert m["ringloop_http_blocks_total", (("method", "GET"), ("route", route))] == 1
    # The watch's own count, by how the thread spent the time (the kinds may differ).
    assert sum(v for (name, _), v in m.items() if name == "ringloop_watch_blocks_total") >= 2
    # The longest slice since the previous scrape: a block at least.
    assert m["ringloop_watch_loop_lag_seconds", ()] >= BLOCK_MS / 1000
    assert m["ringloop_loop_lag_seconds", ()] >= 0
    assert m["ringloop_http_requests_in_flight", ()] == 0

    # A request in flight on an open connection shows in the gauges while it waits.
    waiter = threading.Thread(target=get, args=(server.port, "/wait"))
    waiter.start()
    try:
        busy = wait_until(
            lambda: (s := scrape(mport))["ringloop_http_requests_in_flight", ()] == 1 and s,
            10,
            "the /wait request in flight",
        )
        assert busy["ringloop_http_connections", ()] >= 1
    finally:
        waiter.join(20)
    assert scrape(mport)["ringloop_http_requests_total", ok] == 4


def test_background_work_is_charged_to_its_own_request(ringloop_kind, start_server):
    """/bg's background work blocks after its response, while the same connection already
    serves the next request (in a task of its own): the block is /bg's."""
    server = start_server(ringloop_kind, "srv_watch_app:app", "asgi", watch_threshold=0.05)
    mark = server.log_mark()
    conn = http.client.HTTPConnection(HOST, server.port, timeout=20)
    try:
        conn.connect()
        host, cport = conn.sock.getsockname()[:2]
        for path, rid in (("/bg", "bg-1"), ("/wait", "wait-2")):
            conn.request("GET", path, headers={"X-Request-ID": rid})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
    finally:
        conn.close()
    rep = the_report(server, mark)
    assert_report(
        rep,
        method="GET",
        path="/bg",
        route="/bg",
        rid="bg-1",
        client=f"{host}:{cport}",
        tag="background",
        func="_late_work",
    )


def test_blocks_over_http2_name_their_streams(ringloop_kind, start_server):
    """Over HTTP/2 a block is charged to its stream's request: one blocking in its first step,
    and one blocking in a task of its own while the connection's host task runs another
    stream (`/wait`) on the same connection."""
    import httpx

    mport = free_port()
    server = start_server(
        ringloop_kind, "srv_watch_app:app", "asgi", watch_threshold=0.05, metrics_port=mport
    )
    url = f"http://{HOST}:{server.port}"
    client = r"127\.0\.0\.1:\d+"
    with httpx.Client(http1=False, http2=True, timeout=20) as c:
        mark = server.log_mark()
        r = c.get(f"{url}/items/7", headers={"x-request-id": "h2-first-7"})
        assert (r.http_version, r.status_code) == ("HTTP/2", 200)
        rep = the_report(server, mark)
        assert re.fullmatch(client, rep["client"]), rep
        rep["client"] = "-"
        assert_report(
            rep,
            method="GET",
            path="/items/7",
            route="/items/{item_id}",
            rid="h2-first-7",
            client="-",
            tag="first-step",
            func="item",
        )
        waiter = threading.Thread(target=c.get, args=(f"{url}/wait",))
        waiter.start()
        try:
            wait_until(
                lambda: scrape(mport)["ringloop_http_requests_in_flight", ()] == 1,
                10,
                "/wait in flight",
            )
            mark = server.log_mark()
            r = c.get(f"{url}/after/x", headers={"x-request-id": "h2-task-x"})
            assert (r.http_version, r.status_code) == ("HTTP/2", 200)
            rep = the_report(server, mark)
        finally:
            waiter.join(20)
    rep["client"] = "-"
    assert_report(
        rep,
        method="GET",
        path="/after/x",
        route="/after/{name}",
        rid="h2-task-x",
        client="-",
        tag="task-step",
        func="after",
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--watch-threshold", "-1"], "--watch-threshold: must be >= 0, got -1"),
        (["--watch-threshold", "0"], "--watch-threshold: must be > 0 seconds, got 0.0"),
        (["--metrics-port", "abc"], "--metrics-port: expected an integer, got 'abc'"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(argv, line):
    done = subprocess.run(
        [sys.executable, "-m", "ringloop", "serve", "srv_watch_app:app", *argv],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"ringloop serve: error: {line}\n"
    assert done.stdout == ""


def test_without_the_flag_nothing_is_reported(ringloop_kind, start_server):
    server = start_server(ringloop_kind, "srv_watch_app:app", "asgi")
    mark = server.log_mark()
    assert get(server.port, "/items/1")[0] == 200
    wait_until(lambda: '"GET /items/1 HTTP/1.1" 200' in server.log_since(mark), 10, "logged")
    assert "loop blocked" not in server.log_since(mark)


def test_without_the_flag_no_request_is_kept():
    """Off (the default), the connections keep no request for the watch; on, each keeps its
    latest one (the scope), which is what a report reads."""
    import ringloop
    from ringloop.server import Config, Server

    def kept(watch_threshold):
        port = free_port()
        server = Server(
            Config(
                app="srv_watch_app:app",
                app_dir=str(HERE),
                port=port,
                access_log=False,
                watch_threshold=watch_threshold,
            )
        )

        async def main():
            task = asyncio.ensure_future(server.serve(signals=False))
            await asyncio.to_thread(wait_until, lambda: server.started, 10, "started")
            conn = http.client.HTTPConnection(HOST, port, timeout=10)
            await asyncio.to_thread(conn.request, "GET", "/fast")
            resp = await asyncio.to_thread(conn.getresponse)
            assert resp.status == 200
            await asyncio.to_thread(resp.read)
            rows = server.state._recent_requests()
            tracking = server.state.tracking_requests
            conn.close()
            server.stop()
            await task
            return tracking, rows

        return ringloop.run(main())

    assert kept(None) == (False, [])
    tracking, rows = kept(0.05)
    assert tracking
    # The connection's latest request, which its host task ran.
    assert sorted(r[1] for r in rows) == ["hosted", "latest"]
    for _conn, kind, task, scope, cycle, _begun, _client in rows:
        assert (scope["path"], cycle) == ("/fast", 1)
        assert (task is None) == (kind == "latest")


def test_wsgi_blocks_a_thread_not_the_loop(ringloop_kind, start_server):
    """The WSGI app's 150 ms sleep runs in the pool: no block report names its line. (A loaded
    machine may still stall the loop past 50 ms somewhere else, preempted: such a report
    names whatever the loop was running, never the app's line, so it is not counted. Were
    the app called on the loop, its sleep would be reported at that line, sampled.)"""
    server = start_server(ringloop_kind, "srv_watch_app:wsgi_app", "wsgi", watch_threshold=0.05)
    mark = server.log_mark()
    # Two requests, one after the other: a report of the first one's slice (were it on the
    # loop) is logged before the loop gets to the second one, so it is in the log by then.
    for _ in range(2):
        assert get(server.port, "/")[0] == 200
    wait_until(lambda: server.log_since(mark).count('"GET / HTTP/1.1" 200') == 2, 10, "logged")
    app_line = f"{APP_FILE}:{marked_line('wsgi')} "
    blamed = [
        line
        for line in server.log_since(mark).splitlines()
        if "loop blocked" in line and (app_line in line or " in wsgi_app " in line)
    ]
    assert blamed == []


def test_a_native_handler_block_names_its_request(ringloop_kind, start_server):
    server = start_server(ringloop_kind, "srv_watch_app:native_app", "native", watch_threshold=0.05)
    mark = server.log_mark()
    status, client = get(server.port, "/block", request_id="n-1")
    assert status == 200
    rep = the_report(server, mark)
    assert_report(
        rep,
        method="GET",
        path="/block",
        route="-",
        rid="n-1",
        client=client,
        tag="native",
        func="native_app",
    )


def free_port_pair() -> int:
    """A port P with P and P+1 free, below Linux's ephemeral range (32768-60999 by default):
    P+1 next to a kernel-chosen port is too often the next client connection's."""
    import random
    import socket

    for _ in range(200):
        port = random.randrange(20000, 32000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind((HOST, port))
                b.bind((HOST, port + 1))
        except OSError:
            continue
        return port
    raise AssertionError("no two consecutive free ports in 20000-32000")


def test_each_worker_serves_its_own_metrics(ringloop_kind, start_server):
    mport = free_port_pair()
    server = start_server(ringloop_kind, "srv_watch_app:app", "asgi", workers=2, metrics_port=mport)
    sent = 12
    for _ in range(sent):
        assert get(server.port, "/fast")[0] == 200
    ports = (mport, mport + 1)
    for p in ports:
        wait_until(lambda p=p: scrape(p), 20, f"worker metrics on {p}")
    ok = (("status", "200"),)
    counts = [scrape(p).get(("ringloop_http_requests_total", ok), 0) for p in ports]
    # Every request counted once, by the worker that answered it.
    assert sum(counts) == sent, counts
