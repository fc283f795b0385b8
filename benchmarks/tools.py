"""The programs a suite runs beside the thing it measures, found, installed or built.

* **wrk** (``ensure_wrk``, ``wrk_command``, ``parse_wrk``): found or installed from Debian,
  its command line (always ``--latency``) and its report, p50/p75/p90/p99 included;
* **Debian tools** (``ensure_debian``): a binary apt-got when it is missing, the package
  index refreshed once when that fails;
* **our C tools** (``build_c_tool``): load generators and floors compiled with ``cc`` at
  each run;
* **our Rust floors** (``cargo_build``): built with cargo on first use, offline first.

Split from ``harness.py`` (which keeps processes, pinning and /proc accounting); like it,
this module names no suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness


def build_c_tool(src: Path, workdir: Path) -> tuple[str | None, str | None]:
    """Compile one of our C tools into ``workdir``; (path, None) or (None, why not).

    Built at every run rather than shipped: the binary then always matches the source next
    to the results, and the compiler is the machine's.
    """
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, f"no C compiler (cc) to build {src.name}"
    exe = workdir / src.stem
    try:
        proc = subprocess.run(
            [cc, "-O2", "-o", str(exe), str(src)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"building {src.name}: {exc}"
    if proc.returncode != 0:
        return None, f"building {src.name}: {harness.last_line(proc.stderr, '(no output)')}"
    return str(exe), None


def ensure_wrk() -> tuple[str | None, str | None]:
    """wrk's path, installing the Debian package if missing; else (None, why not)."""
    return ensure_debian("wrk", "wrk")


def ensure_debian(
    binary: str, package: str, present: Callable[[], str | None] | None = None
) -> tuple[str | None, str | None]:
    """``binary``'s path (or what ``present`` finds), apt-getting ``package`` if it is missing.

    (path, None), or (None, why not). ``present`` replaces the PATH lookup for what is not
    a command on PATH (nginx lives in /usr/sbin; a shared library has no path to look up).
    """
    find = present or (lambda: shutil.which(binary))
    if path := find():
        return path, None
    if os.geteuid() != 0:
        return None, f"{binary} is not installed and we are not root to apt-get {package}"
    print(f"  {binary} not found: apt-get install -y {package}", flush=True)
    reason = _apt("install", "-y", package)
    if reason and not find():
        # A stale package index is the usual cause: refresh it once and try again.
        reason = _apt("update") or _apt("install", "-y", package)
    if path := find():
        return path, None
    return None, f"{binary} is not installed and {reason or 'apt-get did not provide it'}"


def _apt(*args: str) -> str | None:
    """Run apt-get; None on success, else one line saying what failed."""
    cmd = ["apt-get", *args]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(cmd)} failed: {exc}"
    if proc.returncode != 0:
        return f"{' '.join(cmd)} failed: {harness.last_line(proc.stderr or proc.stdout, '(no output)')}"
    return None


def wrk_command(
    wrk: str,
    url: str,
    *,
    connections: int,
    duration: float,
    threads: int = 1,
    script: Path | None = None,
    script_args: tuple[str, ...] = (),
) -> list[str]:
    """A wrk command line; ``duration`` is rounded to whole seconds, at least 1 (wrk's unit).

    Always with ``--latency``: wrk records every latency in its histogram anyway, the flag
    only prints the percentiles, so they cost nothing and ``parse_wrk`` can return them.
    """
    cmd = [wrk, f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    cmd.append(url)
    if script_args:
        cmd += ["--", *script_args]
    return cmd


WRK_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_wrk(text: str) -> dict[str, Any]:
    """Requests, seconds, error counts and (with ``--latency``) percentiles from wrk's report.

    ``latency_us`` maps "50", "75", "90", "99" to microseconds; it is empty when wrk ran
    without ``--latency``. ``latency_max_us`` is the slowest request (its "Thread Stats"). Trust it for one request per write only: under a pipelining
    script Debian's wrk 4.1.0 prints a 99th percentile of 0.00us (seen on every pipelined
    run here), so the percentiles of such a run are not a measurement.
    """
    out: dict[str, Any] = {}
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)\b", text)
    if m:
        out["requests"] = int(m.group(1))
        out["seconds"] = float(m.group(2)) * WRK_UNITS[m.group(3)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    out["socket_errors"] = (
        dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups()), strict=True))
        if m
        else {}
    )
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    out["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"^\s*Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s|m|h)\s", text, re.M)
    out["latency_max_us"] = float(m.group(1)) * WRK_UNITS[m.group(2)] * 1e6 if m else None
    out["latency_us"] = {}
    # Only below the heading: the "Thread Stats" lines above also end in percentages.
    _, found, dist = text.partition("Latency Distribution")
    if found:
        for pct, value, unit in re.findall(r"^\s*(\d+)%\s+([\d.]+)(us|ms|s|m|h)\s*$", dist, re.M):
            out["latency_us"][pct] = float(value) * WRK_UNITS[unit] * 1e6
    return out


def cargo_build(crate: Path, binary: str, label: str) -> Path:
    """``cargo build --release`` of one of our Rust floors in ``crate`` (a no-op when it is up
    to date), its own target directory beside it; the path of ``binary``.

    Offline first, from the registry cache ringloop's own build filled; crates.io only if a
    crate is missing there. Raises ``harness.ServerFailed`` with ``label`` and cargo's last
    line: a floor that cannot be built is a row left out, not a failed suite.
    """
    cargo = shutil.which("cargo")
    home = Path.home() / ".cargo" / "bin" / "cargo"
    cargo = cargo or (str(home) if home.exists() else None)
    if cargo is None:
        raise harness.ServerFailed(f"{label}: no cargo on PATH or in ~/.cargo/bin to build it")
    proc = None
    for extra in (["--offline"], []):
        proc = subprocess.run(
            [cargo, "build", "--release", "--locked", "--quiet", *extra],
            cwd=crate,
            capture_output=True,
            text=True,
            timeout=1800,
            env={**os.environ, "CARGO_TARGET_DIR": str(crate / "target")},
        )
        if proc.returncode == 0:
            return crate / "target" / "release" / binary
    assert proc is not None
    raise harness.ServerFailed(
        f"{label}: cargo build failed: {harness.last_line(proc.stderr, '(no output)')}"
    )
