"""The HTTPS rows of the HTTP suite: TLS servers side by side, server CPU µs per request.

Subjects: ``ringloop serve`` (TLS in Rust: rustls, ``src/tls/``), granian (rustls too),
uvicorn (the stdlib's ``ssl``, OpenSSL), and two references: nginx (OpenSSL) and the TLS floor
``rust-floor`` (``benchmarks/tls_floor/``: a canned responder on one thread and epoll with
ringloop's rustls and aws-lc configuration, the least a server on that TLS stack can spend;
built here with cargo on first use). Each runs one worker pinned to CPU 0, serving the ASGI
plaintext app (nginx: its ``return 200``; the floor: the same response, canned). The load
runs on CPU 1. Scenarios, each with an RSA-2048 and an ECDSA P-256 certificate:

- ``keep-alive``: wrk over TLS, 64 connections, one request after another on each;
- ``handshake``: ``openssl s_time -new``, a new connection with a *full* handshake (no
  session resumption) and one request per connection, sequentially. wrk is not used here:
  it reconnects its ``SSL`` object after ``SSL_clear``, which may resume the session, and a
  resumed handshake is not what this row measures.

The figure is server CPU (its whole process tree, from /proc) over the run divided by the
requests served; req/s and wrk's p99 are beside it. Rounds alternate the servers; the median
round is kept. ``--quick``: one round, 3 s each. ``--name``: the JSON's name in ``results/``
(``https.json``).

    .venv/bin/python benchmarks/run.py https [--quick] [-- --name NAME.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import http_peers
import tools
from suite_runner import make_keys

SERVER_CPU, LOAD_CPU = 0, 1
FLOOR = "rust-floor"
SUBJECTS = ("ringloop-asgi", "granian-asgi", "uvicorn", "nginx", FLOOR)
KEYS = ("rsa", "ecdsa")
RESULTS = harness.BENCH_DIR / "results" / "https.json"
FLOOR_DIR = harness.BENCH_DIR / "tls_floor"

NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
{user}error_log stderr error;
pid nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_timeout 60s;
    keepalive_requests 1000000;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location = / {{ return 200 "Hello, world!"; }}
    }}
}}
"""


@functools.cache
def build_floor() -> Path:
    """The TLS floor's binary (``tools.cargo_build`` in ``benchmarks/tls_floor``; the first
    build compiles aws-lc's C: minutes). Raises ``harness.ServerFailed``."""
    return tools.cargo_build(FLOOR_DIR, "tls_floor", FLOOR)


