"""Apps that block the loop on purpose, for `ringloop serve --watch-threshold`
(test_server_watch): each blocking line carries a `# BLOCKS:` marker the test finds it by.

- `app` (FastAPI): `/items/{item_id}` blocks in its first step (no await before the sleep),
  `/after/{name}` blocks after an await (in a task step), `/bg` answers at once and its
  background work blocks 0.3 s later, `/fast` does not block, `/wait` awaits a second (in
  flight meanwhile);
- `wsgi_app` blocks in the WSGI thread pool, which is not the loop;
- `native_app` (a synchronous native handler) blocks inline, on the loop.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import BackgroundTasks, FastAPI
from ringloop.server.native import Response, native_handler

BLOCK = 0.15  # seconds: three times the tests' threshold

app = FastAPI()


@app.get("/items/{item_id}")
async def item(item_id: int):
    time.sleep(BLOCK)  # BLOCKS: first-step
    return {"id": item_id}


@app.get("/after/{name}")
async def after(name: str):
    await asyncio.sleep(0.001)
    time.sleep(BLOCK)  # BLOCKS: task-step
    return {"name": name}


async def _late_work() -> None:
    await asyncio.sleep(0.3)
    time.sleep(BLOCK)  # BLOCKS: background


@app.get("/bg")
async def bg(background_tasks: BackgroundTasks):
    background_tasks.add_task(_late_work)
    return {"queued": True}


@app.get("/wait")
async def wait():
    await asyncio.sleep(1.0)
    return {"waited": True}


@app.get("/fast")
async def fast():
    return {"fast": True}


def wsgi_app(environ, start_response):
    time.sleep(BLOCK)  # BLOCKS: wsgi
    start_response("200 OK", [("content-type", "text/plain")])
    return [b"slept in a thread"]


@native_handler
def native_app(request):
    if request.path == "/block":
        time.sleep(BLOCK)  # BLOCKS: native
    return Response(200, body=b"native")
