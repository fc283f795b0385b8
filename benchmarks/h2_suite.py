"""HTTP/2 server suite: ringloop's ``serve --http 2`` beside granian, hypercorn, uvicorn (zttp),
nginx and an ``h2``-crate floor, in one run, as ratios.

Every subject (``h2_peers.SUBJECTS``) is started as its own process, one worker, access log
off, pinned to CPU 0, serving ``Hello, world!``; the load is nghttp2's ``h2load -c64 -m10 -t1``
(64 connections, 10 streams in flight on each) on CPU 1. Scenarios:

  h2c   cleartext HTTP/2 with prior knowledge (every subject)
  tls   HTTP/2 over TLS 1.3, ALPN ``h2``, an ECDSA P-256 certificate (ringloop, granian,
        nginx: ``h2_peers.TLS_SUBJECTS``)

Per run: requests/s (h2load's own), the server CPU µs per request (utime + stime of its whole
process tree from /proc, read just before h2load starts and after it exits), and the p50/p99
of the per-request latencies h2load writes with ``--log-file`` (it prints no percentiles).
Before the load the runner checks the answer with a real client (httpx, ``http2=True``: a
200 over HTTP/2 and, except from the canned references, the app's exact body) and warms the
server up with a 1 s h2load run. A subject that fails to start, answers wrongly, dies or
makes h2load count failed requests is recorded as a crash with its error; one whose packages
do not import is unavailable.

    python benchmarks/h2_suite.py [--quick] [--subjects ...] [--scenarios ...] [--rounds N]
    python benchmarks/run.py h2 [--quick]

Full run: 3 rounds × 5 s, median; ``results/h2.json``, ``results/h2_cpu.png``,
``results/h2_rate.png`` and the README section between the ``h2`` markers. ``--quick``:
1 round × 2 s into ``results/quick/``. The large-upload measurement is ``h2_upload.py``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h2_peers  # noqa: E402
import h2_report  # noqa: E402
import harness  # noqa: E402
import reporting  # noqa: E402
import suite_runner  # noqa: E402
import tools  # noqa: E402
from h2_peers import SUBJECTS, TLS_SUBJECTS  # noqa: E402

CONNECTIONS = 64
STREAMS = 10  # h2load -m: streams in flight per connection
WARM_UP_SECONDS = 1.0
FIELDS = ("rate", "cpu_us", "server_busy", "client_busy", "p50_us", "p99_us", "rss_bytes")


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    tls: bool


SCENARIOS = {
    s.key: s
    for s in (
        Scenario("h2c", "h2c plaintext", False),
        Scenario("tls", "h2 over TLS plaintext", True),
    )
}


@dataclass
class Settings:
    duration: float
    server_cpu: int | None
    client_cpu: int | None
    first_scenario: str
    h2load: str
    work: Path
    tls: h2_peers.Tls | None


def ensure_h2load() -> tuple[str | None, str | None]:
    """h2load (Debian's nghttp2-client), installed if missing; or why not."""
    return tools.ensure_debian("h2load", "nghttp2-client")


# --------------------------------------------------------------------------- checking answers


def probe(port: int, sc: Scenario, reference: bool) -> str | None:
    """A real HTTP/2 client's view of the answer: 200 over HTTP/2, the app's body; or what is
    wrong."""
    import httpx

    scheme = "https" if sc.tls else "http"
    try:
        client = httpx.Client(http1=sc.tls, http2=True, verify=False, timeout=10)
        with client:
            for _ in range(20):
                r = client.get(f"{scheme}://127.0.0.1:{port}/")
                if r.http_version != "HTTP/2":
                    return f"answered over {r.http_version}, not HTTP/2"
                if r.status_code != 200:
                    return f"status {r.status_code}: {r.content[:60]!r}"
                if not reference and r.content != b"Hello, world!":
                    return f"body {r.content[:40]!r}, not b'Hello, world!'"
    except httpx.HTTPError as exc:
        return f"probe over HTTP/2: {type(exc).__name__}: {exc}"
    return None


# --------------------------------------------------------------------------- one run


def h2load_command(h2load: str, url: str, duration: float) -> list[str]:
    return [h2load, f"-c{CONNECTIONS}", f"-m{STREAMS}", "-t1", f"-D{duration:g}", url]


_FINISHED = re.compile(r"finished in ([\d.]+)(ms|s), ([\d.]+) req/s")
_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout"
)
_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")


