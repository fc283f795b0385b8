"""Helpers of the server-process tests (imported as `serve_helpers`; not a test module).

* `Served` owns one `ringloop serve` (or gunicorn) process tree: its output goes to a log
  file, every process of the tree carries a token in its environment, and `kill_tree()`
  SIGKILLs whatever still carries it — workers live in process groups of their own and may
  outlive a killed supervisor, so neither the process group nor the parent's children are
  enough to find them all;
* `get()` makes one request on a connection of its own (a new connection is what the kernel
  spreads over SO_REUSEPORT listeners), over TCP or a Unix socket;
* `wait_until()` polls a condition with a deadline: no test sleeps for a fixed time;
* `ensure_wrk()`, `run_wrk()`: Debian's wrk (installed with apt-get when missing and we are
  root) and its report, with a Lua script that stops sending new requests a little before
  the end, so the run ends with nothing in flight and counts compare exactly.

Everything listens on 127.0.0.1 (or a Unix socket under the test's tmp_path).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

# free_port, unavailable and wait_until are the suite's from here too.
from harness_basics import free_port, unavailable, wait_until  # noqa: F401

HOST = "127.0.0.1"
HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
# A missing tool fails instead of skipping when CI runs the suite or the developer asks.
TOKEN_VAR = "SERVE_TEST_TOKEN"
SERVING = re.compile(r"ringloop serving \S+ \((\d+)\)")


def _die_with_parent() -> None:
    # Between fork and exec: a SIGKILLed pytest takes the top process along.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class Served:
    """One server process tree (see the module docs)."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | str = HERE,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.token = uuid.uuid4().hex
        self.argv = list(argv)
        self.log_path = log_path
        full_env = dict(os.environ if env is None else env)
        full_env[TOKEN_VAR] = self.token
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.pid = self.proc.pid

    # -- what it says and does ------------------------------------------------------------------

    def log(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def serving_pids(self) -> list[int]:
        """Pids that logged 'ringloop serving', in order (a worker's readiness)."""
        return [int(p) for p in SERVING.findall(self.log())]

    def children(self) -> set[int]:
        return children_of(self.pid)

    def wait_serving(self, count: int = 1, timeout: float = 20.0) -> list[int]:
        """Wait until `count` processes of this tree are serving; their pids."""

        def ready() -> list[int] | None:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"{self.argv} exited with {self.proc.returncode} before serving:\n"
                    f"{self.log()[-4000:]}"
                )
            pids = [p for p in dict.fromkeys(self.serving_pids()) if alive(p)]
            return pids if len(pids) >= count else None

        return wait_until(ready, timeout, f"{count} serving processes")

    def wait_log(self, pattern: str, timeout: float = 20.0) -> re.Match:
        return wait_until(
            lambda: re.search(pattern, self.log()), timeout, f"{pattern!r} in the server's log"
        )

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.argv} did not exit within {timeout}s:\n{self.log()[-4000:]}")

    def tree(self) -> list[int]:
        """Every live process that carries this tree's token."""
        needle = f"{TOKEN_VAR}={self.token}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
        return found

    def kill_tree(self) -> None:
        for pid in self.tree():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


@pytest.fixture
def serve(tmp_path: Path):
    """`serve(*args, env=..., ...)` starts `python -m ringloop serve *args` (or, with
    `argv=`, any command line); every process started is SIGKILLed at teardown."""
    started: list[Served] = []

    def start(*args: str, argv: Sequence[str] | None = None, **kwargs: Any) -> Served:
        cmd = list(argv) if argv is not None else [PYTHON, "-m", "ringloop", "serve", *args]
        served = Served(cmd, tmp_path / f"server-{len(started)}.log", **kwargs)
        started.append(served)
        return served

    yield start
    for served in started:
        served.kill_tree()


# -- processes ------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def children_of(pid: int) -> set[int]:
    """The live children of `pid`."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


# -- requests -------------------------------------------------------------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def get(
    port: int | None = None,
    path: str = "/",
    *,
    uds: str | None = None,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    """One GET on a connection of its own: (status, body)."""
    conn = (
        _UnixConnection(uds, timeout)
        if uds is not None
        else http.client.HTTPConnection(HOST, port, timeout=timeout)
    )
    try:
        conn.request("GET", path, headers={"Connection": "close", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def pids_answering(port: int, want: int, timeout: float = 20.0, **kwargs: Any) -> set[int]:
    """Request on new connections until `want` distinct pids answered."""
    seen: set[int] = set()

    def enough() -> bool:
        status, body = get(port, **kwargs)
        assert status == 200, body
        seen.add(int(body))
        return len(seen) >= want

    wait_until(enough, timeout, f"{want} distinct workers answering (saw {seen})")
    return seen


# -- wrk ------------------------------------------------------------------------------------------

# Sends nothing new after `stop_after` seconds (whole seconds: wrk's Lua has os.time()), so
# the requests in flight finish before wrk's duration ends and no response is cut off by
# wrk itself: what wrk counts is then exactly what the server finished.
WRK_SCRIPT = """
local stop_at = nil
function init(args)
  stop_at = os.time() + tonumber(args[1])
  if args[2] == "close" then
    wrk.headers["Connection"] = "close"
  end
