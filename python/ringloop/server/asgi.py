"""ASGI's Python half: the `http.response.pathsend` extension, and the coroutine `receive()`
returns when its message is at hand (`ready`). The request cycle itself — the scope, the task
that runs the application and how it ended, `receive`, `send` — is native
(`src/http/asgi.rs`); the connection finds `pathsend` on the runner it was given (this module).
"""

from __future__ import annotations

import os


async def ready(message):
    """`receive()`'s answer when it needs no waiting: awaiting it returns `message` (a
    coroutine returns its value without the `StopIteration` a native awaitable raises)."""
    return message


async def pathsend(send, path):
    """`http.response.pathsend`: the file at `path` as the body, sent by the request's stream
    (`send._sendfile`: the kernel copies it on cleartext; over TLS it is read and encrypted,
    never sent in the clear)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if send._pathsend_head(size) and size:
            await send._sendfile(f, 0, size)
    send._pathsend_done()