def parse_h2load(text: str) -> dict[str, Any]:
    """h2load's summary: seconds, requests done/succeeded/failed, status classes."""
    out: dict[str, Any] = {}
    if m := _FINISHED.search(text):
        out["seconds"] = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
        out["h2load_rate"] = float(m.group(3))
    if m := _REQUESTS.search(text):
        keys = ("total", "started", "done", "succeeded", "failed", "errored", "timeout")
        out.update(zip(keys, map(int, m.groups()), strict=True))
    if m := _STATUS.search(text):
        out["non_2xx"] = sum(int(g) for g in m.groups()[1:])
    return out


def latencies(log: Path) -> dict[str, float | None]:
    """p50/p99/max µs of the responses h2load logged (``--log-file``: start time µs, status,
    µs until the response ended, tab-separated, one request a line)."""
    values = []
    with log.open() as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3:
                values.append(float(parts[2]))
    if not values:
        return {"p50_us": None, "p99_us": None, "max_us": None}
    values.sort()
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"p50_us": pick(0.50), "p99_us": pick(0.99), "max_us": values[-1]}


def run_h2load(server: h2_peers.H2Server, sc: Scenario, st: Settings) -> dict[str, Any]:
    """The warm-up, then one measured h2load run; server CPU (whole tree) around it."""
    assert server.port is not None
    url = f"{'https' if sc.tls else 'http'}://127.0.0.1:{server.port}/"
    warm = subprocess.run(
        harness.pinned(h2load_command(st.h2load, url, WARM_UP_SECONDS), st.client_cpu),
        capture_output=True,
        text=True,
        timeout=120,
    )
    w = parse_h2load(warm.stdout)
    if warm.returncode != 0 or not w.get("succeeded") or w["succeeded"] != w["done"]:
        why = harness.last_line(warm.stderr or warm.stdout, "(no output)")
        return {"failure": f"warm-up: h2load exit {warm.returncode}: {w or why}"}
    log = st.work / f"h2load-{server.port}.log"
    cmd = [*h2load_command(st.h2load, url, st.duration), f"--log-file={log}"]
    window = harness.CpuWindow(server.pid, tree=True)
    try:
        proc = subprocess.run(
            harness.pinned(cmd, st.client_cpu),
            capture_output=True,
            text=True,
            timeout=st.duration + 60,
        )
    except subprocess.TimeoutExpired:
        return {"failure": f"h2load timed out after {st.duration + 60:.0f}s"}
    window.close()
    rss = harness.tree_rss_bytes(server.pid)
    report = parse_h2load(proc.stdout)
    if proc.returncode != 0 or "done" not in report:
        why = harness.last_line(proc.stderr or proc.stdout, "(no output)")
        return {"failure": f"h2load exit {proc.returncode}: {why}"}
    if window.server_seconds is None or not server.alive():
        return {"failure": "server process died during the run", "h2load": proc.stdout}
    bad = {k: report[k] for k in ("failed", "errored", "timeout", "non_2xx") if report.get(k)}
    if bad or not report["succeeded"]:
        return {"failure": f"h2load errors: {bad or 'no request answered'}", "h2load": proc.stdout}
    figures = harness.rates(
        report["succeeded"],
        report["seconds"],
        window.server_seconds,
        window.children_seconds,
        window.wall,
    )
    lat = latencies(log)
    log.unlink()
    return {**figures, **lat, "rss_bytes": rss, "h2load": proc.stdout}