def command(subject: str, port: int, cert: Path, key: Path, work: Path) -> list[str]:
    if subject == "ringloop-asgi":
        cmd = http_peers._ringloop("asgi")("hello", port, work)
        return [*cmd, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    if subject == "granian-asgi":
        cmd = http_peers._granian("asgi", "st")("hello", port, work)
        return [*cmd[:-1], "--ssl-certificate", str(cert), "--ssl-keyfile", str(key), cmd[-1]]
    if subject == "uvicorn":
        cmd = http_peers._uvicorn("uvloop", "httptools")("hello", port, work)
        return [*cmd, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    if subject == "nginx":
        (work / "tmp").mkdir(exist_ok=True)
        user = "user root;\n" if harness.os.geteuid() == 0 else ""
        conf = work / "nginx.conf"
        conf.write_text(NGINX_CONF.format(user=user, port=port, cert=cert, key=key))
        return [
            http_peers.nginx_path() or "nginx",
            "-p",
            str(work),
            "-c",
            str(conf),
            "-e",
            "stderr",
        ]
    if subject == FLOOR:
        return [str(build_floor()), str(cert), str(key), str(port)]
    raise ValueError(subject)


def answers_tls(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
            with ctx.wrap_socket(raw) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                return s.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def start(subject: str, cert: Path, key: Path, work: Path) -> http_peers.PeerServer:
    port = http_peers.free_port()
    cmd = harness.pinned(command(subject, port, cert, key, work), SERVER_CPU)
    env = http_peers.server_env(http_peers.APPS_DIR)
    srv = http_peers.PeerServer(cmd, port, env, "/")
    deadline = time.monotonic() + 30
    while not answers_tls(port):
        if not srv.alive() or time.monotonic() > deadline:
            srv.stop(timeout=5)
            raise harness.ServerFailed(
                f"{subject}: not answering TLS on {port}: {srv.stderr_tail()}"
            )
        time.sleep(0.05)
    return srv


def keep_alive(wrk: str, srv: http_peers.PeerServer, seconds: float) -> dict[str, Any]:
    cmd = tools.wrk_command(wrk, f"https://127.0.0.1:{srv.port}/", connections=64, duration=seconds)
    window = harness.CpuWindow(srv.pid, tree=True)
    out = subprocess.run(
        harness.pinned(cmd, LOAD_CPU), capture_output=True, text=True, timeout=seconds + 60
    )
    window.close()
    w = tools.parse_wrk(out.stdout)
    n = w.get("requests") or 0
    return {
        "requests": n,
        "rate": n / w["seconds"] if n else None,
        "cpu_us": window.server_seconds / n * 1e6
        if n and window.server_seconds is not None
        else None,
        "p99_us": w["latency_us"].get("99"),
        "errors": w["socket_errors"],
    }


def handshakes(srv: http_peers.PeerServer, seconds: float) -> dict[str, Any]:
    cmd = [
        "openssl",
        "s_time",
        "-connect",
        f"127.0.0.1:{srv.port}",
        "-new",
        "-www",
        "/",
        "-time",
        str(max(1, round(seconds))),
    ]
    window = harness.CpuWindow(srv.pid, tree=True)
    out = subprocess.run(
        harness.pinned(cmd, LOAD_CPU), capture_output=True, text=True, timeout=seconds + 60
    )
    window.close()
    m = re.search(r"(\d+) connections in ([\d.]+)s", out.stdout)
    n = int(m.group(1)) if m else 0
    return {
        "requests": n,
        "rate": n / float(m.group(2)) if m and n else None,
        "cpu_us": window.server_seconds / n * 1e6
        if n and window.server_seconds is not None
        else None,
        "p99_us": None,
        "errors": {} if m else {"output": out.stdout[-300:] + out.stderr[-300:]},
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--subjects", nargs="*", default=list(SUBJECTS))
    p.add_argument("--name", default=RESULTS.name, help="the JSON's file name in results/")
    args = p.parse_args(argv)
    rounds, seconds = (1, 3.0) if args.quick else (args.rounds, args.seconds)
    wrk, why = tools.ensure_wrk()
    if wrk is None:
        print(f"https: {why}")
        return 1
    if FLOOR in args.subjects:
        print(f"  {FLOOR}: cargo build --release in {FLOOR_DIR}", flush=True)
        try:
            build_floor()
        except harness.ServerFailed as exc:
            print(f"  {exc}: left out")
            args.subjects.remove(FLOOR)
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        keys = make_keys(work)
        for r in range(rounds):
            order = (
                args.subjects[r % len(args.subjects) :] + args.subjects[: r % len(args.subjects)]
            )
            for kind in KEYS:
                cert, key = keys[kind]
                for subject in order:
                    sw = work / f"{subject}-{kind}-{r}"
                    sw.mkdir()
                    try:
                        srv = start(subject, cert, key, sw)
                    except (harness.ServerFailed, OSError) as exc:
                        print(f"  {subject} {kind}: failed: {exc}")
                        continue
                    try:
                        for scenario in ("keep-alive", "handshake"):
                            if scenario == "keep-alive":
                                res = keep_alive(wrk, srv, seconds)
                            else:
                                res = handshakes(srv, seconds)
                            runs.setdefault((scenario, kind, subject), []).append(res)
                            print(
                                f"  round {r + 1} {scenario:10} {kind:5} {subject:14} "
                                f"{res['cpu_us'] or 0:8.1f} µs/req  {res['rate'] or 0:9.0f} req/s",
                                flush=True,
                            )
                    finally:
                        srv.stop()
    table = summarise(runs)
    print(render(table))
    (RESULTS.parent / args.name).write_text(
        json.dumps(
            {
                "machine": harness.machine_info(),
                "rows": table,
                "runs": {"|".join(k): v for k, v in runs.items()},
            },
            indent=1,
        )
    )
    return 0


def summarise(runs: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for (scenario, kind, subject), rs in sorted(runs.items()):
        ok = [r for r in rs if r["cpu_us"] is not None]
        if not ok:
            continue
        mid = sorted(ok, key=lambda r: r["cpu_us"])[len(ok) // 2]
        rows.append(
            {
                "scenario": scenario,
                "key": kind,
                "subject": subject,
                **mid,
                "cpu_us_all": [round(r["cpu_us"], 1) for r in ok],
            }
        )
    for row in rows:
        ref = next(
            (
                r
                for r in rows
                if r["subject"] == "granian-asgi"
                and r["scenario"] == row["scenario"]
                and r["key"] == row["key"]
            ),
            None,
        )
        row["vs_granian"] = row["cpu_us"] / ref["cpu_us"] if ref else None
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | key | server | CPU µs/req | × granian | req/s | p99 ms |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        p99 = f"{r['p99_us'] / 1000:.2f}" if r.get("p99_us") else "—"
        vs = f"{r['vs_granian']:.2f}" if r.get("vs_granian") else "—"
        lines.append(
            f"| {r['scenario']} | {r['key']} | {r['subject']} | {r['cpu_us']:.1f} | {vs} | {r['rate']:,.0f} | {p99} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main(__import__("sys").argv[1:]))
