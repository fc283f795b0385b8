"""Real frameworks on ringloop's server (both loop backends), each beside its reference —
uvicorn (httptools) for the ASGI ones, gunicorn's threaded worker for the WSGI ones — with a
real client (httpx):

* one contract every framework app implements (`srv_fw_*`): `GET /json`, `POST /echo-json`,
  `POST /form` (urlencoded), `POST /upload` (multipart, a 3 MB file), `GET /stream` (a
  streamed response), `GET /error` (an exception: 500), an unknown route (404), many requests
  on kept-alive connections and at once — for FastAPI, Starlette, Litestar, Django (ASGI and
  WSGI) and Flask;
* FastAPI's validation (422) and sync endpoints;
* Starlette's `FileResponse` (HEAD, Range), `BackgroundTasks` (the response does not wait for
  them), `request.is_disconnected()`, a `StreamingResponse` whose client goes away.
"""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest
from srv_harness import (
    GUNICORN,
    Kind,
    apply_kind_markers,
    check_kind,
    exchange,
    new_key,
    request,
    wait_until,
)

httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.timeout(90)

ASGI_FW = {
    "starlette": "srv_fw_starlette:app",
    "fastapi": "srv_fw_fastapi:app",
    "litestar": "srv_fw_litestar:app",
    "django-asgi": "srv_fw_django:asgi",
}
WSGI_FW = {"flask": "srv_fw_flask:app", "django-wsgi": "srv_fw_django:wsgi"}
RING = ("ringloop-io_uring", "ringloop-epoll")
FW_PARAMS = [
    (fw, spec, "asgi", kind)
    for fw, spec in ASGI_FW.items()
    for kind in (*RING, "uvicorn-httptools")
] + [(fw, spec, "wsgi", kind) for fw, spec in WSGI_FW.items() for kind in (*RING, GUNICORN)]
IMPORTS = {
    "starlette": "starlette",
    "fastapi": "fastapi",
    "litestar": "litestar",
    "django-asgi": "django",
    "django-wsgi": "django",
    "flask": "flask",
}


class Fw:
    def __init__(self, name: str, server) -> None:
        self.name = name
        self.server = server
        self.client = httpx.Client(base_url=server.url(), timeout=20)

    def close(self) -> None:
        self.client.close()


def _fw(request, pool, fw, spec, interface, kind_name) -> Fw:
    pytest.importorskip(IMPORTS[fw])
    kind = Kind(kind_name)
    check_kind(kind)
    apply_kind_markers(request, kind)
    server = pool.get(kind, spec, interface)
    return Fw(fw.split("-")[0], server)


@pytest.fixture(params=FW_PARAMS, ids=[f"{p[0]}-{p[3]}" for p in FW_PARAMS])
def fw(request, pool):
    f = _fw(request, pool, *request.param)
    yield f
    f.close()
    assert f.server.alive(), f"{f.server.kind} died:\n{f.server.log()[-3000:]}"


@pytest.fixture
def starlette_app(request, pool, kind_name):
    f = _fw(request, pool, "starlette", ASGI_FW["starlette"], "asgi", kind_name)
    yield f
    f.close()


@pytest.fixture
def fastapi_app(request, pool, kind_name):
    f = _fw(request, pool, "fastapi", ASGI_FW["fastapi"], "asgi", kind_name)
    yield f
    f.close()


ON_ASGI_KINDS = pytest.mark.parametrize("kind_name", (*RING, "uvicorn-httptools"))


# -- the contract ----------------------------------------------------------------------------------


