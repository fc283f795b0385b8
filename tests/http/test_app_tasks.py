"""What an ASGI application sees of the task it runs in, on ringloop and on uvicorn alike.

ringloop runs a connection's requests in one task per connection (src/http/host.rs), uvicorn in
a task per request; an application must not be able to tell in the ways that matter: it runs
in a real `asyncio.Task`, a `ContextVar` it sets is never seen by the next request on the same
connection, `asyncio.timeout`, cancellation and anyio's cancel scopes and task groups behave,
work it goes on with after its response does not hold up the next request, and a graceful
shutdown waits for that work. The same requests go to both servers (apps in `task_apps.py`).
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import time

import pytest
from serve_helpers import HOST, PYTHON, free_port, wait_until

SERVERS = ["ringloop", "ringloop-epoll", "uvicorn"]


def _command(server: str, app: str, port: int) -> list[str]:
    if server == "uvicorn":
        pytest.importorskip("uvicorn")
        # A plain function is ASGI 2 to uvicorn's auto-detection: say it is ASGI 3.
        return [PYTHON, "-m", "uvicorn", app, "--port", str(port), "--interface", "asgi3"]
    backend = ["--loop-backend", "epoll"] if server == "ringloop-epoll" else []
    return [PYTHON, "-m", "ringloop", "serve", app, "--port", str(port), *backend]


@pytest.fixture(params=SERVERS)
def server(request, serve):
    """`server(app="task_apps:app")` starts the parametrized server and returns (port, Served)."""

    def start(app: str = "task_apps:app"):
        port = free_port()
        served = serve(argv=_command(request.param, app, port))

        def answers() -> bool:
            with socket.create_connection((HOST, port), timeout=1):
                return True

        wait_until(answers, 20, f"{request.param} listening")
        return port, served

    return start


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, dict]:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    return resp.status, json.loads(body) if resp.status == 200 else {}


def test_each_request_runs_in_a_task(server):
    port, _ = server()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    for _ in range(3):
        assert _get(conn, "/same-task") == (200, {"is_task": True, "same_after_await": True})


def test_the_connection_task_is_named_after_its_request(server, request):
    # ringloop's own: `python -m asyncio ps/pstree` (3.14) then tell which request a
    # connection's task runs. uvicorn names its tasks Task-N.
    if request.node.callspec.params["server"] == "uvicorn":
        pytest.skip("ringloop's naming; uvicorn's tasks are Task-N")
    port, _ = server()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    for method, path in [
        ("GET", "/task-name"),
        ("GET", "/task-name"),
        ("POST", "/task-name"),
        ("GET", "/task-name/other"),
    ]:
        conn.request(method, path)
        resp = conn.getresponse()
        facts = json.loads(resp.read())
        want = f"{method} {path}"
        assert facts == {"is_task": True, "name": want, "name_after_await": want}


def test_a_contextvar_never_leaks_into_the_next_request_on_the_connection(server):
    port, _ = server()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    for value in ("a", "b", "c"):
        status, facts = _get(conn, f"/contextvar?{value}")
        assert status == 200
        assert facts["before"] == "unset"  # not the previous request's value
        assert facts["after_await"] == value


def test_asyncio_timeout_and_cancellation(server):
    port, _ = server()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    status, facts = _get(conn, "/timeout")
    assert (status, facts["timed_out"], facts["cancelling"]) == (200, True, 0)
    status, facts = _get(conn, "/cancel-caught")
    assert (status, facts["cancelled"], facts["cancelling"]) == (200, True, 0)
    # A timeout after a cancel its request caught: no cancel left over.
    status, facts = _get(conn, "/timeout")
    assert (status, facts["timed_out"], facts["cancelling"]) == (200, True, 0)


def test_an_uncaught_cancel_is_a_500_and_the_server_goes_on(server):
    port, served = server()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    conn.request("GET", "/cancel-uncaught")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 500
    fresh = http.client.HTTPConnection(HOST, port, timeout=10)
    for _ in range(2):
        assert _get(fresh, "/same-task")[0] == 200
    status, facts = _get(fresh, "/timeout")
    assert (status, facts["cancelling"]) == (200, 0)


def test_anyio_cancel_scopes_and_task_groups(server):
    port, _ = server()
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    for _ in range(2):
        status, facts = _get(conn, "/anyio")
        assert status == 200
        assert facts["moved_on"] is True
        assert facts["group"] == [0, 1, 2]


def test_work_after_the_response_does_not_hold_up_the_next_request(server, tmp_path):
    """/background goes on until /release runs: were the next request on the connection
    queued behind it, /release would never be answered."""
    port, _ = server()
    marker = tmp_path / "finished"
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    assert _get(conn, f"/background?{marker}")[0] == 200
    assert _get(conn, "/release")[0] == 200
    wait_until(marker.exists, 10, "the background work to finish")
    # And the connection goes on serving.
    assert _get(conn, "/same-task")[0] == 200


def test_graceful_shutdown_waits_for_work_after_the_response(server, tmp_path):
    port, served = server()
    marker = tmp_path / "finished"
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    assert _get(conn, f"/background-slow?{marker}")[0] == 200
    conn.close()
    served.send(signal.SIGTERM)
    # uvicorn re-raises the signal once it has shut down gracefully.
    assert served.wait_exit() in (0, -signal.SIGTERM)
    assert marker.exists(), served.log()
    assert "Task was destroyed but it is pending" not in served.log()


def test_an_app_may_return_any_awaitable(server):
    port, _ = server("task_apps:awaitable_app")
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    assert _get(conn, "/same-task") == (200, {"is_task": True, "same_after_await": True})


def test_no_task_is_left_pending_when_connections_come_and_go(server):
    port, served = server()
    for path in ("/same-task", "/cancel-caught", "/contextvar?x", "/anyio"):
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        assert _get(conn, path)[0] == 200
        conn.close()
    time.sleep(0.2)  # the connections' closes reach the server
    served.send(signal.SIGINT)
    assert served.wait_exit() in (0, -signal.SIGINT)
    log = served.log()
    assert "Task was destroyed but it is pending" not in log
    assert "Task exception was never retrieved" not in log
