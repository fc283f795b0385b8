"""FastAPI (the suite's framework contract, see test_server_frameworks): `/json`, `/echo-json`
(a pydantic model: 422 on a bad body), `/form`, `/upload` (`UploadFile`), `/stream`, `/error`,
unknown routes 404; `/items/{item_id}` (path and query validation); `/ws/chat/{room}`, a WebSocket
endpoint (JSON messages, a token checked before the accept), and `/ws/disconnects`.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Annotated

from fastapi import FastAPI, File, Form, UploadFile, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

app = FastAPI()
DISCONNECTS: list[int] = []


class Item(BaseModel):
    name: str
    price: float
    tags: list[str] = []


@app.get("/json")
async def json_view(q: str | None = None):
    return {"framework": "fastapi", "ok": True, "query": {"q": q} if q else {}}


@app.post("/echo-json")
async def echo_json(item: Item):
    return item


@app.get("/items/{item_id}")
async def get_item(item_id: int, limit: int = 10):
    return {"item_id": item_id, "limit": limit}


@app.post("/form")
async def form(a: Annotated[str, Form()], b: Annotated[str, Form()]):
    return {"a": a, "b": b}


@app.post("/upload")
async def upload(file: Annotated[UploadFile, File()], note: Annotated[str, Form()]):
    content = await file.read()
    return {
        "filename": file.filename,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "note": note,
    }


@app.get("/stream")
async def stream(n: int = 5):
    async def lines():
        for i in range(n):
            yield f"line {i}\n"
            await asyncio.sleep(0)

    return StreamingResponse(lines(), media_type="text/plain")


@app.get("/error")
async def error():
    raise RuntimeError("fastapi boom")


@app.get("/sync")
def sync_view():
    # A plain def: FastAPI runs it in its thread pool.
    return {"sync": True}


@app.websocket("/ws/chat/{room}")
async def chat(websocket: WebSocket, room: str, token: str | None = None):
    """A chat-like endpoint: JSON in, JSON out with a running count; `{"bye": code}` closes."""
    if token != "secret":
        await websocket.close(code=4401, reason="bad token")
        return
    await websocket.accept(
        subprotocol="chat" if "chat" in websocket.scope["subprotocols"] else None
    )
    n = 0
    try:
        while True:
            msg = await websocket.receive_json()
            if "bye" in msg:
                await websocket.close(code=msg["bye"], reason=f"bye from {room}")
                return
            n += 1
            await websocket.send_json({"room": room, "n": n, "echo": msg})
    except WebSocketDisconnect as exc:
        DISCONNECTS.append(exc.code)


@app.get("/ws/disconnects")
async def disconnects():
    return DISCONNECTS
