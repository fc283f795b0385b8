"""Static files: `ringloop serve --static-path-mount` against nginx (Debian) and granian
(PyPI) serving the same directory, a small file and a 1 MiB file.

granian runs `--runtime-mode mt` with one runtime thread: in `st` mode (what the HTTP suite
uses for ASGI) granian 2.8.7 served 22 requests/s of static files with 64 wrk timeouts.

Each server runs pinned to core 0 (one worker, one thread where it has the setting, access
logs off), wrk to core 1 (`-t1 -c32`, keep-alive). Server CPU per request is read from /proc
for the server's whole process tree over the load window, next to requests/s and wrk's
p99. Rounds rotate the order of the servers; the table gives each figure's median.

    python benchmarks/static_files.py [--seconds 5] [--rounds 3] [--connections 32]

Output: ``results/static_files.json`` and a Markdown table on stdout. Not part of `make bench`
(it needs nginx, which the script apt-gets when missing and root).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import tools  # noqa: E402

HERE = Path(__file__).resolve().parent
PY = sys.executable
SERVER_CPU, CLIENT_CPU = 0, 1
FILES = {"small (1 KiB)": ("small.txt", 1024), "1 MiB": ("big.bin", 1024 * 1024)}
APP = "async def app(scope, receive, send):\n    raise RuntimeError('static only')\n"

NGINX_CONF = """{user}worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 60;
    types {{ text/plain txt; application/octet-stream bin; }}
    client_body_temp_path {work}/tmp; proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp; scgi_temp_path {work}/tmp;
    server {{
        listen 127.0.0.1:{port} reuseport;
        location /static/ {{ alias {www}/; expires 1d; }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(work: Path, port: int) -> dict[str, list[str]]:
    www = str(work / "www")
    nginx_conf = work / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""
    nginx_conf.write_text(NGINX_CONF.format(user=user, work=work, port=port, www=www))
    return {
        "ringloop": [
            *(PY, "-m", "ringloop", "serve", "static_app:app", "--app-dir", str(work)),
            *("--port", str(port), "--no-access-log", "--log-level", "warning"),
            *("--static-path-route", "/static", "--static-path-mount", www),
        ],
        "granian": [
            *(PY, "-m", "granian", "--interface", "asgi", "--port", str(port)),
            *("--workers", "1", "--runtime-threads", "1", "--runtime-mode", "mt"),
            *("--http", "1", "--no-ws", "--log-level", "warning", "--no-access-log"),
            *("--static-path-route", "/static", "--static-path-mount", www),
            *("--working-dir", str(work), "static_app:app"),
        ],
        "nginx": ["/usr/sbin/nginx", "-p", str(work), "-c", str(nginx_conf), "-e", "stderr"],
    }


def answers(port: int, path: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            return s.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def run_one(name: str, cmd: list[str], port: int, path: str, args, wrk: str) -> dict:
    proc = subprocess.Popen(
        harness.pinned(cmd, SERVER_CPU), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not answers(port, path):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}{path}"
        warm = tools.wrk_command(wrk, url, connections=args.connections, duration=1)
        subprocess.run(harness.pinned(warm, CLIENT_CPU), capture_output=True, check=True)
        cmd_wrk = tools.wrk_command(wrk, url, connections=args.connections, duration=args.seconds)
        window = harness.CpuWindow(proc.pid, tree=True)
        out = subprocess.run(harness.pinned(cmd_wrk, CLIENT_CPU), capture_output=True, text=True)
        window.close()
        w = tools.parse_wrk(out.stdout)
        if w.get("non_2xx") or any(w.get("socket_errors", {}).values()):
            raise RuntimeError(f"{name}: errors in the run: {out.stdout}")
        r = harness.rates(
            w["requests"],
            w["seconds"],
            window.server_seconds or 0.0,
            window.children_seconds,
            window.wall,
        )
        r["p99_us"] = w["latency_us"].get("99")
        return r
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--subjects", nargs="*", default=["ringloop", "granian", "nginx"])
    args = ap.parse_args()
    wrk, why = tools.ensure_wrk()
    if wrk is None:
        sys.exit(f"no wrk: {why}")
    if "nginx" in args.subjects:
        found, why = tools.ensure_debian(
            "nginx",
            "nginx-light",
            lambda: next(
                (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)),
                None,
            ),
        )
        if found is None:
            sys.exit(f"no nginx: {why}")
    load0 = os.getloadavg()
    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "www").mkdir()
        (work / "tmp").mkdir()
        for fname, size in FILES.values():
            (work / "www" / fname).write_bytes(os.urandom(size))
        (work / "static_app.py").write_text(APP)
        for rnd in range(args.rounds):
            order = (
                args.subjects[rnd % len(args.subjects) :]
                + args.subjects[: rnd % len(args.subjects)]
            )
            for label, (fname, _) in FILES.items():
                for name in order:
                    port = free_port()
                    cmd = commands(work, port)[name]
                    r = run_one(name, cmd, port, f"/static/{fname}", args, wrk)
                    results.setdefault(label, {}).setdefault(name, []).append(r)
                    print(
                        f"  round {rnd + 1} {label:14} {name:9} {r['rate']:9.0f} req/s "
                        f"{r['cpu_us']:7.1f} us/req  p99 {r['p99_us'] or 0:8.0f} us",
                        flush=True,
                    )
    load1 = os.getloadavg()
    med = {
        label: {
            name: {
                k: statistics.median(x[k] for x in runs if x.get(k) is not None)
                for k in ("rate", "cpu_us", "p99_us", "server_busy")
            }
            for name, runs in by.items()
        }
        for label, by in results.items()
    }
    print(f"\nload average before {load0[0]:.1f}, after {load1[0]:.1f} (2 cores)\n")
    print("| file | server | req/s | server CPU µs/req | p99 µs | CPU/req vs nginx | vs granian |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, by in med.items():
        for name, m in by.items():
            vs_n = m["cpu_us"] / by["nginx"]["cpu_us"] if "nginx" in by else float("nan")
            vs_g = m["cpu_us"] / by["granian"]["cpu_us"] if "granian" in by else float("nan")
            print(
                f"| {label} | {name} | {m['rate']:.0f} | {m['cpu_us']:.1f} | {m['p99_us']:.0f} "
                f"| {vs_n:.2f}x | {vs_g:.2f}x |"
            )
    out = HERE / "results" / "static_files.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "load_before": load0,
                "load_after": load1,
                "machine": harness.machine_info(),
                "runs": results,
                "medians": med,
            },
            indent=1,
        )
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
