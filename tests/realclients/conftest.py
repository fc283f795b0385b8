"""Fixtures of the real-client tests; the loop fixtures (``loop_kind``, the kind markers) come
from tests/conftest.py, the server plumbing from ``realclient_helpers``.

* ``loop`` wraps the shared fixture with an exception handler that records every call: a
  library's callback that blew up inside the loop (and was only logged) fails the test at
  teardown instead of passing unseen; tasks left behind get a bounded time to cancel;
* ``postgres`` and ``redis_server`` (session scope) install the server from Debian's packages
  when it is missing, start a private instance on 127.0.0.1 and a free port, and stop it at
  the end of the session; they skip -- fail under CI / ``RINGLOOP_REQUIRE=1`` -- when that
  cannot be done.

Tests that use a session server mark their timeout ``func_only=True``: the first one pays for
``apt-get`` and ``initdb``, which the fixtures bound with their own time limits.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from realclient_helpers import (
    HOST,
    ServerProcess,
    ensure_debian_packages,
    free_port,
    tcp_accepts,
    unavailable,
)

# How long teardown waits for the tasks a test left behind to finish cancelling.
LEFTOVER_GRACE = 10.0


@pytest.fixture
def loop(loop):
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield loop
    # A test that failed halfway can leave a task that never finishes cancelling (a client
    # waiting for bytes a broken transport will not deliver). The shared fixture would wait
    # for it forever, outside the test's timeout (the server tests time only the call), so
    # leftovers get a bounded wait here; whatever is still pending then fails the test and
    # the loop is closed under it.
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        _, stuck = loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_GRACE))
        if stuck:
            loop.close()
            pytest.fail(f"tasks still pending {LEFTOVER_GRACE} s after cancel: {stuck}")
    unexpected = [f"{ctx.get('message')}: {ctx.get('exception')!r}" for ctx in errors]
    assert not unexpected, f"unexpected calls of the loop's exception handler: {unexpected}"


# -- PostgreSQL --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    database: str


def _postgres_bindir() -> str | None:
    # Debian keeps each major version's server outside PATH, in /usr/lib/postgresql/<major>/bin.
    found = glob.glob("/usr/lib/postgresql/*/bin/postgres")
    if not found:
        return None
    newest = max(found, key=lambda p: int(Path(p).parent.parent.name.split(".")[0]))
    return str(Path(newest).parent)


@pytest.fixture(scope="session")
def postgres():
    ensure_debian_packages(["postgresql"], _postgres_bindir)
    bindir = _postgres_bindir()
    # The server refuses to run as root; as root, run it as Debian's `postgres` account.
    user = None
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root and there is no `postgres` account to run PostgreSQL as")
        user = "postgres"
    # /tmp keeps the Unix socket path short (108 bytes at most).
    top = Path(tempfile.mkdtemp(prefix="ringloop-pg-", dir="/tmp"))
    if user:
        os.chown(top, account.pw_uid, account.pw_gid)
    data = top / "data"
    server = None
    try:
        initdb = [
            f"{bindir}/initdb",
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        done = subprocess.run(
            initdb, user=user, group=user, capture_output=True, text=True, timeout=180
        )
        if done.returncode != 0:
            unavailable(f"initdb exited {done.returncode}:\n{done.stdout}{done.stderr}")
        port = free_port()
        server = ServerProcess(
            "postgres",
            [
                f"{bindir}/postgres",
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(top),
                "-c",
                f"listen_addresses={HOST}",
                # A throw-away cluster: durability only costs time here.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            top / "postgres.log",
            user=user,
            # SIGINT is PostgreSQL's "fast shutdown": clients are disconnected, no waiting.
            stop_signal=signal.SIGINT,
        )

        def ready() -> bool:
            probe = [f"{bindir}/pg_isready", "-q", "-h", HOST, "-p", str(port), "-U", "postgres"]
            try:
                return subprocess.run(probe, timeout=10).returncode == 0
            except subprocess.TimeoutExpired:
                return False

        server.wait_until(ready, timeout=60)
        yield Postgres(HOST, port, "postgres", "postgres")
    finally:
        if server is not None:
            server.stop(grace=30)
        shutil.rmtree(top, ignore_errors=True)


# -- redis -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Redis:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"


def _redis_binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )


@pytest.fixture(scope="session")
def redis_server():
    ensure_debian_packages(["redis-server"], _redis_binary)
    top = Path(tempfile.mkdtemp(prefix="ringloop-redis-", dir="/tmp"))
    port = free_port()
    server = None
    try:
        server = ServerProcess(
            "redis-server",
            [
                _redis_binary(),
                "--bind",
                HOST,
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(top),
                "--daemonize",
                "no",
                # The default disconnects a pub/sub client more than 32 MB behind; a slow test
                # machine must not turn into a dropped subscriber.
                "--client-output-buffer-limit",
                "pubsub 0 0 0",
            ],
            top / "redis.log",
        )
        server.wait_until(lambda: tcp_accepts(port), timeout=60)
        yield Redis(HOST, port)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(top, ignore_errors=True)
