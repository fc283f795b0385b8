"""Litestar (the suite's framework contract, see test_server_frameworks): `/json`,
`/echo-json`, `/form`, `/upload`, `/stream`, `/error`, unknown routes 404.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from litestar import Litestar, Request, get, post
from litestar.response import Stream


@get("/json")
async def json_view(request: Request) -> dict[str, Any]:
    return {"framework": "litestar", "ok": True, "query": dict(request.query_params)}


@post("/echo-json", status_code=200)
async def echo_json(data: dict[str, Any]) -> dict[str, Any]:
    return data


@post("/form", status_code=200)
async def form(request: Request) -> dict[str, Any]:
    data = await request.form()
    return {k: data[k] for k in data}


@post("/upload", status_code=200)
async def upload(request: Request) -> dict[str, Any]:
    data = await request.form()
    f = data["file"]
    content = await f.read()
    return {
        "filename": f.filename,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "note": data["note"],
    }


@get("/stream")
async def stream(n: int = 5) -> Stream:
    async def lines():
        for i in range(n):
            yield f"line {i}\n"
            await asyncio.sleep(0)

    return Stream(lines(), media_type="text/plain")


@get("/error")
async def error() -> None:
    raise RuntimeError("litestar boom")


app = Litestar([json_view, echo_json, form, upload, stream, error])
