"""A server that runs out of file descriptors while accepting, pinned to asyncio's behaviour.

asyncio's accept loop, on EMFILE/ENFILE/ENOBUFS/ENOMEM: reports "socket.accept() out of system
resource" to the exception handler, stops accepting, and starts again after
`constants.ACCEPT_RETRY_DELAY` (1 s); connections waiting in the backlog are then served.
ringloop's multishot accept (io_uring) must do the same.

The clients are plain blocking sockets in a child process, so only the server side is subject
to the lowered `RLIMIT_NOFILE`. (Kernel fact: io_uring's accept takes the limit when the
request is prepared, so a multishot accept armed before the limit is lowered never sees it;
the test lowers it first.)
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys

import pytest
from transport_helpers import HOST, marked_native, run

pytestmark = pytest.mark.timeout(60)

CLIENT = r"""
import socket, sys
n = int(sys.argv[1])
port = int(sys.stdin.readline())  # sent once the server's fd limit is lowered
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
for i, s in enumerate(socks):
    s.sendall(b"%d\n" % i)
for i, s in enumerate(socks):
    assert s.recv(64) == b"ok %d\n" % i, i
print("all served", flush=True)
"""


def highest_fd() -> int:
    return max(int(fd) for fd in os.listdir("/proc/self/fd"))


def fill_fd_holes() -> list[int]:
    """Open /dev/null until no fd number below the highest open one is free."""
    fillers = []
    top = highest_fd()
    while True:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd > top:
            os.close(fd)
            return fillers
        fillers.append(fd)


class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(b"ok " + data)


@pytest.mark.parametrize("native", [False, True], ids=["asyncio-accept", "native-accept"])
def test_accept_out_of_fds_pauses_then_serves_everyone(loop, loop_errors, native):
    clients = 8

    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLIENT, str(clients),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # The limit bounds fd *numbers*, and new fds take the lowest free number: fill the
        # holes below the highest open fd, then leave room for the listening socket and two
        # connections. It is lowered before the server starts: io_uring's accept reads the
        # limit when the (multishot) request is armed.
        fillers = fill_fd_holes()
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest_fd() + 4, hard))
        factory = marked_native(Answer) if native else Answer
        server = await loop.create_server(factory, HOST, 0)
        if native and hasattr(loop, "_native_accepts"):
            assert loop._native_accepts, "the marked factory was not served natively"
        port = server.sockets[0].getsockname()[1]
        proc.stdin.write(b"%d\n" % port)
        try:
            # Wait until the server has hit the limit at least once...
            for _ in range(400):
                if loop_errors:
                    break
                await asyncio.sleep(0.01)
            assert loop_errors, "accept never ran out of fds"
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            for fd in fillers:
                os.close(fd)
        # ...then, with fds available again, everyone is served after the retry delay.
        out = await asyncio.wait_for(proc.stdout.read(), 30)
        assert await proc.wait() == 0
        assert out == b"all served\n"
        first = loop_errors[0]
        assert first["message"] == "socket.accept() out of system resource"
        assert first["exception"].errno in (24, 23)  # EMFILE, ENFILE
        loop_errors.clear()
        server.close()
        await server.wait_closed()

    run(loop, main())
