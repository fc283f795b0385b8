"""The ASGI application the server behaviour suite runs on every server (a module of apps,
not a test module): `srv_asgi_app:app`, one route per behaviour, plain ASGI 3 with no
framework so that what the server does is all that is tested.

Routes that observe something the client cannot see (what `receive()` returned after the
response, the error a `send()` raised) keep it in `RESULTS[key]`; `GET /results?key=K`
answers it as JSON (404 while nothing is recorded), so a test polls for it.

Query parameters are read with `_q(scope, name, default)`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
import zlib
from urllib.parse import parse_qs

RESULTS: dict[str, object] = {}
# `receive`/`send` of earlier requests, by key (`/keep-callables`).
KEPT: dict[str, tuple] = {}
CHUNK = b"x" * (256 * 1024)


def _q(scope, name: str, default=None):
    values = parse_qs(scope["query_string"].decode("latin-1")).get(name)
    return values[0] if values else default


def _jsonable(value):
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


async def _answer(send, status: int = 200, body: bytes = b"", headers=None, ctype=b"text/plain"):
    h = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": h + (headers or [])})
    await send({"type": "http.response.body", "body": body})


async def _json(send, value, status: int = 200) -> None:
    await _answer(send, status, json.dumps(value).encode(), ctype=b"application/json")


async def _read_body(receive) -> tuple[bytes, list]:
    """The whole body, and the `(len(body), more_body)` of each message."""
    parts, messages = [], []
    while True:
        m = await receive()
        if m["type"] != "http.request":
            messages.append(m["type"])
            break
        parts.append(m.get("body", b""))
        messages.append((len(m.get("body", b"")), m.get("more_body", False)))
        if not m.get("more_body", False):
            break
    return b"".join(parts), messages


def _record_error(key: str, exc: BaseException) -> None:
    RESULTS[key] = {
        "error": type(exc).__name__,
        "message": str(exc),
        "oserror": isinstance(exc, OSError),
    }


def _server_state():
    """ringloop's `ServerState` of this process (for `/stats`), found once through the GC."""
    for obj in gc.get_objects():
        if type(obj).__name__ == "ServerState" and type(obj).__module__ == "ringloop._core":
            return obj
    return None