end
function delay()
  if os.time() >= stop_at then return 600000 end
  return 0
end
"""


# The same, ended by an event instead of a clock: once the file args[1] exists no connection
# sends another request, and when the last one in flight is answered the file args[2] is made
# (`finish_wrk` waits for it, then stops wrk).
WRK_STOP_FILE_SCRIPT = """
local stop_file, drained_file = nil, nil
local in_flight, stopping = 0, false
function init(args)
  stop_file, drained_file = args[1], args[2]
  if args[3] == "close" then
    wrk.headers["Connection"] = "close"
  end
end
local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end
local function drained()
  if stopping and in_flight == 0 then
    io.open(drained_file, "w"):close()
  end
end
function delay()
  if stopping or exists(stop_file) then
    stopping = true
    drained()
    return 600000
  end
  in_flight = in_flight + 1
  return 0
end
function response(status, headers, body)
  in_flight = in_flight - 1
  drained()
end
"""


def ensure_wrk() -> str:
    """wrk's path; installed from Debian when missing (as benchmarks/tools.py does)."""
    path = shutil.which("wrk")
    if path:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        unavailable("wrk is not installed and apt-get cannot run here")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "install", "-y", "-q", "wrk"], ["apt-get", "update", "-q"]):
        subprocess.run(cmd, env=env, capture_output=True, timeout=600)
        if shutil.which("wrk"):
            break
    else:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "wrk"], env=env, capture_output=True, timeout=600
        )
    path = shutil.which("wrk")
    if not path:
        unavailable("apt-get could not install wrk")
    return path


def start_wrk(
    url: str,
    tmp_path: Path,
    *,
    connections: int,
    duration: int,
    stop_after: int | None,
    close: bool,
    timeout: int | None = None,
) -> subprocess.Popen:
    """wrk in the background (one thread), its report collected by `wrk_report`. `timeout`
    (seconds; wrk's default is 2): a response slower than this counts as a timeout error.
    `stop_after=None`: wrk sends requests until `finish_wrk` stops it (`duration` is then
    only a hang guard); else it stops sending after `stop_after` seconds."""
    script = tmp_path / "stop_early.lua"
    if stop_after is None:
        script.write_text(WRK_STOP_FILE_SCRIPT)
        stop_args = [str(tmp_path / "wrk-stop"), str(tmp_path / "wrk-drained")]
    else:
        script.write_text(WRK_SCRIPT)
        stop_args = [str(stop_after)]
    cmd = [
        ensure_wrk(),
        "-t1",
        f"-c{connections}",
        f"-d{duration}s",
        *((f"--timeout={timeout}s",) if timeout is not None else ()),
        "-s",
        str(script),
        url,
        "--",
        *stop_args,
        "close" if close else "keep-alive",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_wrk(proc: subprocess.Popen, tmp_path: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Stop a wrk started with `stop_after=None`: no new requests, wait until every one in
    flight is answered, then SIGINT (wrk prints its report); the report, as `wrk_report`."""
    assert proc.poll() is None, "wrk ended by itself (its hang guard): nothing was stopped"
    (tmp_path / "wrk-stop").touch()
    wait_until((tmp_path / "wrk-drained").exists, timeout, "wrk's requests in flight to end")
    proc.send_signal(signal.SIGINT)
    return wrk_report(proc, timeout)


def wrk_report(proc: subprocess.Popen, timeout: float = 60.0) -> dict[str, Any]:
    """Requests, errors and non-2xx responses from a finished wrk."""
    out, _ = proc.communicate(timeout=timeout)
    m = re.search(r"(\d+) requests in", out)
    assert m, f"no wrk report:\n{out}"
    report: dict[str, Any] = {"requests": int(m.group(1)), "text": out}
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = tuple(map(int, m.groups())) if m else (0, 0, 0, 0)
    report.update(zip(("connect", "read", "write", "timeout"), errors, strict=True))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    report["non_2xx"] = int(m.group(1)) if m else 0
    return report


def app_counts(where: Path) -> dict[int, dict[str, int]]:
    """What each worker's `serve_apps.app` counted (written at its lifespan shutdown)."""
    import json

    return {int(p.stem): json.loads(p.read_text()) for p in where.glob("*.json")}