def measure(name: str, sc: Scenario, st: Settings) -> dict[str, Any]:
    """Start ``name`` for ``sc``, check it, load it once, stop it; never raises."""
    subject = SUBJECTS[name]
    found = h2_peers.versions(subject)
    meta: dict[str, Any] = {
        "loop_class": subject.how,
        "version": found.get(subject.server) or found.get("ringloop") or "?",
        "backend": None,
    }
    if subject.server == "ringloop":
        meta["package_mtime"] = h2_peers.http_peers.ringloop_build()
    work = st.work / f"{name}-{sc.key}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        server = h2_peers.start(subject, st.server_cpu, work, st.tls if sc.tls else None)
    except harness.ServerFailed as exc:
        return {"status": "crash", "stage": "load", "error": str(exc), "meta": meta}
    try:
        try:
            ready = server.wait_ready(timeout=60)
        except harness.ServerFailed as exc:
            return {
                "status": "crash",
                "stage": "load" if sc.key == st.first_scenario else "start",
                "error": str(exc),
                "stderr_tail": server.stderr_tail(),
                "meta": meta,
                "versions": found,
            }
        meta.update(pid=ready["pid"], port=server.port, command=server.proc.args)
        assert server.port is not None
        problem = probe(server.port, sc, subject.reference)
        res = {"failure": problem} if problem else run_h2load(server, sc, st)
        died = not server.alive()
        end = server.stop()
        if died or "failure" in res:
            return {
                "status": "crash",
                "stage": "run",
                "error": res.get("failure", "server died"),
                "stderr_tail": server.stderr_tail(),
                "meta": meta,
                "versions": found,
                **end,
            }
        return {"status": "ok", "meta": meta, **res, **end, "versions": found}
    finally:
        if server.alive():
            server.stop(timeout=5)
        server.close()


def applies(name: str, sc: Scenario) -> bool:
    return not sc.tls or name in TLS_SUBJECTS


# --------------------------------------------------------------------------- the run

QUICK = {"rounds": 1, "duration": 2.0}
FULL = {"rounds": 3, "duration": 5.0}


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    preset = QUICK if args.quick else FULL
    keys = args.scenarios or list(SCENARIOS)
    names = args.subjects or list(SUBJECTS)
    out_dir, update_readme = reporting.output_choice(args)
    h2load, why = ensure_h2load()
    if h2load is None:
        print(f"h2: h2load: {why}")
        return 1
    run = suite_runner.SuiteRun.from_args(
        "h2", h2_report, args, preset, [SCENARIOS[k] for k in keys]
    )
    with tempfile.TemporaryDirectory(prefix="ringloop-h2-") as tmp:
        work = Path(tmp)
        tls = None
        if any(sc.tls for sc in run.scenarios):
            cert, key = suite_runner.make_keys(work)["ecdsa"]
            tls = h2_peers.Tls(cert, key)
        ran, unavailable = suite_runner.available(names, _check)
        st = Settings(
            duration=run.duration,
            server_cpu=args.server_cpu,
            client_cpu=args.client_cpu,
            first_scenario=keys[0],
            h2load=h2load,
            work=work,
            tls=tls,
        )
        state = run.run_rounds(
            ran, lambda name, sc: measure(name, sc, st), load="h2load", applies=applies
        )
    subjects = run.subjects(
        state,
        SUBJECTS,
        lambda subject: subject.server,
        FIELDS,
        unavailable,
        applies,
    )
    settings = run.settings(
        {
            "connections": CONNECTIONS,
            "streams": STREAMS,
            "warm_up_seconds": WARM_UP_SECONDS,
            "tls_key": "ECDSA P-256",
        },
        latency_source="h2load --log-file, per request",
    )
    return run.publish(settings, subjects, out_dir, update_readme)


def _check(name: str) -> str | None:
    if name == h2_peers.FLOOR:
        print(f"  {name}: cargo build --release in {h2_peers.FLOOR_DIR}", flush=True)
    return h2_peers.check(SUBJECTS[name])


def _parse_args(argv: list[str]) -> argparse.Namespace:
    return suite_runner.parser(
        "h2_suite.py",
        __doc__,
        SUBJECTS,
        SCENARIOS,
        quick_help="1 round × 2 s",
        duration_help="seconds per run (5)",
    ).parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
