"""The benchmark harness: processes, pinning, CPU and memory accounting.

Everything a suite needs to measure something that runs in another process, and nothing
about what is measured (no suite, loop or scenario is named here):

* **pinning** (``pin_to_cpu``, ``pinned``, ``default_bench_cpu``): the machine has two
  cores and is shared, so the thing measured and its load generator each get their own;
* **the worker side** of a measured process (``claim_stdout``, ``emit``, ``emit_error``,
  ``stop_on_stdin_eof``): JSON lines on a private stdout, stop when stdin closes;
* **one-shot workers** (``run_worker``): run to completion, collect their JSON lines, a
  crash or a hang is data, never an exception;
* **servers** (``ServerProcess``): start, wait for the ready line, watch, stop on stdin
  EOF, kill on timeout, keep stderr for the crash record;
* **/proc accounting** (``proc_cpu_ticks``, ``tree_cpu_ticks``, ``CpuWindow``, ``rss_bytes``,
  ``tree_rss_bytes``, ``rates``): CPU of every thread of a process (or of its whole tree)
  over a measured window, resident memory;
* **context** (``machine_info``): what is recorded next to the numbers.

Repeating measurements in rounds and taking medians is ``rounds.py``'s; finding, installing
and building the load generators (wrk, Debian tools, our C tools) is ``tools.py``'s.

The line protocol: a worker writes one JSON object per line with a ``"type"`` key ("ready",
"error", "done", or its own); anything else on stdout is ignored. The worker moves its fd 1
onto stderr before importing what it measures (``claim_stdout``), so native code that
prints cannot corrupt the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import platform
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent

# --------------------------------------------------------------------------- pinning


def default_bench_cpu() -> int | None:
    """The CPU workers are pinned to: the highest one this process may use.

    On the two-core benchmark machine that leaves CPU 0 to the runner, the shell and the
    other tenants, and puts every worker on the same core so they compete with the same
    neighbours. None when affinity is not available (not Linux).
    """
    try:
        return max(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def pin_to_cpu(cpu: int | None) -> int | None:
    """Pin this process to ``cpu``; returns the CPU actually pinned to, or None."""
    if cpu is None:
        return None
    try:
        os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        # A container may forbid the CPU; an unpinned measurement is still a measurement,
        # and the JSON says it was not pinned.
        return None
    return cpu


def pinned(cmd: list[str], cpu: int | None) -> list[str]:
    """``cmd`` run under ``taskset -c cpu`` (unchanged when there is no CPU or no taskset).

    taskset rather than sched_setaffinity in a preexec_fn: the command line in the JSON then
    shows exactly how the load generator ran.
    """
    if cpu is None or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", str(cpu), *cmd]


# --------------------------------------------------------------------------- worker side


def claim_stdout() -> TextIO:
    """Return a private stream to the runner and point fd 1 at stderr.

    Native code (libuv, a Rust crate, a stray print) writes to fd 1, not to sys.stdout.
    Duplicating fd 1 for the protocol and then dup2-ing stderr onto it means nothing but
    our JSON lines reaches the runner's pipe.
    """
    proto_fd = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", buffering=1)


def emit(stream: TextIO, obj: dict[str, Any]) -> None:
    """Write one protocol line and flush it, so a later crash cannot lose it."""
    stream.write(json.dumps(obj) + "\n")
    stream.flush()


def emit_error(
    stream: TextIO,
    stage: str,
    exc: BaseException,
    extra: dict[str, Any] | None = None,
    *,
    limit: int = 6,
) -> None:
    """Report ``exc`` as an "error" line: the stage it happened in, its text, its traceback.

    Call it from the ``except`` block, so the traceback is the exception's. ``extra`` adds
    what the worker still knows (say, which backend did run after a mismatch).
    """
    emit(
        stream,
        {
            "type": "error",
            "stage": stage,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=limit),
            **(extra or {}),
        },
    )


def stop_on_stdin_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Future[None]) -> None:
    """The runner closes our stdin to stop us; a thread waits for that and resolves ``stop``.

    A thread rather than add_reader or a signal handler: those are exactly the parts of a
    loop that may be missing, and the thread costs nothing while it blocks in read().
    """

    def wait() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))

    threading.Thread(target=wait, daemon=True).start()


# --------------------------------------------------------------------------- one-shot workers


@dataclass
class WorkerRun:
    """What came back from one worker process."""

    lines: list[dict[str, Any]]
    returncode: int | None
    stderr_tail: str
    timed_out: bool
    seconds: float


def _protocol_line(raw: str) -> dict[str, Any] | None:
    """The JSON object on this stdout line, if it is one of ours (a dict with "type")."""
    raw = raw.strip()
    if not raw.startswith("{"):
        return None
    with contextlib.suppress(ValueError):
        obj = json.loads(raw)
        if isinstance(obj, dict) and "type" in obj:
            return obj
    return None


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_worker(cmd: list[str], env: dict[str, str], timeout: float) -> WorkerRun:
    """Run one worker, collect its JSON lines, never raise for the worker's own failures.

    A segfault, a hang (killed after ``timeout``) or garbage on stdout are all returned as
    data: the caller records them against what it measured and carries on with the next.
    """
    full_env = dict(os.environ)
    full_env.update(env)
    full_env["PYTHONUNBUFFERED"] = "1"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        text=True,
        cwd=REPO_DIR,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()  # our own child, by its handle
        out, err = proc.communicate()
    lines = [obj for raw in out.splitlines() if (obj := _protocol_line(raw)) is not None]
    return WorkerRun(lines, proc.returncode, _tail(err), timed_out, time.monotonic() - t0)


def describe_failure(run: WorkerRun) -> str:
    """One line saying why a worker produced no (or partial) results."""
    if run.timed_out:
        return f"timed out after {run.seconds:.0f}s"
    if run.returncode is not None and run.returncode < 0:
        try:
            sig = signal.Signals(-run.returncode).name
        except ValueError:
            sig = f"signal {-run.returncode}"
        return f"crashed ({sig}); stderr: {last_line(run.stderr_tail)}"
    return f"exit {run.returncode}; stderr: {last_line(run.stderr_tail)}"


def last_line(text: str, empty: str = "(empty)") -> str:
    """The last non-blank line of ``text``, stripped; ``empty`` when there is none."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else empty


