"""Fixtures of the server behaviour suite: every test is written once and runs against each
server it is parametrized over — ringloop's on both loop backends and the reference.

* `asgi_kind` / `wsgi_kind` / `ws_kind` / `ringloop_kind`: what serves the test. ASGI tests run on
  `ringloop-io_uring`, `ringloop-epoll`, `uvicorn-httptools` and `uvicorn-h11`; WSGI tests
  on the two ringloop kinds and `gunicorn-gthread`;
* `pool`: servers are started once per session for each (kind, app, interface, settings) and
  reused (a test that needs its own, say to stop it, calls `start_server`); a server that
  died during a test is reported as that test's error and replaced for the next;
* markers, applied per kind:
  - `ringloop_bug(reason)`: ringloop misbehaves here; a strict xfail on the ringloop kinds
    (the reference must still pass). Remove it when the bug is fixed;
  - `reference_lax(reason, kinds=...)`: the reference breaks the RFC here; those reference
    kinds are skipped with the reason, and ringloop is tested against the RFC alone;
  - `ringloop_only(reason)`: the behaviour has no counterpart in the reference (a setting
    uvicorn does not have, an interface of ringloop's own).
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

import pytest
from srv_harness import (
    GUNICORN,
    RINGLOOP_KINDS,
    UVICORN_KINDS,
    Kind,
    ServerProc,
    apply_kind_markers,
    check_kind,
)

ASGI_KINDS = RINGLOOP_KINDS + UVICORN_KINDS
# WebSocket: uvicorn's WebSocket implementation does not depend on its HTTP one (one is enough).
WS_KINDS = (*RINGLOOP_KINDS, "uvicorn-httptools")
WSGI_KINDS = (*RINGLOOP_KINDS, GUNICORN)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ringloop_bug(reason): strict xfail on ringloop's kinds (a known bug)"
    )
    config.addinivalue_line(
        "markers",
        "reference_lax(reason, kinds=...): the reference breaks the RFC here: skip those kinds",
    )
    config.addinivalue_line(
        "markers", "ringloop_only(reason): no counterpart in the reference servers"
    )


def _kind(request: pytest.FixtureRequest) -> Kind:
    kind = Kind(request.param)
    check_kind(kind)
    apply_kind_markers(request, kind)
    return kind


@pytest.fixture(params=ASGI_KINDS)
def asgi_kind(request: pytest.FixtureRequest) -> Kind:
    return _kind(request)


@pytest.fixture(params=WSGI_KINDS)
def wsgi_kind(request: pytest.FixtureRequest) -> Kind:
    return _kind(request)


@pytest.fixture(params=WS_KINDS)
def ws_kind(request: pytest.FixtureRequest) -> Kind:
    return _kind(request)


@pytest.fixture(params=RINGLOOP_KINDS)
def ringloop_kind(request: pytest.FixtureRequest) -> Kind:
    return _kind(request)


class Pool:
    """Servers shared by the session, one per (kind, app, interface, settings)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: dict[tuple, ServerProc] = {}
        self.started: list[ServerProc] = []
        self._n = itertools.count()

    def get(self, kind: Kind, app: str, interface: str = "asgi", **settings: Any) -> ServerProc:
        key = (kind.name, app, interface, tuple(sorted(settings.items())))
        server = self.servers.get(key)
        if server is None or not server.alive():
            server = self.start(kind, app, interface, **settings)
            self.servers[key] = server
        return server

    def start(
        self,
        kind: Kind,
        app: str,
        interface: str = "asgi",
        env: dict[str, str] | None = None,
        **settings: Any,
    ) -> ServerProc:
        server = ServerProc(
            kind,
            app,
            interface=interface,
            settings=settings,
            log_dir=self.root / f"s{next(self._n)}",
            env=env,
        )
        self.started.append(server)
        return server

    def close(self) -> None:
        for server in self.started:
            server.kill()


class WatchedPool:
    """The session's `Pool` as one test sees it: every server it gets is `watch`ed."""

    def __init__(self, pool: Pool, request: pytest.FixtureRequest) -> None:
        self._pool = pool
        self._request = request

    def get(self, kind: Kind, app: str, interface: str = "asgi", **settings: Any) -> ServerProc:
        return watch(self._request, self._pool.get(kind, app, interface, **settings))

    def start(self, kind: Kind, app: str, interface: str = "asgi", **settings: Any) -> ServerProc:
        return watch(self._request, self._pool.start(kind, app, interface, **settings))


@pytest.fixture(scope="session")
def session_pool(tmp_path_factory: pytest.TempPathFactory):
    p = Pool(tmp_path_factory.mktemp("servers"))
    yield p
    p.close()


@pytest.fixture
def pool(request: pytest.FixtureRequest, session_pool: Pool) -> WatchedPool:
    return WatchedPool(session_pool, request)


@pytest.fixture
def start_server(pool: WatchedPool):
    """`start_server(kind, app, interface, **settings)`: a server of this test's own,
    killed at teardown (for tests that stop it or push it hard)."""
    mine: list[ServerProc] = []

    def start(kind: Kind, app: str, interface: str = "asgi", **settings: Any) -> ServerProc:
        server = pool.start(kind, app, interface, **settings)
        mine.append(server)
        return server

    yield start
    for server in mine:
        server.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report carries what its servers logged meanwhile."""
    report = yield
    if report.failed:
        for server, mark in getattr(item, "srv_watched", ()):
            with contextlib.suppress(OSError):
                tail = server.log_since(mark)[-4000:]
                report.sections.append((f"{server.kind} {server.app} log", tail))
    return report


def watch(request: pytest.FixtureRequest, server: ServerProc) -> ServerProc:
    """Attach `server`'s log from now on to this test's report if it fails."""
    node = request.node
    if not hasattr(node, "srv_watched"):
        node.srv_watched = []
    node.srv_watched.append((server, server.log_mark()))
    return server


def _survives(server: ServerProc):
    mark = server.log_mark()
    yield server
    if not server.alive():
        pytest.fail(
            f"{server.kind} died during the test (exit {server.proc.returncode}):\n"
            f"{server.log_since(mark)[-3000:]}"
        )


@pytest.fixture
def asgi(asgi_kind: Kind, pool: WatchedPool):
    """The shared server of `srv_asgi_app:app` on this test's kind."""
    yield from _survives(pool.get(asgi_kind, "srv_asgi_app:app", "asgi"))


@pytest.fixture
def wsgi(wsgi_kind: Kind, pool: WatchedPool):
    """The shared server of `srv_wsgi_app:app` on this test's kind."""
    yield from _survives(pool.get(wsgi_kind, "srv_wsgi_app:app", "wsgi"))


@pytest.fixture
def ws_server(ws_kind: Kind, pool: WatchedPool):
    """The shared server of `srv_ws_app:app` (WebSocket) on this test's kind."""
    yield from _survives(pool.get(ws_kind, "srv_ws_app:app", "asgi"))
