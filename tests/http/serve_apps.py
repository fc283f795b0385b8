"""Applications that the server-process tests run with `ringloop serve serve_apps:...` or
gunicorn (a module of apps, not a test module).

`app` answers with the serving process's pid, so a test can tell workers apart, and:

* `/sleep?s=SECONDS[&mark=PATH]` sleeps first (after creating PATH, so a test knows the
  request is in the application before it signals the server); `/sleep?until=PATH[&mark=..]`
  waits without blocking the loop until PATH exists (a test decides when it ends);
* `/grow?mib=N` keeps N MiB more alive in the worker (touched, so resident);
* `/block?s=SECONDS` blocks the worker's loop (`time.sleep`), as a broken handler would;
  `/block?until=PATH` blocks it until PATH exists (a test decides when it ends);
* `/env?name=NAME` answers with the environment variable NAME;
* `/client` answers with the client's address as the server saw it (proxy headers).

It counts the requests it started and the ones it finished; lifespan shutdown writes them to
`$SERVE_TEST_COUNTS/<pid>.json` when that is set, so a load test can compare what every
worker, replaced ones included, served with what the load generator received. The
`UNDER_LOAD`-th request a worker starts creates `$SERVE_TEST_COUNTS/<pid>.busy`: the event a
load test waits for before it signals the server (not CPU time, which measures the machine).

`failing_startup` fails its lifespan startup; `wsgi_pid` is the WSGI counterpart of `app`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from urllib.parse import parse_qs

MiB = 1024 * 1024
# Requests a worker has started when it says it is under load: as many as the load tests'
# wrk connections, so each of them has been answered about once by then.
UNDER_LOAD = 32

_counts = {"started": 0, "finished": 0}
_hoard: list[bytes] = []


def _write_counts() -> None:
    where = os.environ.get("SERVE_TEST_COUNTS")
    if where:
        Path(where, f"{os.getpid()}.json").write_text(json.dumps(_counts))


def _mark_busy() -> None:
    where = os.environ.get("SERVE_TEST_COUNTS")
    if where:
        Path(where, f"{os.getpid()}.busy").touch()


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            _write_counts()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    _counts["started"] += 1
    if _counts["started"] == UNDER_LOAD:
        _mark_busy()
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    body = str(os.getpid())
    path = scope["path"]
    if path == "/sleep":
        if "mark" in query:
            Path(query["mark"]).touch()
        if "until" in query:
            while not os.path.exists(query["until"]):
                await asyncio.sleep(0.005)
        else:
            await asyncio.sleep(float(query["s"]))
    elif path == "/grow":
        _hoard.append(b"x" * (int(query["mib"]) * MiB))
    elif path == "/block" and "until" in query:
        while not os.path.exists(query["until"]):
            time.sleep(0.005)
    elif path == "/block":
        time.sleep(float(query["s"]))
    elif path == "/env":
        body = os.environ.get(query["name"], "")
    elif path == "/client":
        body = scope["client"][0]
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
    _counts["finished"] += 1


async def failing_startup(scope, receive, send) -> None:
    assert scope["type"] == "lifespan"
    await receive()
    await send({"type": "lifespan.startup.failed", "message": "the database is not there"})


def wsgi_pid(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