# --------------------------------------------------------------------------- servers


class ServerFailed(Exception):
    """The server never became ready; ``meta`` is whatever it said about itself."""

    def __init__(self, message: str, meta: dict[str, Any] | None = None):
        super().__init__(message)
        self.meta = meta or {}


class ServerProcess:
    """One server worker seen from the runner: start, wait until ready, watch, stop.

    The server speaks the line protocol: a "ready" line (with what it needs to say, such as
    its port) once it accepts load, an "error" line if it cannot start, and it stops when its
    stdin closes, ideally saying "done". stdout is read by a thread and stderr goes to a
    temporary file, so a server that logs an error per connection can never block on a full
    pipe, and its last words are there for the crash record.
    """

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None):
        self.t0 = time.monotonic()
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=dict(os.environ) if env is None else env,
            text=True,
            cwd=REPO_DIR,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if (obj := _protocol_line(raw)) is not None:  # anything else on fd 1 is not ours
                self.lines.put(obj)
        self.lines.put(None)

    def _next(self, timeout: float) -> dict[str, Any] | None:
        line = self.lines.get(timeout=timeout)
        if line is not None:
            self.seen.append(line)
        return line

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        """The ready line; raises ServerFailed if the server says "error", exits or stalls."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._next(max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise ServerFailed(f"not ready after {timeout:.0f}s") from None
            if line is None:  # stdout closed: the process is exiting
                self._reap()
                raise ServerFailed(self.failure_text(), self.meta())
            if line["type"] == "ready":
                return line
            if line["type"] == "error":
                self._reap()
                raise ServerFailed(line["error"], line)

    def _reap(self, timeout: float = 10) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def meta(self) -> dict[str, Any]:
        """What the server said about itself: its ready or error line, else nothing."""
        return next((ln for ln in self.seen if ln["type"] in ("ready", "error")), {})

    def first(self, kind: str) -> dict[str, Any] | None:
        """The first line of type ``kind`` the server sent, if any."""
        return next((ln for ln in self.seen if ln["type"] == kind), None)

    def stop(self, timeout: float = 10) -> dict[str, Any]:
        """Close stdin, wait for the exit; kill after ``timeout``.

        Returns the exit status, whether it had to be killed and whether it said "done";
        every line it sent is in ``seen`` afterwards.
        """
        hung = False
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True  # recorded: a server that cannot stop serving is worth knowing about
            self.kill()
        with contextlib.suppress(queue.Empty):
            while self._next(timeout=2) is not None:
                pass
        return {
            "returncode": self.proc.returncode,
            "hung_on_stop": hung,
            "done": self.first("done") is not None,
        }

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its handle
            self.proc.wait()

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return _tail(self.stderr.read())

    def failure_text(self) -> str:
        """Why the server is gone: its own last error line, else its exit and stderr."""
        errors = [ln["error"] for ln in self.seen if ln["type"] == "error"]
        if errors:
            return errors[-1]
        run = WorkerRun(
            self.seen, self.proc.returncode, self.stderr_tail(), False, time.monotonic() - self.t0
        )
        return describe_failure(run)

    def close(self) -> None:
        self.kill()
        self.stderr.close()


# --------------------------------------------------------------------------- /proc accounting

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (so index 0 is field 3 of proc(5)); None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (the command) may hold spaces or ')': the fixed fields start after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def proc_cpu_ticks(pid: int) -> int | None:
    """utime + stime of every thread of ``pid``, in clock ticks; None once it is gone.

    The process's own line in /proc sums all its threads, io_uring's kernel workers
    included, so nothing a loop offloads to a thread escapes the count.
    """
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, grandchildren...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))  # field 4: ppid
    out, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo += children.get(child, [])
    return out


def tree_cpu_ticks(pid: int) -> int | None:
    """CPU of ``pid`` and every process below it, in clock ticks; None once ``pid`` is gone.

    For servers that fork workers (a master and N children). Each process counts its own
    threads (utime + stime) plus the children it has already reaped (cutime + cstime), so
    a worker that exits during the window moves into its parent's count instead of
    vanishing. A process that exits between the scan and its read counts as nothing.
    """
    total = None
    for p in [pid, *descendants(pid)]:
        fields = _stat_fields(p)
        if fields is None:
            if p == pid:
                return None
            continue
        total = (total or 0) + sum(int(f) for f in fields[11:15])  # fields 14-17 of proc(5)
    return total


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` now (VmRSS), in bytes; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None  # a zombie or kernel thread has no VmRSS


def tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` and every process below it, summed; None once it is gone.

    Pages shared between the processes (the forked workers' copy of the interpreter) are
    counted once per process, as ``ps`` would: an upper bound, comparable between servers
    measured the same way.
    """
    own = rss_bytes(pid)
    if own is None:
        return None
    return own + sum(rss_bytes(p) or 0 for p in descendants(pid))


