"""anyio's Unix-socket streams (``anyio.connect_unix`` / ``anyio.create_unix_listener``) on the
loop under test, given to ``anyio.run`` as ``backend_options={"loop_factory": ...}``.

anyio's asyncio backend drives these sockets itself with ``loop.add_reader``/``add_writer``
and one future per wait. Closing a stream closes the socket *first* and only then wakes the
waiting task, whose done callback calls ``remove_reader``/``remove_writer`` with a socket
object that is already closed (``fileno() == -1``). A loop that finds the registration by
file number cannot remove it; a registration left behind fires later on whichever socket
reuses the number. So each case closes a stream (from this end or from the peer) while other
tasks are blocked in ``receive()``, in ``send()`` or in both, and expects what anyio documents:

* closed here: ``ClosedResourceError`` for the blocked ``receive()`` and ``send()``;
* closed by the peer: ``BrokenResourceError`` for ``send()``; ``EndOfStream`` for
  ``receive()``, unless a ``send()`` had left bytes unread in the peer's buffer: a socket
  closed with unread data resets the connection (``ECONNRESET``), so ``BrokenResourceError``;
* a listener closed while a task waits in ``accept()``: ``ClosedResourceError``.

Afterwards new connections (which reuse the freed descriptor numbers) must carry 4 MiB each
way intact, and the loop's exception handler must not have been called -- on ringloop at all;
stock asyncio's selector itself reports the close of a socket with both a reader and a writer
waiting (see ``anyio_close_noise``), which the control is forgiven.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import shutil
import tempfile

import anyio
import pytest
from realclient_helpers import MiB

pytestmark = pytest.mark.timeout(30)

# More than a Unix socket's send and receive buffers together, so send() must block.
BLOCKING_SEND = 16 * MiB

# (who closes, the blocked operations) -> what each operation raises.
EXPECTED = {
    ("here", ("receive",)): {"receive": anyio.ClosedResourceError},
    ("here", ("send",)): {"send": anyio.ClosedResourceError},
    ("here", ("receive", "send")): {
        "receive": anyio.ClosedResourceError,
        "send": anyio.ClosedResourceError,
    },
    ("peer", ("receive",)): {"receive": anyio.EndOfStream},
    ("peer", ("send",)): {"send": anyio.BrokenResourceError},
    ("peer", ("receive", "send")): {
        "receive": anyio.BrokenResourceError,
        "send": anyio.BrokenResourceError,
    },
}


def anyio_close_noise(context: dict) -> bool:
    """The errors stock asyncio reports when anyio closes a socket that has a reader *and* a
    writer registered: anyio closes first and deregisters in the futures' done callbacks, and
    the selector then fails to modify (EBADF) and to find (fd -1) the closed socket's
    registration. ringloop finds a closed socket object's registration and stays silent."""
    exc = context.get("exception")
    return "_RawSocketMixin._wait_until_" in context.get("message", "") and (
        (isinstance(exc, OSError) and exc.errno == errno.EBADF)
        or (isinstance(exc, ValueError) and "-1" in str(exc))
    )


def loop_factory(kind: str):
    def factory() -> asyncio.AbstractEventLoop:
        if kind == "asyncio":
            return asyncio.SelectorEventLoop()
        import ringloop

        return ringloop.new_event_loop(backend=kind.removeprefix("ringloop-"))

    return factory


def run_anyio(kind: str, main, *args, tolerate=None):
    """``anyio.run(main, *args)`` on a loop of ``kind``; fails if the loop is not the one
    asked for or if its exception handler was called (except for contexts that
    ``tolerate(context)`` accepts)."""

    async def checked():
        loop = asyncio.get_running_loop()
        if kind == "asyncio":
            assert type(loop) is asyncio.SelectorEventLoop
        else:
            assert loop.backend == kind.removeprefix("ringloop-")
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        with anyio.fail_after(20):
            result = await main(*args)
        # Let callbacks queued by the last close run before looking.
        for _ in range(3):
            await asyncio.sleep(0)
        unexpected = [
            f"{c.get('message')}: {c.get('exception')!r}"
            for c in errors
            if not (tolerate and tolerate(c))
        ]
        assert not unexpected, f"unexpected calls of the loop's exception handler: {unexpected}"
        return result

    return anyio.run(
        checked, backend="asyncio", backend_options={"loop_factory": loop_factory(kind)}
    )