async def _lifespan(receive, send, state) -> None:
    while True:
        m = await receive()
        if m["type"] == "lifespan.startup":
            state["started_by"] = "lifespan"
            state["shared"] = {"n": 0}
            await send({"type": "lifespan.startup.complete"})
        elif m["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):  # noqa: C901 - one route per behaviour, on purpose
    if scope["type"] == "lifespan":
        await _lifespan(receive, send, scope["state"])
        return
    assert scope["type"] == "http"
    path = scope["path"]
    method = scope["method"]

    if path == "/results":
        key = _q(scope, "key")
        if key in RESULTS:
            await _json(send, RESULTS[key])
        else:
            await _answer(send, 404, b"not yet")
        return

    if path == "/stats":
        state = _server_state()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        await _json(
            send,
            {
                "tasks": len(tasks),
                "task_names": sorted(repr(t.get_coro()) for t in tasks)[:10],
                "connections": state.connections if state is not None else None,
                "in_flight": state.in_flight if state is not None else None,
                "pid": os.getpid(),
            },
        )
        return

    if path == "/scope" or path.startswith("/scope/"):
        body, _ = await _read_body(receive)
        view = {k: v for k, v in scope.items() if k not in ("state", "extensions")}
        view["state_keys"] = sorted(scope.get("state", {}).keys()) if "state" in scope else None
        view["state_started_by"] = scope.get("state", {}).get("started_by")
        view["extensions"] = sorted((scope.get("extensions") or {}).keys())
        view["tls"] = (scope.get("extensions") or {}).get("tls")
        view["body"] = body
        await _json(send, _jsonable(view))
        if _q(scope, "mutate") == "1":
            # What an application does to its scope must not reach the next request's.
            for key in ("method", "path", "raw_path", "query_string", "client", "server"):
                scope[key] = None
            scope["headers"].append((b"x-added", b"1"))
            scope["http_version"] = "9"
        return

    if path == "/state-mutate":
        # Each request gets a shallow copy of the lifespan state: a key set here must not be
        # seen by the next request; a mutated shared object is (the spec's "shallow copy").
        state = scope["state"]
        seen = {"leaked": "mine" in state, "n": state["shared"]["n"]}
        state["mine"] = True
        state["shared"]["n"] += 1
        await _json(send, seen)
        return

    if path == "/echo":
        body, messages = await _read_body(receive)
        await _answer(send, 200, body, headers=[(b"x-messages", str(len(messages)).encode())])
        return

    if path == "/echo-info":
        body, messages = await _read_body(receive)
        await _json(send, {"len": len(body), "crc": zlib.crc32(body), "messages": messages})
        return

    if path == "/duplex":
        # Echoes each body message as it arrives, before the request body has ended.
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:
            m = await receive()
            if m["type"] != "http.request":
                return
            if m.get("body"):
                await send({"type": "http.response.body", "body": m["body"], "more_body": True})
            if not m.get("more_body"):
                break
        await send({"type": "http.response.body", "body": b""})
        return

    if path == "/count":
        # Counts the body as it streams (1 GiB uploads): nothing is kept. `delay`, `every`:
        # a slow consumer, that sleeps `delay` seconds before every `every`th message.
        total, crc, messages = 0, 0, 0
        delay = float(_q(scope, "delay", "0"))
        every = int(_q(scope, "every", "1"))
        while True:
            if delay and messages % every == 0:
                await asyncio.sleep(delay)
            m = await receive()
            if m["type"] != "http.request":
                RESULTS[_q(scope, "key", "count")] = {"disconnect_after": total}
                return
            b = m.get("body", b"")
            total += len(b)
            crc = zlib.crc32(b, crc)
            messages += 1
            if not m.get("more_body"):
                break
        await _json(send, {"len": total, "crc": crc, "messages": messages})
        return

    if path == "/noread":
        # Answers without reading the request body (Expect: 100-continue must get no 100).
        await _answer(send, 200, b"did not read")
        return

    if path == "/keep-callables":
        # Keeps its `receive` and `send` for a later request on the connection (`/use-kept`).
        KEPT[_q(scope, "key")] = (receive, send)
        await _answer(send, 200, b"kept")
        return

    if path == "/use-kept":
        # Calls an earlier request's `receive` and `send`: they must not reach this request.
        old_receive, old_send = KEPT.pop(_q(scope, "key"))
        record = {"receive": (await old_receive())["type"]}
        try:
            await old_send({"type": "http.response.body", "body": b"stale"})
            record["send"] = None
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            record["send"] = type(exc).__name__
        await _json(send, record)
        return

    if path == "/receive-after-response":
        key = _q(scope, "key")
        body, messages = await _read_body(receive)
        await _answer(send, 200, b"ok")
        try:
            m = await asyncio.wait_for(receive(), 5)
            RESULTS[key] = {"after": m["type"], "messages": messages}
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            _record_error(key, exc)
        return

    if path == "/wait-disconnect":
        # Reads the body, then waits for the client to go without answering.
        key = _q(scope, "key")
        body, messages = await _read_body(receive)
        RESULTS[key + "-started"] = True
        try:
            m = await asyncio.wait_for(receive(), 10)
            RESULTS[key] = {"got": m["type"], "body_len": len(body)}
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            _record_error(key, exc)
        return

    if path == "/send-after-disconnect":
        # Streams slowly until a send raises: the client went away (ASGI 2.4: an OSError).
        key = _q(scope, "key")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for _ in range(400):
                await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
                await asyncio.sleep(0.025)
            RESULTS[key] = {"error": None}
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            _record_error(key, exc)
        return

    if path == "/path":
        body = f"{method} {scope['path']} {scope['query_string'].decode()}".encode()
        await _answer(send, 200, body)
        return

    if path == "/fixed":
        body = b"0123456789" * 10
        await _answer(send, 200, body, headers=[(b"x-fixed", b"yes")])
        return

    if path == "/head-aware":
        # What frameworks do for HEAD: the GET's content-length, and no body at all.
        body = b"0123456789" * 10
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"100")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
        return

    if path == "/stream":
        # No content-length: HTTP/1.1 gets chunked, HTTP/1.0 a body delimited by close.
        n = int(_q(scope, "n", "5"))
        size = int(_q(scope, "size", "10"))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-stream", b"1")]})
        for i in range(n):
            piece = bytes([97 + i % 26]) * size
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return

    if path == "/status":
        code = int(_q(scope, "code"))
        with_length = _q(scope, "length") == "1"
        headers = [(b"x-status", str(code).encode())]
        body = b"must not be sent" if _q(scope, "body") == "1" else b""
        if with_length:
            headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return

    if path == "/download":
        # `size` bytes with a content-length, written in 256 KiB pieces awaiting each send
        # (the server's back-pressure is what keeps memory bounded).
        size = int(_q(scope, "size"))
        headers = [(b"content-length", str(size).encode())]
        if _q(scope, "nolength") == "1":
            headers = []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        left = size
        while left > 0:
            piece = CHUNK if left >= len(CHUNK) else CHUNK[:left]
            left -= len(piece)
            await send({"type": "http.response.body", "body": piece, "more_body": left > 0})
        return

    if path == "/sleep":
        key = _q(scope, "key")
        if key:
            RESULTS[key] = "started"
        await asyncio.sleep(float(_q(scope, "s", "1")))
        await _answer(send, 200, b"slept " + _q(scope, "s", "1").encode())
        return

    if path == "/block":
        # Blocks the whole loop (the mistake the watch is for): nothing else runs meanwhile.
        time.sleep(float(_q(scope, "s", "1")))
        await _answer(send, 200, b"blocked")
        return

    if path == "/sleep-stream":
        # Head at once, then the body after the sleep (in flight across a shutdown).
        key = _q(scope, "key")
        if key:
            RESULTS[key] = "started"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"begin-", "more_body": True})
        await asyncio.sleep(float(_q(scope, "s", "1")))
        await send({"type": "http.response.body", "body": b"end"})
        return

    # -- send() misuse: the error is recorded, what the client gets is the test's ----------
    if path.startswith("/misuse/"):
        what = path.removeprefix("/misuse/")
        key = _q(scope, "key", what)
        if what == "body-before-start":
            try:
                await send({"type": "http.response.body", "body": b"early"})
            except Exception as exc:
                _record_error(key, exc)
                raise
            RESULTS[key] = {"error": None}
            return
        if what == "start-twice":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            try:
                await send({"type": "http.response.start", "status": 404, "headers": []})
                RESULTS[key] = {"error": None}
            except Exception as exc:  # noqa: BLE001 - recorded for the test
                _record_error(key, exc)
            await send({"type": "http.response.body", "body": b"first start wins"})
            return
        if what == "after-complete":
            await _answer(send, 200, b"complete")
            try:
                await send({"type": "http.response.body", "body": b"more"})
                RESULTS[key] = {"error": None}
            except Exception as exc:  # noqa: BLE001 - recorded for the test
                _record_error(key, exc)
            return
        if what == "str-header":
            # A header given as str (ASGI says bytes): the server must refuse it.
            try:
                await send(
                    {"type": "http.response.start", "status": 200, "headers": [("x-a", "b")]}
                )
                await send({"type": "http.response.body", "body": b"should not be sent"})
            except Exception as exc:
                _record_error(key, exc)
                raise
            RESULTS[key] = {"error": None}
            return
        if what == "bad-header-value":
            try:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [(b"x-a", b"one\r\nx-injected: yes")],
                    }
                )
                await send({"type": "http.response.body", "body": b"should not be sent"})
            except Exception as exc:
                _record_error(key, exc)
                raise
            RESULTS[key] = {"error": None}
            return
        if what == "unknown-type":
            try:
                await send({"type": "http.response.nonsense"})
            except Exception as exc:
                _record_error(key, exc)
                raise
            RESULTS[key] = {"error": None}
            return
        if what == "raise-before-start":
            raise RuntimeError("boom before start")
        if what == "raise-after-await":
            await asyncio.sleep(0.01)
            raise RuntimeError("boom after an await")
        if what == "raise-after-start":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"partial", "more_body": True})
            raise RuntimeError("boom after start")
        if what == "return-without-response":
            return
        if what == "return-after-start":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"partial", "more_body": True})
            return
        raise LookupError(what)

    if path == "/trailers":
        if "http.response.trailers" not in (scope.get("extensions") or {}):
            await _answer(send, 501, b"no trailers extension")
            return
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": True})
        await send({"type": "http.response.body", "body": b"with trailers"})
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")]})
        return

    if path == "/pathsend":
        if "http.response.pathsend" not in (scope.get("extensions") or {}):
            await _answer(send, 501, b"no pathsend extension")
            return
        file = _q(scope, "file")
        size = os.path.getsize(file)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/octet-stream")],
            }
        )
        await send({"type": "http.response.pathsend", "path": file})
        RESULTS[_q(scope, "key", "pathsend")] = {"size": size}
        return

    await _answer(send, 404, b"no route " + path.encode("utf-8", "replace"))


# A second app for --root-path: answers with path, raw_path and root_path.
async def root_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = json.dumps(
        {
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode("latin-1"),
            "root_path": scope["root_path"],
        }
    ).encode()
    await _answer(send, 200, body, ctype=b"application/json")
