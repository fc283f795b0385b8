"""Instructions per HTTPS request and per full TLS handshake, counted by callgrind.

The HTTPS suite's CPU figures move with the machine's load; instruction counts do not. For
each TLS server of ``https_suite`` (ringloop, granian; uvicorn or the TLS floor ``rust-floor`` with
``--subjects``) and each
key kind (RSA-2048, ECDSA P-256) this runs the server under callgrind three times:

  0. started, one TLS readiness request, stopped (the baseline);
  1. the same plus ``--requests`` keep-alive requests over ``--connections`` connections;
  2. the same plus ``--handshakes`` new connections, each a full handshake (the stdlib's
     ``ssl`` client never offers a session it was not given) and one request;
  3. with ``--net``: the same as 1 but one request per connection (the connections' set-up
     alone).

Per request = (run 1 − run 0) / requests (connection set-up spread over them); net per
request = (run 1 − run 3) / (requests − connections): a keep-alive request alone, its
connection's handshake left out; per handshake = (run 2 − run 0) / handshakes (no run 2 with
``--handshakes 0``). The subject ``ringloop-asgi-cleartext`` is ringloop without TLS (the
client's sockets plain too), for scale. The client is Python's ``ssl`` (OpenSSL: X25519
key share, TLS 1.3, AES-256-GCM or ChaCha20 as the server picks), outside valgrind. User
space only (callgrind does not count the kernel). ``--top N`` prints the N functions whose own
(exclusive) instructions grew most from the baseline (with ``--net``, a keep-alive request's
from run 3), per request and per handshake: where one more of each goes.

    .venv/bin/python benchmarks/https_callgrind.py [--subjects ringloop-asgi granian-asgi]
        [--keys rsa ecdsa] [--requests 4000] [--connections 8] [--handshakes 100] [--net]
        [--top 25] [--keep DIR]
        [--s-time SECONDS] [--valgrind-flag=--cache-sim=yes ...]

``--s-time``: the handshakes are ``openssl s_time -new``'s (the suite's client, HTTP/1.0, the
server closes) for that long, however many it makes, instead of Python's. ``--valgrind-flag``:
passed on to valgrind (with ``--cache-sim=yes`` and ``--keep``, ``https_perf.py misses DIR``
prints the simulated misses by library).

Output: ``results/https_callgrind.json`` and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import http_callgrind  # noqa: E402
import http_peers  # noqa: E402
import https_suite  # noqa: E402

RESULTS = harness.BENCH_DIR / "results" / "https_callgrind.json"
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
CLEARTEXT = "ringloop-asgi-cleartext"


def server_command(subject: str, port: int, cert: Path, key: Path, work: Path) -> list[str]:
    if subject == CLEARTEXT:
        return http_peers._ringloop("asgi")("hello", port, work)
    return https_suite.command(subject, port, cert, key, work)


def answers(subject: str, port: int) -> bool:
    if subject != CLEARTEXT:
        return https_suite.answers_tls(port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(REQUEST)
            return s.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def client_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def read_response(s: socket.socket, buf: bytearray) -> None:
    """One whole response (Content-Length framed) off `s`; what follows stays in `buf`."""
    while True:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = bytes(buf[:head_end]).lower()
            i = head.find(b"content-length:")
            length = int(head[i + 15 :].split(b"\r\n", 1)[0]) if i >= 0 else 0
            total = head_end + 4 + length
            if len(buf) >= total:
                del buf[:total]
                return
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("server closed mid-response")
        buf += chunk


def keep_alive(port: int, requests: int, connections: int, tls: bool = True) -> None:
    ctx = client_context()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=600) for _ in range(connections)]
    if tls:
        socks = [ctx.wrap_socket(s) for s in socks]
    bufs = [bytearray() for _ in socks]
    sent = 0
    # Round-robin, one request in flight per connection.
    while sent < requests:
        for s in socks[: requests - sent]:
            s.sendall(REQUEST)
        for s, b in zip(socks[: requests - sent], bufs, strict=False):
            read_response(s, b)
        sent += min(connections, requests - sent)
    for s in socks:
        s.close()


def handshakes(port: int, count: int) -> None:
    ctx = client_context()
    for _ in range(count):
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=600)) as s:
            s.sendall(REQUEST)
            read_response(s, bytearray())


def s_time(port: int, seconds: int) -> int:
    """``openssl s_time -new`` for `seconds` (the suite's handshake client: HTTP/1.0, the
    server closes); how many connections it made."""
    out = subprocess.run(
        ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-new", "-www", "/"]
        + ["-time", str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
    )
    m = re.search(r"(\d+) connections in", out.stdout)
    if m is None:
        raise ConnectionError(f"s_time: {out.stdout[-200:]}{out.stderr[-200:]}")
    return int(m.group(1))


def function_costs(out_dir: Path) -> dict[str, int]:
    """Each function's own (exclusive) instructions in the run's largest callgrind output
    (the server process; the others are short-lived helpers), every function listed."""
    files = sorted(out_dir.glob("callgrind.out.*"), key=lambda p: p.stat().st_size, reverse=True)
    return file_costs(files[0]) if files else {}


def file_costs(path: Path) -> dict[str, int]:
    """Each function's own (exclusive) instructions in one callgrind output file."""
    if shutil.which("callgrind_annotate") is None:
        return {}
    proc = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    costs: dict[str, int] = {}
    for ln in proc.stdout.splitlines():
        head, _, rest = ln.strip().partition(" ")
        if not head or not head[0].isdigit() or not rest:
            continue
        name = rest.split(")", 1)[-1].strip() if rest.lstrip().startswith("(") else rest.strip()
        # "=> callee (Nx)" lines are calls (inclusive: counting them would count twice).
        if name.startswith(("PROGRAM TOTALS", "=>", "events annotated")):
            continue
        costs[name] = costs.get(name, 0) + int(head.replace(",", ""))
    return costs