class CpuWindow:
    """The CPU a process (or its tree) and our own reaped children used over a wall window.

    Open it just before the load starts and ``close()`` it just after the load generator
    exits. ``server_seconds`` is None when the process was gone at either edge.
    ``children_seconds`` is the CPU of the children this process reaped in the window: run
    the load generator as the only child reaped while it runs and that is its own CPU.
    """

    def __init__(self, pid: int, tree: bool = False):
        self.pid = pid
        self._ticks = tree_cpu_ticks if tree else proc_cpu_ticks
        self.ticks0 = self._ticks(pid)
        self.ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.t0 = time.monotonic()
        self.wall = 0.0
        self.server_seconds: float | None = None
        self.children_seconds = 0.0

    def close(self) -> CpuWindow:
        self.wall = time.monotonic() - self.t0
        ticks1 = self._ticks(self.pid)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if self.ticks0 is not None and ticks1 is not None:
            self.server_seconds = (ticks1 - self.ticks0) / CLK_TCK
        self.children_seconds = (ru1.ru_utime - self.ru0.ru_utime) + (
            ru1.ru_stime - self.ru0.ru_stime
        )
        return self


def rates(
    ops: int, seconds: float, server_cpu_s: float, client_cpu_s: float, busy_over: float
) -> dict[str, Any]:
    """The figures of one loaded run: rate, server CPU µs per op, how busy each side was.

    ``seconds`` is the load generator's measured window (the rate's denominator);
    ``busy_over`` the wall time the CPU figures were taken over. Busy near 1.0 means that
    side was saturated; both are recorded because on a shared machine either may not be.
    """
    return {
        "ops": ops,
        "seconds": seconds,
        "rate": ops / seconds,
        "cpu_us": server_cpu_s / ops * 1e6,
        "server_busy": server_cpu_s / busy_over,
        "client_busy": client_cpu_s / busy_over,
    }


# --------------------------------------------------------------------------- context


def machine_info() -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPU (and the instruction sets that change
    what crypto costs), kernel, Python, the peers' versions, load, commit."""
    cpu_model = None
    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu_model is None:
                cpu_model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    io_uring_disabled = None
    with contextlib.suppress(OSError, ValueError):
        io_uring_disabled = int(Path("/proc/sys/kernel/io_uring_disabled").read_text())
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=REPO_DIR,
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            or None
        )
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = None
    return {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model,
        # Two hosts both called "AMD EPYC" differed 4x in an RSA-2048 signature (AVX-512
        # IFMA or not): the features say which one a figure came from.
        "cpu_features": sorted(flags & CRYPTO_FEATURES),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": allowed,
        "io_uring_disabled": io_uring_disabled,
        "loadavg_start": list(os.getloadavg()),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "git_commit": commit,
        "packages": package_versions(),
    }


# CPU flags that change what TLS costs: RSA's big-number code (AVX-512 IFMA, ADX, BMI2), AES-GCM
# (AES-NI, VAES, VPCLMULQDQ), SHA.
CRYPTO_FEATURES = frozenset(
    {
        "avx2",
        "avx512f",
        "avx512ifma",
        "vaes",
        "vpclmulqdq",
        "aes",
        "pclmulqdq",
        "adx",
        "bmi2",
        "sha_ni",
    }
)
# The peers whose versions are written beside the figures (requirements.txt leaves them
# unpinned, so a new venv may measure a newer one).
PEER_PACKAGES = (
    "granian",
    "uvicorn",
    "uvloop",
    "httptools",
    "hypercorn",
    "aiohttp",
    "socketify",
    "cymongoose",
    "websockets",
    "rloop",
    "cryptography",
)


def package_versions() -> dict[str, str]:
    """{package: version} of the installed peers."""
    from importlib import metadata

    out = {}
    for name in PEER_PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def line_queue(stream: Any) -> queue.Queue[str | None]:
    """The lines of ``stream`` as a queue, read by a thread (so reads can time out); ``None``
    at its end."""
    out: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            out.put(line)
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def json_line(lines: queue.Queue[str | None], timeout: float) -> dict[str, Any] | None:
    """The next line of a ``line_queue`` as JSON; ``None`` at its end or after ``timeout``."""
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        return None
    return json.loads(line) if line else None
