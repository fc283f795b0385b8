"""Starlette (the suite's framework apps share one contract, see test_server_frameworks):
`/json`, `/echo-json`, `/form`, `/upload`, `/stream`, `/error`, unknown routes 404; and
Starlette's own: `FileResponse` (`/file`), `BackgroundTasks` (`/background`),
`request.is_disconnected()` (`/watch-disconnect`), a `StreamingResponse` whose client goes
away (`/endless`); WebSocket: a `WebSocketEndpoint` (`/ws/upper`, its `on_disconnect` code
recorded) and a live feed that pushes and closes (`/ws/feed`). `/results?key=K` answers what a
route recorded (404 until then).
"""

from __future__ import annotations

import asyncio
import hashlib
import os

from starlette.applications import Starlette
from starlette.background import BackgroundTasks
from starlette.endpoints import WebSocketEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

RESULTS: dict[str, object] = {}
RELEASE: dict[str, asyncio.Event] = {}


async def json_view(request: Request):
    return JSONResponse({"framework": "starlette", "ok": True, "query": dict(request.query_params)})


async def echo_json(request: Request):
    return JSONResponse(await request.json())


async def form(request: Request):
    data = await request.form()
    return JSONResponse({k: v for k, v in data.items()})


async def upload(request: Request):
    async with request.form() as data:
        f = data["file"]
        content = await f.read()
        return JSONResponse(
            {
                "filename": f.filename,
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
                "note": data["note"],
            }
        )


async def stream(request: Request):
    n = int(request.query_params.get("n", "5"))

    async def lines():
        for i in range(n):
            yield f"line {i}\n"
            await asyncio.sleep(0)

    return StreamingResponse(lines(), media_type="text/plain")


async def late_events(request: Request):
    # Server-sent events whose first event comes only once the file `until` exists (the test
    # makes it after it has the head): the client must see the head first.
    until = request.query_params["until"]

    async def events():
        while not os.path.exists(until):
            await asyncio.sleep(0.005)
        yield "data: first\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def error(request: Request):
    raise RuntimeError("starlette boom")


async def file(request: Request):
    return FileResponse(request.query_params["path"])


async def results(request: Request):
    key = request.query_params["key"]
    if key not in RESULTS:
        return PlainTextResponse("not yet", status_code=404)
    return JSONResponse(RESULTS[key])


async def _background_job(key: str) -> None:
    # Waits until the test releases it: the response must not wait for it.
    event = RELEASE.setdefault(key, asyncio.Event())
    await asyncio.wait_for(event.wait(), 20)
    RESULTS[key] = "done"


async def background(request: Request):
    key = request.query_params["key"]
    RELEASE.setdefault(key, asyncio.Event())
    tasks = BackgroundTasks()
    tasks.add_task(_background_job, key)
    return PlainTextResponse("sent before the background job", background=tasks)


async def release(request: Request):
    RELEASE.setdefault(request.query_params["key"], asyncio.Event()).set()
    return PlainTextResponse("released")


async def watch_disconnect(request: Request):
    key = request.query_params["key"]
    RESULTS[key + "-started"] = True
    for _ in range(400):
        if await request.is_disconnected():
            RESULTS[key] = "disconnected"
            return PlainTextResponse("gone")
        await asyncio.sleep(0.05)
    RESULTS[key] = "never saw the disconnect"
    return PlainTextResponse("timeout")


async def endless(request: Request):
    key = request.query_params["key"]

    async def forever():
        try:
            i = 0
            while True:
                yield b"tick %d\n" % i
                i += 1
                await asyncio.sleep(0.01)
        finally:
            RESULTS[key] = "generator finished"

    return StreamingResponse(forever(), media_type="text/plain")


class Upper(WebSocketEndpoint):
    encoding = "text"

    async def on_receive(self, websocket: WebSocket, data: str) -> None:
        await websocket.send_text(data.upper())

    async def on_disconnect(self, websocket: WebSocket, close_code: int) -> None:
        RESULTS["ws-upper"] = close_code


async def feed(websocket: WebSocket):
    """A live dashboard: `n` updates pushed without being asked, then a normal close."""
    await websocket.accept()
    n = int(websocket.query_params.get("n", "50"))
    for i in range(n):
        await websocket.send_json({"tick": i})
        await asyncio.sleep(0)
    await websocket.close()


app = Starlette(
    routes=[
        Route("/json", json_view),
        WebSocketRoute("/ws/upper", Upper),
        WebSocketRoute("/ws/feed", feed),
        Route("/echo-json", echo_json, methods=["POST"]),
        Route("/form", form, methods=["POST"]),
        Route("/upload", upload, methods=["POST"]),
        Route("/stream", stream),
        Route("/late-events", late_events),
        Route("/error", error),
        Route("/file", file),
        Route("/results", results),
        Route("/background", background),
        Route("/release", release),
        Route("/watch-disconnect", watch_disconnect),
        Route("/endless", endless),
    ]
)