def test_json(fw):
    r = fw.client.get("/json", params={"q": "1"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == {"framework": fw.name, "ok": True, "query": {"q": "1"}}


def test_echo_json(fw):
    item = {"name": "widget \u2713", "price": 2.5, "tags": ["a", "b"]}
    r = fw.client.post("/echo-json", json=item)
    assert r.status_code == 200
    assert r.json() == item


def test_form(fw):
    r = fw.client.post("/form", data={"a": "1", "b": "x y&z=\u00e9"})
    assert r.status_code == 200
    assert r.json() == {"a": "1", "b": "x y&z=\u00e9"}


def test_multipart_upload(fw):
    content = random.Random(5).randbytes(3 * 1024 * 1024)
    r = fw.client.post(
        "/upload",
        files={"file": ("data.bin", content, "application/octet-stream")},
        data={"note": "h\u00e9llo"},
    )
    assert r.status_code == 200, r.text[:500]
    assert r.json() == {
        "filename": "data.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "note": "h\u00e9llo",
    }


def test_streaming_response(fw):
    r = fw.client.get("/stream", params={"n": "200"})
    assert r.status_code == 200
    assert r.text == "".join(f"line {i}\n" for i in range(200))
    assert r.headers.get("transfer-encoding") == "chunked"


def test_unknown_route_is_404(fw):
    assert fw.client.get("/no/such/route").status_code == 404


@pytest.mark.reference_lax(
    "Starlette's ServerErrorMiddleware sends the 500 and then re-raises; uvicorn then closes "
    "the kept-alive connection without having said `connection: close`, so the client's next "
    "request on it is reset (ringloop keeps the connection: the response was complete)",
    kinds=("uvicorn-httptools",),
    ids=("starlette", "fastapi"),
)
def test_exception_is_500_and_the_server_goes_on(fw):
    r = fw.client.get("/error")
    assert r.status_code == 500
    assert fw.client.get("/json", params={"q": "1"}).status_code == 200


def test_many_requests_on_kept_alive_connections(fw):
    for i in range(30):
        r = fw.client.post("/echo-json", json={"name": f"n{i}", "price": i, "tags": []})
        assert r.json()["name"] == f"n{i}"


def test_concurrent_requests(fw):
    async def run():
        async with httpx.AsyncClient(base_url=fw.server.url(), timeout=30) as client:
            rs = await asyncio.gather(
                *(client.get("/json", params={"q": str(i)}) for i in range(40))
            )
        return [r.json()["query"]["q"] for r in rs]

    assert asyncio.run(run()) == [str(i) for i in range(40)]


# -- FastAPI ---------------------------------------------------------------------------------------


@ON_ASGI_KINDS
def test_fastapi_validation(fastapi_app):
    c = fastapi_app.client
    assert c.get("/items/5", params={"limit": "3"}).json() == {"item_id": 5, "limit": 3}
    assert c.get("/items/abc").status_code == 422
    r = c.post("/echo-json", json={"name": "x"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "price"]
    assert (
        c.post(
            "/echo-json", content=b"{not json", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )


@ON_ASGI_KINDS
def test_fastapi_sync_endpoint(fastapi_app):
    assert fastapi_app.client.get("/sync").json() == {"sync": True}


# -- Starlette -------------------------------------------------------------------------------------


def _result(server, key, timeout=15.0):
    def recorded():
        r = exchange(
            server, request("GET", f"/results?key={key}", headers=[("Connection", "close")])
        )
        return r.json() if r.status == 200 else None

    return wait_until(recorded, timeout, f"the app to record {key}")


@ON_ASGI_KINDS
def test_starlette_file_response(starlette_app, tmp_path):
    data = bytes(range(256)) * 4000
    path = tmp_path / "page.bin"
    path.write_bytes(data)
    c = starlette_app.client
    r = c.get("/file", params={"path": str(path)})
    assert r.status_code == 200
    assert r.content == data
    assert r.headers["content-length"] == str(len(data))
    assert "etag" in r.headers and "last-modified" in r.headers
    h = c.head("/file", params={"path": str(path)})
    assert h.status_code == 200 and h.content == b""
    assert h.headers["content-length"] == str(len(data))
    part = c.get("/file", params={"path": str(path)}, headers={"Range": "bytes=1000-1999"})
    assert part.status_code == 206
    assert part.content == data[1000:2000]


@ON_ASGI_KINDS
def test_starlette_event_stream_head_before_its_first_event(starlette_app, tmp_path):
    # StreamingResponse sends http.response.start from a task of its own, then waits for the
    # generator: the status and headers must reach the client before the first event, which
    # the application holds until `release` exists — made only once the head is here.
    release = tmp_path / "release"
    with httpx.Client(base_url=starlette_app.server.url(), timeout=10) as own:
        with own.stream("GET", "/late-events", params={"until": str(release)}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            release.touch()
            assert r.read() == b"data: first\n\n"


@ON_ASGI_KINDS
def test_starlette_background_tasks_run_after_the_response(starlette_app):
    key = new_key()
    c = starlette_app.client
    # The background job waits until released: the response must arrive before that.
    with httpx.Client(base_url=starlette_app.server.url(), timeout=10) as own:
        r = own.get("/background", params={"key": key})
        assert r.text == "sent before the background job"
    c.get("/release", params={"key": key})
    assert _result(starlette_app.server, key) == "done"


@ON_ASGI_KINDS
def test_starlette_is_disconnected(starlette_app):
    key = new_key()
    server = starlette_app.server
    conn = server.raw()
    conn.send(request("GET", f"/watch-disconnect?key={key}"))
    _result(server, key + "-started")
    conn.close()
    assert _result(server, key) == "disconnected"


@ON_ASGI_KINDS
def test_starlette_streaming_response_stops_when_the_client_goes(starlette_app):
    key = new_key()
    server = starlette_app.server
    conn = server.raw()
    conn.send(request("GET", f"/endless?key={key}"))
    assert conn.read_head().status == 200
    conn.reset()
    assert _result(server, key) == "generator finished"
