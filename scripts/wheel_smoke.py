"""A smoke test of an installed ringloop wheel: the three faces, as a new user meets them.

Run by `scripts/test-wheel.sh` with the interpreter of a fresh venv the wheel was installed
into, from a directory outside the checkout and with no Rust toolchain on PATH, so what it
imports is the wheel and nothing was compiled to get it. Each check waits for an event (a
result, a connection answered, an exit), never for a time:

1. the loop: `ringloop.run` runs a coroutine on ringloop's loop (timers, a thread hop);
2. the server: `ringloop serve` on a socket it is handed (`--fd`, listening on 127.0.0.1
   already, so the request waits in the backlog until the server is up) answers a real HTTP request, and stops with status 0 on SIGTERM;
3. the watch: `no_blocking` raises `BlockingError` naming the line that blocked.

Prints one line per face and exits 0, or raises on the first thing that is wrong.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import ringloop
from ringloop.watch import BlockingError, no_blocking

APP = '''
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello from the wheel"})
'''


def check_installed() -> None:
    """The module comes from the venv's site-packages, and no compiler was within reach."""
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool) is None, f"{tool} is on PATH: {shutil.which(tool)}"
    core = Path(ringloop._core.__file__).resolve()
    assert Path(sys.prefix).resolve() in core.parents, f"ringloop._core from {core}"
    print(f"installed: ringloop {ringloop.__version__} from {core.parent}")


def check_loop() -> None:
    async def main() -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.001)
        total = await asyncio.to_thread(sum, range(10))
        return type(loop).__module__, total

    module, total = ringloop.run(main())
    assert module.startswith("ringloop"), module
    assert total == 45
    print(f"loop: ringloop.run on {module} ({ringloop.new_event_loop().backend})")


def check_serve(workdir: Path) -> None:
    (workdir / "smoke_app.py").write_text(APP)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "ringloop", "serve", "smoke_app:app", "--fd", str(sock.fileno())]
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        pass_fds=[sock.fileno()],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The socket listens already: the kernel queues the request's connection until the
        # server accepts it, so the request itself waits for the server to be up.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as resp:
            status, body = resp.status, resp.read()
        assert (status, body) == (200, b"hello from the wheel"), (status, body)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"exit {proc.returncode}:\n{out}"
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"serve: `ringloop serve` answered GET / on 127.0.0.1:{port} with 200, stopped on SIGTERM")


def blocking_handler() -> None:
    time.sleep(0.06)  # THE BLOCK


def check_watch() -> None:
    async def main() -> None:
        async with no_blocking(threshold=0.01):
            await asyncio.sleep(0)
            blocking_handler()

    try:
        ringloop.run(main())
    except BlockingError as exc:
        text = str(exc)
    else:
        raise AssertionError("no_blocking did not catch a 60 ms time.sleep")
    assert "time.sleep(0.06)  # THE BLOCK" in text, text
    print("watch: no_blocking caught the 60 ms time.sleep at its line")


def main() -> None:
    check_installed()
    check_loop()
    with tempfile.TemporaryDirectory() as tmp:
        check_serve(Path(tmp))
    check_watch()
    print(f"wheel smoke test passed on Python {sys.version.split()[0]}")


if __name__ == "__main__":
    os.environ.pop("PYTHONPATH", None)
    main()
