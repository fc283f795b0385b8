"""Static files (`--static-path-*`): the one part that runs in Python, the rest of a large file's
body when the socket could not take it at once (`src/http/conn/files.rs` says when).

`loop.sendfile` waits for the socket on a native transport (sendfile(2) each time it is
writable) and reads and writes through a TLS transport; the connection holds its next request
back until `_static_done` ends the response.
"""

from __future__ import annotations

import asyncio
import os


async def send_rest(conn, fd: int, offset: int, count: int) -> None:
    """Send `count` bytes of the open file `fd` from `offset` on `conn`'s transport; `fd` is
    ours to close."""
    ok = False
    try:
        with os.fdopen(fd, "rb") as f:
            transport = conn._static_transport()
            if transport is not None and not transport.is_closing():
                await asyncio.get_running_loop().sendfile(transport, f, offset, count)
                ok = True
    except (OSError, RuntimeError):
        # The client went away (reset, closed transport): the connection closes.
        pass
    finally:
        conn._static_done(ok)