@pytest.fixture
def sock_path():
    # AF_UNIX paths are limited to 107 bytes: too short for pytest's tmp_path names.
    top = tempfile.mkdtemp(prefix="rl-anyio-", dir="/tmp")
    yield os.path.join(top, "s")
    shutil.rmtree(top, ignore_errors=True)


async def _connected(listener):
    client = await anyio.connect_unix(listener.extra(anyio.abc.SocketAttribute.local_address))
    server = await listener.accept()
    return client, server


async def _exchange(client, server, size: int) -> None:
    """``size`` random bytes each way at the same time, checked by SHA-256."""
    up, down = os.urandom(size), os.urandom(size)
    got: dict[str, str] = {}

    async def pump(src, dst, data, key):
        async def writer():
            await src.send(data)
            await src.send_eof()

        async def reader():
            digest, n = hashlib.sha256(), 0
            while True:
                try:
                    chunk = await dst.receive()
                except anyio.EndOfStream:
                    break
                digest.update(chunk)
                n += len(chunk)
            got[key] = (n, digest.hexdigest())

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            tg.start_soon(reader)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, client, server, up, "up")
        tg.start_soon(pump, server, client, down, "down")
    assert got["up"] == (size, hashlib.sha256(up).hexdigest())
    assert got["down"] == (size, hashlib.sha256(down).hexdigest())


async def _close_while_blocked(path: str, closer: str, ops: tuple[str, ...]) -> None:
    async with await anyio.create_unix_listener(path) as listener:
        client, server = await _connected(listener)
        outcomes: dict[str, BaseException | None] = {}

        async def blocked(op: str) -> None:
            try:
                if op == "receive":
                    await client.receive()
                else:
                    await client.send(b"\x5a" * BLOCKING_SEND)  # the peer never reads
            except Exception as exc:
                outcomes[op] = exc
            else:
                outcomes[op] = None

        async with anyio.create_task_group() as tg:
            for op in ops:
                tg.start_soon(blocked, op)
            await anyio.wait_all_tasks_blocked()
            assert not outcomes, f"returned before the close: {outcomes}"
            await (client if closer == "here" else server).aclose()
        for op, expected in EXPECTED[closer, ops].items():
            assert type(outcomes[op]) is expected, (
                f"{op}() blocked while the stream was closed {closer}: expected "
                f"{expected.__name__}, got {outcomes[op]!r}"
            )
        await client.aclose()
        await server.aclose()

        # The descriptors just freed are reused now: nothing registered on the old ones may
        # fire on these.
        for _ in range(2):
            client, server = await _connected(listener)
            await _exchange(client, server, 4 * MiB)
            await client.aclose()
            await server.aclose()


@pytest.mark.parametrize("ops", [("receive",), ("send",), ("receive", "send")], ids="+".join)
@pytest.mark.parametrize("closer", ["here", "peer"])
def test_close_while_blocked(loop_kind, sock_path, closer, ops):
    # The oracle's own noise (see anyio_close_noise) is not held against it; ringloop must be
    # silent.
    tolerate = anyio_close_noise if loop_kind == "asyncio" else None
    run_anyio(loop_kind, _close_while_blocked, sock_path, closer, ops, tolerate=tolerate)


async def _close_listener_while_accepting(path: str) -> None:
    listener = await anyio.create_unix_listener(path)
    outcome: list[BaseException | None] = []

    async def accept() -> None:
        try:
            await listener.accept()
        except Exception as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(accept)
        await anyio.wait_all_tasks_blocked()
        await listener.aclose()
    assert len(outcome) == 1 and type(outcome[0]) is anyio.ClosedResourceError, outcome

    # A new listener (on the freed descriptor number) works.
    os.unlink(path)
    async with await anyio.create_unix_listener(path) as listener:
        client, server = await _connected(listener)
        await _exchange(client, server, 1 * MiB)
        await client.aclose()
        await server.aclose()


def test_close_listener_while_accepting(loop_kind, sock_path):
    run_anyio(loop_kind, _close_listener_while_accepting, sock_path)
