"""WebSocket endpoints of real frameworks on ringloop's server (both loop backends), each beside
uvicorn (httptools, with its `websockets` implementation), through a real client (`websockets`):

* FastAPI: a path-parameter chat endpoint exchanging JSON, a token checked before the accept
  (denied: HTTP 403), a subprotocol, the application's close code and reason reaching the
  client, the client's close code reaching `WebSocketDisconnect`;
* Starlette: a `WebSocketEndpoint` class (`on_receive`, `on_disconnect` with the client's code)
  and a live feed that pushes updates and closes.
"""

from __future__ import annotations

import json

import pytest
from srv_harness import Kind, apply_kind_markers, check_kind, wait_until
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.timeout(60)

KINDS = ("ringloop-io_uring", "ringloop-epoll", "uvicorn-httptools")


def _server(request, pool, spec: str):
    kind = Kind(request.param)
    check_kind(kind)
    apply_kind_markers(request, kind)
    return pool.get(kind, spec, "asgi")


@pytest.fixture(params=KINDS)
def fastapi_server(request, pool):
    pytest.importorskip("fastapi")
    return _server(request, pool, "srv_fw_fastapi:app")


@pytest.fixture(params=KINDS)
def starlette_server(request, pool):
    return _server(request, pool, "srv_fw_starlette:app")


def ws_url(server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def test_fastapi_chat(fastapi_server):
    with connect(
        ws_url(fastapi_server, "/ws/chat/lobby?token=secret"), subprotocols=["chat"]
    ) as ws:
        assert ws.subprotocol == "chat"
        for i in range(1, 21):
            ws.send(json.dumps({"text": f"hello {i}"}))
            assert json.loads(ws.recv(timeout=10)) == {
                "room": "lobby",
                "n": i,
                "echo": {"text": f"hello {i}"},
            }
        ws.send(json.dumps({"bye": 4321}))
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert (e.value.rcvd.code, e.value.rcvd.reason) == (4321, "bye from lobby")


def test_fastapi_denies_before_accept(fastapi_server):
    with pytest.raises(InvalidStatus) as e:
        connect(ws_url(fastapi_server, "/ws/chat/lobby?token=wrong"))
    assert e.value.response.status_code == 403


def test_fastapi_sees_the_client_close_code(fastapi_server):
    with connect(ws_url(fastapi_server, "/ws/chat/x?token=secret")) as ws:
        ws.send(json.dumps({"a": 1}))
        ws.recv(timeout=10)
        ws.close(4777)
    http = httpx.Client(base_url=fastapi_server.url(), timeout=10)
    wait_until(
        lambda: 4777 in http.get("/ws/disconnects").json(), 10, "the disconnect to reach FastAPI"
    )


def test_starlette_endpoint_class(starlette_server):
    with connect(ws_url(starlette_server, "/ws/upper")) as ws:
        ws.send("shout")
        assert ws.recv(timeout=10) == "SHOUT"
        ws.close(4555)
    http = httpx.Client(base_url=starlette_server.url(), timeout=10)

    def seen() -> bool:
        r = http.get("/results", params={"key": "ws-upper"})
        return r.status_code == 200 and r.json() == 4555

    wait_until(seen, 10, "on_disconnect's code")


def test_starlette_live_feed(starlette_server):
    with connect(ws_url(starlette_server, "/ws/feed?n=200")) as ws:
        ticks = [json.loads(ws.recv(timeout=10))["tick"] for _ in range(200)]
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert ticks == list(range(200))
    assert e.value.rcvd.code == 1000
