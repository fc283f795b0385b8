"""Bad arguments: non-callable callbacks, bad delays, bad file descriptors.

asyncio facts encoded here (observed on CPython 3.11, SelectorEventLoop):

* Non-callable callbacks are only rejected in debug mode: ``call_soon(1)`` is accepted
  silently without debug and fails later, inside the loop.  With ``set_debug(True)`` the
  call_* methods raise ``TypeError``.  The oracle is therefore checked in debug mode, and a
  ringloop-only test demands ``TypeError`` without debug too (the issue asks for it).
  ``add_reader``/``add_writer`` never check the callback in asyncio, not even in debug.
* ``call_later(None)`` / ``call_at(None)`` / ``call_later("1")`` raise ``TypeError``.
* ``add_reader(-1)`` -> ``ValueError``; an object that is not an fd nor has ``fileno()`` ->
  ``ValueError("Invalid file object")``; a socket already closed (``fileno() == -1``) ->
  ``ValueError``; a closed fd number -> ``OSError(EBADF)``; a regular file -> ``PermissionError``
  (epoll refuses regular files with EPERM).
"""

from __future__ import annotations

import errno
import os
import socket

import pytest

pytestmark = pytest.mark.timeout(30)

NOT_CALLABLE = [1, "print", None]


def _call_methods(loop):
    return {
        "call_soon": lambda cb: loop.call_soon(cb),
        "call_later": lambda cb: loop.call_later(0.01, cb),
        "call_at": lambda cb: loop.call_at(loop.time() + 0.01, cb),
        "call_soon_threadsafe": lambda cb: loop.call_soon_threadsafe(cb),
    }


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "call_soon_threadsafe"])
@pytest.mark.parametrize("bad", NOT_CALLABLE, ids=repr)
def test_non_callable_callback_debug(loop, method, bad):
    loop.set_debug(True)
    with pytest.raises(TypeError):
        _call_methods(loop)[method](bad)


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "call_soon_threadsafe"])
def test_coroutine_function_callback_debug(loop, method):
    async def coro_fn():
        pass

    loop.set_debug(True)
    with pytest.raises(TypeError):
        _call_methods(loop)[method](coro_fn)


@pytest.mark.only_kinds(
    "ringloop-io_uring",
    "ringloop-epoll",
    reason="asyncio accepts non-callables silently without debug mode",
)
@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "call_soon_threadsafe"])
@pytest.mark.parametrize("bad", NOT_CALLABLE, ids=repr)
def test_non_callable_callback_without_debug(loop, method, bad):
    loop.set_debug(False)
    with pytest.raises(TypeError):
        _call_methods(loop)[method](bad)


@pytest.mark.only_kinds(
    "ringloop-io_uring",
    "ringloop-epoll",
    reason="asyncio never checks add_reader/add_writer callbacks",
)
@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
def test_non_callable_fd_callback(loop, method):
    a, b = socket.socketpair()
    try:
        with pytest.raises(TypeError):
            getattr(loop, method)(a, 1)
        # A rejected registration leaves nothing behind.
        assert getattr(loop, method.replace("add", "remove"))(a) is False
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "call",
    [
        lambda lp: lp.call_later(None, print),
        lambda lp: lp.call_at(None, print),
        lambda lp: lp.call_later("1", print),
    ],
    ids=["call_later-None", "call_at-None", "call_later-str"],
)
def test_bad_delay_type_error(loop, call):
    with pytest.raises(TypeError):
        call(loop)


@pytest.mark.parametrize("method", ["add_reader", "add_writer", "remove_reader", "remove_writer"])
def test_fd_minus_one_value_error(loop, method):
    args = (-1, print) if method.startswith("add") else (-1,)
    with pytest.raises(ValueError):
        getattr(loop, method)(*args)


@pytest.mark.parametrize("bad", [object(), "3", 1.5, None], ids=["object", "str", "float", "None"])
@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
def test_non_fd_object_value_error(loop, method, bad):
    with pytest.raises(ValueError):
        getattr(loop, method)(bad, print)


@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
def test_closed_socket_object(loop, method):
    a, b = socket.socketpair()
    a.close()
    b.close()
    with pytest.raises(ValueError):
        getattr(loop, method)(a, print)


@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
def test_closed_fd_number(loop, method):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    # Nothing else in this thread opens fds between here and the call.
    with pytest.raises(OSError) as info:
        getattr(loop, method)(r, print)
    assert info.value.errno == errno.EBADF
    assert loop.remove_reader(r) is False
    assert loop.remove_writer(r) is False


@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
def test_regular_file_refused(loop, method, tmp_path):
    # epoll cannot watch regular files (EPERM); an io_uring poll would accept them and report
    # them always ready, so ringloop must refuse them the same way.
    path = tmp_path / "f"
    path.write_bytes(b"data")
    with open(path, "rb+") as f:
        with pytest.raises(PermissionError):
            getattr(loop, method)(f.fileno(), print)
        assert getattr(loop, method.replace("add", "remove"))(f.fileno()) is False
