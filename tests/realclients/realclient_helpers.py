"""Helpers of the real-client tests (imported as ``realclient_helpers``; not a test module).

They start and stop the real servers the tests talk to -- uvicorn in a subprocess,
PostgreSQL and redis-server from Debian's packages -- and decide what happens when one of
them cannot be had:

* ``unavailable(reason)`` skips on a developer's machine, but fails under CI (``CI=true``) or
  ``RINGLOOP_REQUIRE=1``: a run whose server never started must not pass as "all skipped";
* ``ensure_debian_packages`` installs a missing package with ``apt-get`` (``apt-get update``
  once per session first: a fresh machine's lists are empty), only as root;
* ``ServerProcess`` owns one child process: its output goes to a log file (a pipe that no one
  reads would block the server once full), it is told to die with the test process
  (``PR_SET_PDEATHSIG``) so a killed pytest leaves no server behind, and ``stop()`` ends it
  with a polite signal first and SIGKILL after a grace period.

Everything listens on 127.0.0.1 only, on a port the kernel picked (``free_port``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# free_port and unavailable are the suite's from here too.
from harness_basics import free_port, unavailable  # noqa: F401

HOST = "127.0.0.1"

# Far below the pytest-timeout marks, so that a hang inside a test surfaces as a TimeoutError
# pointing at the await that never finished rather than as a killed test.
LONG = 30.0


MiB = 1024 * 1024


def run(loop: asyncio.AbstractEventLoop, aw, timeout: float = LONG):
    """Run ``aw`` on ``loop``; a hang becomes TimeoutError after ``timeout`` seconds."""
    return loop.run_until_complete(asyncio.wait_for(aw, timeout))


# -- Debian packages ---------------------------------------------------------------------------

_apt_updated = False


def ensure_debian_packages(packages: Sequence[str], present: Callable[[], object]) -> None:
    """Install ``packages`` with apt-get unless ``present()`` is already true.

    Only root can install; anything else (no apt-get, no network, a package that does not
    exist) ends in ``unavailable`` with the reason, so CI fails loudly.
    """
    global _apt_updated
    if present():
        return
    what = " ".join(packages)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        unavailable(f"{what} not installed and apt-get cannot run here (not root or no apt)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = []
    if not _apt_updated:
        steps.append((["apt-get", "update", "-q"], 600))
    steps.append((["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], 900))
    for cmd, timeout in steps:
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            unavailable(f"`{' '.join(cmd)}` did not finish in {timeout} s")
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-2000:]
            unavailable(f"`{' '.join(cmd)}` exited {done.returncode}:\n{tail}")
        if cmd[1] == "update":
            _apt_updated = True
    if not present():
        unavailable(f"apt-get installed {what}, but the server binary is still missing")


# -- child processes ---------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec, after subprocess switched user/group (a change of
    # credentials would clear the setting), so even a SIGKILLed pytest takes its servers along.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class ServerProcess:
    """One server child process whose output goes to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ):
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.stop_signal = stop_signal
        self._log = open(self.log_path, "ab")  # noqa: SIM115 -- closed by stop()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                user=user,
                group=user,
                extra_groups=[] if user else None,
                preexec_fn=_die_with_parent,
            )
        except BaseException:
            self._log.close()
            raise

    def log(self, start: int = 0) -> str:
        """The server's output from byte ``start`` on."""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def wait_until(self, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        """Poll ``ready()`` until true; fail with the server's log if it exits or times out."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready:\n"
                    f"{' '.join(self.argv)}\n{self.log()[-4000:]}"
                )
            with contextlib.suppress(OSError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} not ready after {timeout} s:\n{self.log()[-4000:]}"
                )
            time.sleep(0.05)

    def stop(self, grace: float = 10.0) -> int | None:
        """End the process (``stop_signal``, then SIGKILL after ``grace`` seconds)."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(self.stop_signal)
                try:
                    self.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(grace)
            return self.proc.returncode
        finally:
            self._log.close()


def tcp_accepts(port: int) -> bool:
    """True once something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.create_connection((HOST, port), timeout=1.0):
        return True


async def pieces(data: bytes, sizes: Sequence[int]):
    """``data`` as an async stream of pieces whose sizes cycle through ``sizes`` (odd sizes,
    so that nothing lines up with the reader's buffers)."""
    view = memoryview(data)
    pos = i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        i += 1
        yield bytes(view[pos : pos + n])
        pos += n
