"""Run the Autobahn|Testsuite fuzzing client against a WebSocket server and summarise it.

    python tests/ws/ws_autobahn.py --server ringloop|uvicorn|uvicorn-wsproto
        [--cases selection|all|1.*,12.1.*,...] [--out DIR] [--markdown FILE] [--readme FILE]
        [--timeout S]

The server is started as a subprocess on a free loopback port, serving ``ws_echo_app:app``
(text and binary echo; permessage-deflate on, which both servers offer by default and which
cases 12.x/13.x need); ``spec.json`` for the chosen cases is written into the output
directory, ``wstest -m fuzzingclient`` runs (``install_autobahn.sh`` provides it), and its
``index.json`` is read back into counts per case group and the cases that did not pass, each
with the reason from its own report. Exit status 0 when every case is OK, NON-STRICT or
INFORMATIONAL; 1 otherwise (UNIMPLEMENTED counts as not passing: a server that does not
negotiate compression has not passed 12.x/13.x); 2 when the run itself could not happen.

``--markdown`` writes the whole summary page (``make autobahn`` commits it as
``tests/ws/AUTOBAHN-<server>.md``); ``--readme`` puts the table between the
``<!-- autobahn:begin -->`` and ``<!-- autobahn:end -->`` markers of that file.

This module is also the library of ``test_ws_autobahn.py`` (``run``, ``Summary``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTALLER = HERE / "install_autobahn.sh"
HOST = "127.0.0.1"

# The representative selection `make test` runs: every group but the long limits and
# performance group (9.x), compression by its first subgroups only.
SELECTION = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "10.*", "12.1.*", "13.1.*"]
PASSING = ("OK", "NON-STRICT", "INFORMATIONAL")
COLUMNS = ("OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED")
GROUPS = {
    "1": "Framing",
    "2": "Pings/Pongs",
    "3": "Reserved bits",
    "4": "Opcodes",
    "5": "Fragmentation",
    "6": "UTF-8 handling",
    "7": "Close handling",
    "9": "Limits/performance",
    "10": "Miscellaneous",
    "12": "Compression: payloads",
    "13": "Compression: parameters",
}


def server_command(server: str, port: int) -> list[str]:
    """The command line serving the echo app on ``port``; ``server`` names which."""
    common = [HOST, str(port)]
    if server == "ringloop":
        return [
            sys.executable,
            *("-m", "ringloop", "serve", "ws_echo_app:app", "--app-dir", str(HERE)),
            *("--host", common[0], "--port", common[1]),
            *("--no-access-log", "--log-level", "warning", "--ws-per-message-deflate", "true"),
        ]
    impl = {"uvicorn": "websockets", "uvicorn-wsproto": "wsproto"}.get(server)
    if impl is None:
        raise ValueError(f"unknown server {server!r}: ringloop, uvicorn or uvicorn-wsproto")
    return [
        sys.executable,
        *("-m", "uvicorn", "ws_echo_app:app", "--app-dir", str(HERE)),
        *("--host", common[0], "--port", common[1], "--ws", impl),
        *("--ws-per-message-deflate", "true", "--no-access-log", "--log-level", "warning"),
    ]


def find_wstest() -> str:
    """The wstest command, installing it first if needed (``install_autobahn.sh``)."""
    proc = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=900)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"wstest is not available: {why}")
    return lines[-1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _answers_http(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            return sock.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


@dataclass
class Case:
    id: str
    behavior: str
    behavior_close: str
    reason: str


@dataclass
class Summary:
    """What one fuzzing run found: counts per group, and the cases that did not pass."""

    server: str
    cases: list[Case]
    seconds: float
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for case in self.cases:
            group = self.counts.setdefault(case.id.split(".")[0], dict.fromkeys(COLUMNS, 0))
            # FAILED also collects Autobahn's rarer verdicts (WRONG CODE, UNCLEAN, NO CLOSE...):
            # none of them is a pass; `failures` names the exact one.
            column = case.behavior if case.behavior in COLUMNS else "FAILED"
            group[column] += 1

    @property
    def failures(self) -> list[Case]:
        return [c for c in self.cases if c.behavior not in PASSING]

    @property
    def ok(self) -> bool:
        return bool(self.cases) and not self.failures

    def table(self) -> str:
        """The counts as a markdown table, one row per case group and a total."""
        rows = ["| group | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
        totals = dict.fromkeys(COLUMNS, 0)
        for group in sorted(self.counts, key=int):
            counts = self.counts[group]
            label = f"{group}.x {GROUPS.get(group, '')}".strip()
            rows.append(f"| {label} | " + " | ".join(str(counts[c]) for c in COLUMNS) + " |")
            for c in COLUMNS:
                totals[c] += counts[c]
        rows.append("| **total** | " + " | ".join(f"**{totals[c]}**" for c in COLUMNS) + " |")
        return "\n".join(rows)

    def failure_lines(self) -> list[str]:
        return [
            f"{c.id}: {c.behavior} (close: {c.behavior_close}) — {c.reason}" for c in self.failures
        ]


def _case_key(case_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in case_id.split("."))


def read_report(outdir: Path, agent: str) -> list[Case]:
    """The cases of ``agent`` in wstest's ``index.json``, with each failure's reason."""
    index = json.loads((outdir / "index.json").read_text())
    if agent not in index:
        raise RuntimeError(f"index.json has no results for {agent!r} (agents: {list(index)})")
    cases = []
    for case_id, entry in sorted(index[agent].items(), key=lambda kv: _case_key(kv[0])):
        reason = ""
        if entry["behavior"] not in PASSING:
            with contextlib.suppress(OSError, ValueError, KeyError):
                detail = json.loads((outdir / entry["reportfile"]).read_text())
                reason = f"{detail.get('result', '')} {detail.get('resultClose', '')}".strip()
        cases.append(Case(case_id, entry["behavior"], entry["behaviorClose"], reason))
    return cases


def run(server: str, cases: list[str], outdir: Path, timeout: float = 3600) -> Summary:
    """Fuzz ``server`` with ``cases`` (wstest patterns); reports land in ``outdir``.

    Raises RuntimeError when the run cannot happen (no wstest, the server does not start,
    wstest fails or times out); a server that merely fails cases returns a Summary.
    """
    wstest = find_wstest()
    outdir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = (outdir / "server.log").open("w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        server_command(server, port), stdout=log, stderr=subprocess.STDOUT, env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers_http(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{server} did not start serving on port {port}: "
                    + _tail(outdir / "server.log")
                )
            time.sleep(0.05)
        spec = {
            "outdir": str(outdir),
            "servers": [{"agent": server, "url": f"ws://{HOST}:{port}"}],
            "cases": cases,
            "exclude-cases": [],
            "exclude-agent-cases": {},
        }
        (outdir / "spec.json").write_text(json.dumps(spec, indent=2))
        t0 = time.monotonic()
        try:
            fuzz = subprocess.run(
                [wstest, "-m", "fuzzingclient", "-s", str(outdir / "spec.json")],
                cwd=outdir,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"wstest did not finish in {timeout:.0f} s") from exc
        seconds = time.monotonic() - t0
        (outdir / "wstest.log").write_text(fuzz.stdout + fuzz.stderr)
        if fuzz.returncode != 0 or not (outdir / "index.json").exists():
            raise RuntimeError(f"wstest exited {fuzz.returncode}: " + _tail(outdir / "wstest.log"))
        if proc.poll() is not None:
            raise RuntimeError(
                f"{server} died during the run (exit {proc.returncode}): "
                + _tail(outdir / "server.log")
            )
        return Summary(server, read_report(outdir, server), seconds)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(no output)"
    return "(no output)"


def markdown(summary: Summary, cases: list[str]) -> str:
    """The run as a markdown page: what ran, the table, the cases that did not pass."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = _versions(summary.server)
    lines = [
        f"# Autobahn|Testsuite: `{summary.server}`",
        "",
        "Written by `make autobahn` (tests/ws/ws_autobahn.py); do not edit by hand.",
        "",
        f"- server: `python {' '.join(server_command(summary.server, 0)[1:5])}` … serving "
        f"`tests/ws/ws_echo_app.py` (echo, permessage-deflate on); {versions}",
        f"- cases: `{', '.join(cases)}` — {len(summary.cases)} cases in "
        f"{summary.seconds:.0f} s, {when}",
        f"- verdict: {'every case passed' if summary.ok else f'{len(summary.failures)} case(s) did not pass'}"
        " (OK, NON-STRICT and INFORMATIONAL pass)",
        "",
        summary.table(),
    ]
    if summary.failures:
        lines += ["", "## Cases that did not pass", ""]
        lines += [f"- {line}" for line in summary.failure_lines()]
    return "\n".join(lines) + "\n"


