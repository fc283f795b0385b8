"""The WebSocket suite's servers: who they are and how each is started.

Every subject (a row of the tables) is one server with one app, started as its own process
(one worker, access log off, compression off or not negotiated: the load generator does not
offer permessage-deflate) and pinned to one CPU by ``taskset``. The apps live in
``ws_apps/``: the ASGI one (``app_asgi.py``) is served by uvicorn with each of its WebSocket
implementations, granian and ``ringloop serve``; socketify, cymongoose, aiohttp and the
``websockets`` library are measured through their own APIs, each broadcasting the way its
documentation does. Every app answers ``/echo``, ``/sub`` and ``/pub``, and a plain GET
(so ``http_peers.PeerServer`` sees it is up).

The process handling (``PeerServer``), the availability check and the build stamp are the
HTTP suite's (``http_peers``); nothing here measures.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable
from pathlib import Path

import harness
import http_peers
from http_peers import PeerServer, Subject

APPS_DIR = harness.BENCH_DIR / "ws_apps"
PY = sys.executable


def _app(script: str) -> Callable[[str, int, Path], list[str]]:
    return lambda _resp, port, _work: [PY, str(APPS_DIR / script), str(port)]


def _uvicorn(ws: str) -> Callable[[str, int, Path], list[str]]:
    # uvloop and httptools, as uvicorn[standard] runs; the WebSocket implementation named.
    return lambda _resp, port, _work: [
        PY,
        *("-m", "uvicorn", "app_asgi:app", "--app-dir", str(APPS_DIR)),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--loop", "uvloop", "--http", "httptools", "--ws", ws),
        *("--no-access-log", "--log-level", "warning", "--lifespan", "off"),
    ]


def _ringloop(_resp: str, port: int, _work: Path) -> list[str]:
    return [
        PY,
        *("-m", "ringloop", "serve", "app_asgi:app", "--app-dir", str(APPS_DIR)),
        *("--interface", "asgi", "--host", "127.0.0.1", "--port", str(port)),
        *("--no-access-log", "--log-level", "warning", "--lifespan", "off"),
    ]


def _ringloop_native(_resp: str, port: int, _work: Path) -> list[str]:
    return [
        PY,
        *("-m", "ringloop", "serve", "app_native:app", "--app-dir", str(APPS_DIR)),
        *("--interface", "native", "--host", "127.0.0.1", "--port", str(port)),
        *("--no-access-log", "--log-level", "warning", "--lifespan", "off"),
    ]


def _granian(_resp: str, port: int, _work: Path) -> list[str]:
    # As the HTTP suite runs its ASGI row (granian's published method: 1 worker, 1 runtime
    # thread, --runtime-mode st, uvloop), with WebSockets on (its default).
    return [
        PY,
        *("-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port)),
        *("--workers", "1", "--runtime-threads", "1", "--runtime-mode", "st"),
        *("--loop", "uvloop", "--http", "1", "--ws", "--backpressure", "16384"),
        # No --app-dir in granian: the app is found through PYTHONPATH (``start`` sets it).
        *("--log-level", "warning", "app_asgi:app"),
    ]


SUBJECT_LIST = [
    Subject(
        "ringloop-asgi",
        "ringloop",
        "asgi",
        "`ringloop serve` (ASGI), the native HTTP/1.1 + WebSocket server",
        _ringloop,
        ("ringloop",),
    ),
    Subject(
        "ringloop-native",
        "ringloop",
        "native",
        "`ringloop serve` with a native `WebSocketHandler` (callbacks, `broadcast`)",
        _ringloop_native,
        ("ringloop",),
    ),
    Subject(
        "granian-asgi",
        "granian",
        "asgi",
        "granian ASGI, `--runtime-mode st --loop uvloop`",
        _granian,
        ("granian", "uvloop"),
    ),
    Subject(
        "uvicorn-websockets",
        "uvicorn",
        "asgi",
        "uvicorn `--ws websockets` (the legacy protocol; its default today) on uvloop",
        _uvicorn("websockets"),
        ("uvicorn", "websockets", "uvloop", "httptools"),
    ),
    Subject(
        "uvicorn-websockets-sansio",
        "uvicorn",
        "asgi",
        "uvicorn `--ws websockets-sansio` (its default to be) on uvloop",
        _uvicorn("websockets-sansio"),
        ("uvicorn", "websockets", "uvloop", "httptools"),
    ),
    Subject(
        "uvicorn-wsproto",
        "uvicorn",
        "asgi",
        "uvicorn `--ws wsproto` on uvloop",
        _uvicorn("wsproto"),
        ("uvicorn", "wsproto", "uvloop", "httptools"),
    ),
    Subject(
        "websockets",
        "websockets",
        "native",
        "the `websockets` library's asyncio server on uvloop, `broadcast()`",
        _app("app_websockets.py"),
        ("websockets", "uvloop"),
    ),
    Subject(
        "aiohttp",
        "aiohttp",
        "native",
        "`aiohttp.web` `WebSocketResponse` on uvloop",
        _app("app_aiohttp.py"),
        ("aiohttp", "uvloop"),
    ),
    Subject(
        "socketify",
        "socketify",
        "native",
        "socketify `App.ws` (uWebSockets), `app.publish` to a topic",
        _app("app_socketify.py"),
        ("socketify",),
        "libuv1",
    ),
    Subject(
        "cymongoose",
        "cymongoose",
        "native",
        "cymongoose `Manager` handler (Mongoose), `ws_send` per subscriber",
        _app("app_cymongoose.py"),
        ("cymongoose",),
    ),
]
SUBJECTS: dict[str, Subject] = {s.name: s for s in SUBJECT_LIST}


def check(subject: Subject) -> str | None:
    """Why ``subject`` cannot run here at all (a package does not import), or None."""
    return http_peers.check(subject, None, None)


def versions(subject: Subject) -> dict[str, str | None]:
    """The versions of the packages ``subject`` runs on."""
    out: dict[str, str | None] = {}
    for name in subject.packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def ringloop_build() -> str | None:
    return http_peers.ringloop_build()


def start(subject: Subject, cpu: int | None, work: Path) -> PeerServer:
    """``subject`` serving the suite's app, pinned to ``cpu``, not yet waited for."""
    port = http_peers.free_port()
    cmd = harness.pinned(subject.command("", port, work), cpu)
    env = http_peers.server_env(APPS_DIR)
    return PeerServer(cmd, port, env, "/")
