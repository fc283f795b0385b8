"""Shared plumbing for the benchmark suites: loops, workers, pinning, machine info, README.

Every suite compares event loops side by side, and every suite needs the same few things:

* a registry of the loops we measure (``LOOPS``) and one way to build each of them
  (``make_loop``), so "uvloop" or "ringloop-epoll" mean the same thing in every suite;
* one subprocess per loop (``run_worker``), because a loop that crashes, hangs or leaks
  must not take the run down with it, and because two loops in one interpreter would share
  allocator and import state and bias each other;
* CPU pinning (``pin_to_cpu``), since the machine has two cores and is shared;
* machine information recorded next to the numbers (``machine_info``);
* the README section between ``<!-- NAME:begin -->`` / ``<!-- NAME:end -->`` markers
  rewritten in place (``update_readme_section``).

Workers talk to the runner in JSON lines on stdout, one object per line with a ``"type"``
key. The worker moves the process's own fd 1 onto stderr before importing any loop, so a
loop that writes to stdout cannot corrupt the protocol (see ``claim_stdout``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import re
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
README = BENCH_DIR / "README.md"


@dataclass(frozen=True)
class LoopSpec:
    """One event loop we measure.

    ``kind`` is "baseline" (stock asyncio: every ratio is against it), "peer" (another
    project, the figures ringloop is compared with) or "ours" (ringloop itself).
    ``env`` is set in the worker's environment before anything is imported, because
    ringloop reads ``RINGLOOP_BACKEND`` when it probes the kernel.
    ``dist`` is the distribution whose version is recorded.
    """

    name: str
    kind: str
    dist: str | None
    env: dict[str, str] = field(default_factory=dict)
    expect_backend: str | None = None


LOOPS: dict[str, LoopSpec] = {
    spec.name: spec
    for spec in (
        LoopSpec("asyncio", "baseline", None),
        LoopSpec("uvloop", "peer", "uvloop"),
        LoopSpec("rloop", "peer", "rloop"),
        LoopSpec("uringcore", "peer", "uringcore"),
        LoopSpec(
            "ringloop-io_uring",
            "ours",
            "ringloop",
            {"RINGLOOP_BACKEND": "io_uring"},
            expect_backend="io_uring",
        ),
        LoopSpec(
            "ringloop-epoll",
            "ours",
            "ringloop",
            {"RINGLOOP_BACKEND": "epoll"},
            expect_backend="epoll",
        ),
    )
}
PEERS = [name for name, spec in LOOPS.items() if spec.kind == "peer"]

# One colour per loop, shared by every suite's charts so a loop looks the same everywhere.
COLOURS = {
    "asyncio": "#7f7f7f",
    "uvloop": "#2ca02c",
    "rloop": "#9467bd",
    "uringcore": "#ff7f0e",
    "ringloop-io_uring": "#d62728",
    "ringloop-epoll": "#1f77b4",
    "c-floor": "#3b3b3b",  # transports.py's HTTP responder in C: the kernel's share
}


class BackendMismatch(RuntimeError):
    """The loop ran on another backend than the one forced through the environment.

    ``info`` is the description ``make_loop`` would have returned, so the backend that did
    run is still recorded.
    """

    def __init__(self, message: str, info: dict[str, Any]):
        super().__init__(message)
        self.info = info


def make_loop(name: str) -> tuple[asyncio.AbstractEventLoop, dict[str, Any]]:
    """Build a fresh loop named in ``LOOPS`` and describe what actually runs.

    The description says which class was built and, where the loop can tell us, which
    backend it uses. We only record what the loop itself reports (``loop.backend``,
    asyncio's selector class): a guess written next to a measurement would be read as fact.
    Raises whatever the import or the constructor raises; the worker records it.
    """
    spec = LOOPS[name]
    for key, value in spec.env.items():
        # The runner already passes these in the child's environment; setting them here
        # too keeps `primitives.py --worker ringloop-epoll` honest when run by hand.
        os.environ[key] = value
    if name == "asyncio":
        # Not asyncio.new_event_loop(): an imported peer could have installed a policy.
        loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()
    elif name == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    elif name == "rloop":
        # rloop's public factory; RLoop is its AbstractEventLoop subclass over a Rust core.
        import rloop

        loop = rloop.new_event_loop()
    elif name == "uringcore":
        import uringcore

        loop = uringcore.UringEventLoop()
    elif name.startswith("ringloop-"):
        import ringloop

        # Thread-bound, as ringloop.run() makes it: every suite makes, runs and closes its loop
        # on one thread.
        loop = ringloop.new_event_loop(thread_bound=True)
    else:  # pragma: no cover - LOOPS and this function are edited together
        raise KeyError(name)

    cls = type(loop)
    info: dict[str, Any] = {
        "loop_class": f"{cls.__module__}.{cls.__qualname__}",
        "version": _dist_version(spec.dist) if spec.dist else platform.python_version(),
        "backend": None,
    }
    backend = getattr(loop, "backend", None)
    if backend is not None:
        info["backend"] = str(backend)
    elif isinstance(getattr(loop, "_selector", None), selectors.BaseSelector):
        info["backend"] = type(loop._selector).__name__
    if spec.expect_backend is not None and info["backend"] != spec.expect_backend:
        loop.close()
        raise BackendMismatch(
            f"asked for RINGLOOP_BACKEND={spec.expect_backend}, "
            f"loop.backend reports {info['backend']!r}",
            info,
        )
    return loop, info


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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


# --------------------------------------------------------------------------- workers


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


@dataclass
class WorkerRun:
    """What came back from one worker process."""

    lines: list[dict[str, Any]]
    returncode: int | None
    stderr_tail: str
    timed_out: bool
    seconds: float


def run_worker(cmd: list[str], env: dict[str, str], timeout: float) -> WorkerRun:
    """Run one worker, collect its JSON lines, never raise for the worker's own failures.

    A segfault, a hang (killed after ``timeout``) or garbage on stdout are all returned as
    data: the caller records them against the loop and carries on with the next one.
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
    lines = []
    for raw in out.splitlines():
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        with contextlib.suppress(json.JSONDecodeError):
            obj = json.loads(raw)
            if isinstance(obj, dict) and "type" in obj:
                lines.append(obj)
    tail = "\n".join(err.strip().splitlines()[-12:])
    return WorkerRun(lines, proc.returncode, tail, timed_out, time.monotonic() - t0)


def describe_failure(run: WorkerRun) -> str:
    """One line saying why a worker produced no (or partial) results."""
    if run.timed_out:
        return f"timed out after {run.seconds:.0f}s"
    if run.returncode is not None and run.returncode < 0:
        try:
            import signal

            sig = signal.Signals(-run.returncode).name
        except ValueError:
            sig = f"signal {-run.returncode}"
        return f"crashed ({sig}); stderr: {_last_line(run.stderr_tail)}"
    return f"exit {run.returncode}; stderr: {_last_line(run.stderr_tail)}"


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(empty)"


# --------------------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPU, kernel, Python, load, commit."""
    cpu_model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
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
        "cpu_count": os.cpu_count(),
        "cpus_allowed": allowed,
        "io_uring_disabled": io_uring_disabled,
        "loadavg_start": list(os.getloadavg()),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "git_commit": commit,
    }


# --------------------------------------------------------------------------- README


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table: the header, its separator, one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """`--readme/--no-readme` and `--out`, the same for every suite."""
    parser.add_argument(
        "--readme",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rewrite the README table (default: yes for full runs, no for --quick)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results directory (default: results/, or results/quick/ for --quick)",
    )


def update_readme_section(name: str, body: str, readme: Path = README) -> bool:
    """Replace the text between ``<!-- name:begin -->`` and ``<!-- name:end -->``.

    Returns False (and leaves the file alone) when the markers are missing, so a README
    rewritten by hand is never clobbered.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    try:
        text = readme.read_text()
    except OSError:
        return False
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        return False
    new = pattern.sub(lambda _m: f"{begin}\n{body.rstrip()}\n{end}", text, count=1)
    if new != text:
        readme.write_text(new)
    return True


def write_json_atomically(path: Path, obj: Any) -> None:
    """Write JSON through a temporary file so an interrupted run leaves the old file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    tmp.replace(path)
