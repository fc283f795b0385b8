"""`ringloop serve --health-port`: the readiness probe, answered on a thread of its own while
a handler blocks the worker's loop.

The handler (`serve_apps` `/block?until=PATH`) blocks the loop until the test creates PATH,
so "while blocked" and "after" are events the test makes, not durations it hopes for: the
probe is polled until its answer changes, and must change in the expected direction.
"""

from __future__ import annotations

import http.client
import json
import signal
import threading

import pytest
from serve_helpers import HOST, free_port, get, wait_until

pytestmark = pytest.mark.timeout(60)


def probe(port: int, path: str = "/healthz") -> tuple[int, dict]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "no-watch"])
def test_a_blocked_loop_fails_the_probe_naming_the_request_then_recovers(serve, tmp_path, watch):
    port, health = free_port(), free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--health-port", str(health), "--health-max-lag", "0.3"),
        *(("--watch-threshold", "0.05") if watch else ()),
    )
    server.wait_serving(1)
    status, body = probe(health)
    assert status == 200 and body["status"] == "ok" and body["lag_seconds"] < 0.3, body
    assert probe(health, "/other")[0] == 404

    release = tmp_path / "release"
    client = threading.Thread(
        target=get,
        args=(port, f"/block?until={release}"),
        kwargs={"headers": {"X-Request-ID": "stuck-1"}, "timeout": 30},
    )
    client.start()
    try:
        # The loop is blocked from the request's arrival on: the probe, which the loop never
        # touches, goes on answering, and turns to 503 once the lag passes the limit.
        status, body = wait_until(
            lambda: (r := probe(health))[0] == 503 and r, 20, "the probe to see the block"
        )
        assert body["status"] == "blocked" and body["lag_seconds"] >= 0.3, body
        if watch:
            assert body["blocked_by"]["method"] == "GET", body
            assert body["blocked_by"]["path"] == "/block", body
            assert body["blocked_by"]["request_id"] == "stuck-1", body
            assert body["blocked_by"]["client"].startswith("127.0.0.1:"), body
        else:
            assert body["blocked_by"] is None, body
        assert client.is_alive()  # still blocked: the answer came while the loop could not run
    finally:
        release.touch()
        client.join(30)
    status, body = wait_until(lambda: (r := probe(health))[0] == 200 and r, 20, "recovery")
    assert body["status"] == "ok"
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0


def test_the_probe_says_draining_during_shutdown(serve, tmp_path):
    port, health = free_port(), free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--health-port", str(health), "--timeout-drain-idle", "0"),
    )
    server.wait_serving(1)
    mark = tmp_path / "in-the-app"
    client = threading.Thread(target=get, args=(port, f"/sleep?s=3&mark={mark}"))
    client.start()
    wait_until(mark.exists, 10, "the slow request to reach the application")
    server.send(signal.SIGTERM)
    status, body = wait_until(lambda: (r := probe(health))[0] == 503 and r, 10, "draining")
    assert body == {"status": "draining"}
    client.join(20)
    assert server.wait_exit() == 0


def test_bad_health_flags_are_one_line(tmp_path):
    from test_serve_cli import run_cli

    for args, message in (
        (("--health-path", "healthz"), "--health-path: must start with /, got 'healthz'"),
        (("--health-max-lag", "0"), "--health-max-lag: must be > 0 seconds, got 0.0"),
        (("--health-port", "70000"), "--health-port: 70000 is not a TCP port (0-65535)"),
    ):
        result = run_cli("serve", "serve_apps:app", *args)
        assert (result.returncode, result.stderr) == (2, f"ringloop serve: error: {message}\n")