def top_differences(run: dict[str, int], base: dict[str, int], units: int, n: int) -> list[str]:
    """The n functions whose instructions grew most from the baseline, per request or
    handshake (``units``): where one more request or handshake spends."""
    diff = {k: (v - base.get(k, 0)) / units for k, v in run.items()}
    total = sum(diff.values())
    lines = []
    for name, per in sorted(diff.items(), key=lambda kv: -kv[1])[:n]:
        lines.append(f"{per:>10,.0f} ({100 * per / total if total else 0:4.1f}%)  {name}")
    return lines


def one_run(
    subject: str,
    cert: Path,
    key: Path,
    work: Path,
    mode: str,
    n: int,
    conns: int,
    top: int,
    keep: Path | None = None,
    valgrind_flags: tuple[str, ...] = (),
    s_time_seconds: int = 0,
) -> dict[str, Any]:
    out_dir = Path(tempfile.mkdtemp(prefix="cg-", dir=work))
    port = http_peers.free_port()
    inner = server_command(subject, port, cert, key, work)
    under = http_callgrind.callgrind_command(inner, out_dir)
    under[1:1] = valgrind_flags  # after "valgrind": e.g. --cache-sim=yes
    cmd = harness.pinned(under, https_suite.SERVER_CPU)
    env = {
        **os.environ,
        "PYTHONPATH": str(http_peers.APPS_DIR),
        "PYTHONDONTWRITEBYTECODE": "1",
        "RINGLOOP_BACKEND": "io_uring",
    }
    srv = http_peers.PeerServer(cmd, port, env, "/")
    t0 = time.monotonic()
    try:
        deadline = time.monotonic() + 300
        while not answers(subject, port):
            if not srv.alive() or time.monotonic() > deadline:
                return {"error": f"did not start: {srv.stderr_tail()}"}
            time.sleep(0.5)
        if mode in ("keep-alive", "keep-alive-setup"):
            keep_alive(port, n, conns, subject != CLEARTEXT)
        elif mode == "handshake" and s_time_seconds:
            n = s_time(port, s_time_seconds)
        elif mode == "handshake":
            handshakes(port, n)
        pokes = http_callgrind.stop_under_valgrind(srv)
        if srv.alive():
            return {"error": "did not stop on SIGTERM (counts lost)"}
        return {
            "instructions": http_callgrind.total_instructions(out_dir),
            "units": n,
            "wake_up_requests": pokes,
            "seconds": round(time.monotonic() - t0, 1),
            "costs": function_costs(out_dir) if top else {},
        }
    finally:
        srv.close()
        if keep is not None:
            shutil.copytree(out_dir, keep / f"{subject}-{cert.stem}-{mode}", dirs_exist_ok=True)
        shutil.rmtree(out_dir, ignore_errors=True)