def readme_block(summary: Summary, cases: list[str], page: Path | None) -> str:
    """The README's Autobahn section: one line on the run, the table, the failures."""
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    verdict = (
        "every case OK, NON-STRICT or INFORMATIONAL"
        if summary.ok
        else f"**{len(summary.failures)} case(s) did not pass**"
    )
    lines = [
        f"`make autobahn`, {when}: `{summary.server}` ({_versions(summary.server)}) against "
        f"the fuzzing client, cases `{', '.join(cases)}`, {len(summary.cases)} cases in "
        f"{summary.seconds:.0f} s: {verdict}."
        + (f" The run's page: [{page.name}]({page.as_posix()})." if page else ""),
        "",
        summary.table(),
    ]
    lines += [f"- {line}" for line in summary.failure_lines()]
    return "\n".join(lines)


def update_readme(readme: Path, body: str) -> bool:
    """Replace the text between the autobahn markers of ``readme``; False if it has none."""
    begin, end = "<!-- autobahn:begin -->", "<!-- autobahn:end -->"
    text = readme.read_text()
    if begin not in text or end not in text:
        return False
    head, rest = text.split(begin, 1)
    _old, tail = rest.split(end, 1)
    readme.write_text(f"{head}{begin}\n{body}\n{end}{tail}")
    return True