def _n(v: int | None) -> str:
    return "—" if v is None else f"{v:,}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="https_callgrind.py", description=__doc__.split("\n")[0])
    p.add_argument("--subjects", nargs="+", default=["ringloop-asgi", "granian-asgi"])
    p.add_argument("--keys", nargs="+", default=list(https_suite.KEYS), choices=https_suite.KEYS)
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--handshakes", type=int, default=100, help="0: no handshake run")
    p.add_argument("--top", type=int, default=0)
    p.add_argument(
        "--keep",
        type=Path,
        help="copy each run's callgrind files here (for callgrind_annotate --tree)",
    )
    p.add_argument(
        "--valgrind-flag",
        action="append",
        default=[],
        help="one more flag for valgrind, e.g. --valgrind-flag=--cache-sim=yes (repeatable; "
        "with --keep, https_perf.py misses DIR reads the misses by library)",
    )
    p.add_argument(
        "--s-time",
        type=int,
        default=0,
        metavar="SECONDS",
        help="handshakes by openssl s_time -new for SECONDS (the suite's client) instead of "
        "--handshakes by Python's ssl",
    )
    p.add_argument(
        "--net",
        action="store_true",
        help="one more run per subject, the connections' set-up alone: a keep-alive request's "
        "instructions with its handshake left out (net_per_request)",
    )
    p.add_argument("--name", default=RESULTS.name)
    args = p.parse_args(argv)
    flags = tuple(args.valgrind_flag)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ringloop-https-cg-") as tmp:
        work = Path(tmp)
        keys = https_suite.make_keys(work)
        for kind in args.keys:
            cert, key = keys[kind]
            for subject in args.subjects:

                def run(
                    mode: str,
                    n: int,
                    conns: int,
                    s_time_seconds: int = 0,
                    common: tuple[str, Path, Path] = (subject, cert, key),
                ) -> dict[str, Any]:
                    return one_run(
                        *common, work, mode, n, conns, args.top, args.keep, flags, s_time_seconds
                    )

                base = run("baseline", 0, 0)
                ka = run("keep-alive", args.requests, args.connections)
                with_handshakes = args.handshakes > 0 and subject != CLEARTEXT
                hs = run("handshake", args.handshakes, 1, args.s_time) if with_handshakes else {}
                setup = (
                    run("keep-alive-setup", args.connections, args.connections) if args.net else {}
                )
                handshakes_done = hs.get("units", args.handshakes)
                row: dict[str, Any] = {
                    "subject": subject,
                    "key": kind,
                    "baseline": base,
                    "keep_alive": ka,
                    "handshake": hs,
                    "keep_alive_setup": setup,
                }
                if all("instructions" in r for r in (base, ka)):
                    row["per_request"] = round(
                        (ka["instructions"] - base["instructions"]) / args.requests
                    )
                if "instructions" in hs and "instructions" in base:
                    row["per_handshake"] = round(
                        (hs["instructions"] - base["instructions"]) / handshakes_done
                    )
                net_units = args.requests - args.connections
                if "instructions" in setup and "instructions" in ka and net_units > 0:
                    row["net_per_request"] = round(
                        (ka["instructions"] - setup["instructions"]) / net_units
                    )
                rows.append(row)
                print(
                    json.dumps(
                        {
                            k: row.get(k)
                            for k in (
                                "subject",
                                "key",
                                "per_request",
                                "net_per_request",
                                "per_handshake",
                            )
                        }
                    ),
                    flush=True,
                )
                against = {
                    "keep_alive": (
                        setup if args.net else base,
                        net_units if args.net else args.requests,
                    ),
                    "handshake": (base, handshakes_done),
                }
                for name, (ref_run, units) in against.items():
                    if not row[name]:
                        continue
                    if "error" in row[name]:
                        print(f"  {name}: {row[name]['error']}")
                    elif args.top:
                        top = top_differences(
                            row[name]["costs"], ref_run.get("costs", {}), units, args.top
                        )
                        row[name]["top"] = top
                        for line in top:
                            print(f"  {name} per unit: {line}")
                for r in (base, ka, hs, setup):
                    r.pop("costs", None)
    for kind in args.keys:
        ref = next(
            (
                r
                for r in rows
                if r["key"] == kind and r["subject"] == "granian-asgi" and "per_request" in r
            ),
            None,
        )
        for r in rows:
            if r["key"] != kind or not ref:
                continue
            for mine, vs in (
                ("per_request", "request_vs_granian"),
                ("net_per_request", "net_request_vs_granian"),
                ("per_handshake", "handshake_vs_granian"),
            ):
                if r.get(mine) and ref.get(mine):
                    r[vs] = round(r[mine] / ref[mine], 2)
    result = {
        "suite": "https_callgrind",
        "requests": args.requests,
        "connections": args.connections,
        "handshakes": args.handshakes,
        "rows": rows,
    }
    (harness.BENCH_DIR / "results" / args.name).write_text(json.dumps(result, indent=2) + "\n")
    print(
        "| key | server | instr/request | × granian | net instr/request | × granian "
        "| instr/handshake | × granian |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['key']} | {r['subject']} | {_n(r.get('per_request'))} | {r.get('request_vs_granian', '—')} "
            f"| {_n(r.get('net_per_request'))} | {r.get('net_request_vs_granian', '—')} "
            f"| {_n(r.get('per_handshake'))} | {r.get('handshake_vs_granian', '—')} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