@functools.cache
def _versions(server: str) -> str:
    """What served, with the commit (``main`` asks before the run, so a commit made while
    the run goes is not credited with it)."""
    import importlib.metadata as md

    names = ["ringloop"] if server == "ringloop" else ["uvicorn", "websockets", "wsproto"]
    found = []
    for name in names:
        with contextlib.suppress(md.PackageNotFoundError):
            found.append(f"{name} {md.version(name)}")
    if server == "ringloop" and (commit := _ringloop_commit()):
        found[-1:] = [f"{found[-1]} at {commit}" if found else f"ringloop at {commit}"]
    return ", ".join(found)


def _ringloop_commit() -> str | None:
    """The commit of the ringloop checkout the server imports (an editable install's), with
    ``+dirty`` when its tree has changes: the version number alone does not say which build
    passed."""
    import importlib.util

    spec = importlib.util.find_spec("ringloop")
    if spec is None or spec.origin is None:
        return None
    where = str(Path(spec.origin).parent)
    try:
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server", default="ringloop", choices=["ringloop", "uvicorn", "uvicorn-wsproto"]
    )
    parser.add_argument(
        "--cases",
        default="selection",
        help="'selection' (make test's), 'all', or wstest patterns separated by commas",
    )
    parser.add_argument("--out", type=Path, help="report directory (default: a temporary one)")
    parser.add_argument("--markdown", type=Path, help="also write the summary page here")
    parser.add_argument(
        "--readme", type=Path, help="also put the table between this file's autobahn markers"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for wstest")
    args = parser.parse_args(argv)
    cases = {"selection": SELECTION, "all": ["*"]}.get(
        args.cases, [c.strip() for c in args.cases.split(",") if c.strip()]
    )
    if not cases:
        parser.error("--cases names no case")
    outdir = args.out or Path(tempfile.mkdtemp(prefix="autobahn-"))
    try:
        _versions(args.server)
        summary = run(args.server, cases, outdir.resolve(), args.timeout)
    except RuntimeError as exc:
        print(f"ws_autobahn: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.server}: {len(summary.cases)} cases in {summary.seconds:.1f} s; reports in {outdir}"
    )
    print(summary.table())
    for line in summary.failure_lines():
        print(f"  {line}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(summary, cases))
        print(f"wrote {args.markdown}")
    if args.readme:
        page = None
        if args.markdown:  # a link from the README's folder to the page
            page = Path(os.path.relpath(args.markdown.resolve(), args.readme.resolve().parent))
        if update_readme(args.readme, readme_block(summary, cases, page)):
            print(f"updated {args.readme}")
        else:
            print(f"ws_autobahn: {args.readme} has no autobahn markers", file=sys.stderr)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
