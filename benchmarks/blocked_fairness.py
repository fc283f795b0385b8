"""Fairness behind a blocking handler: how evenly a loop serves uploads while it is blocked.

The PDF-ingest example's blocking endpoint in miniature, on the loop alone (no HTTP): N client
threads each upload a body of ``--size`` bytes, wait for a one-byte answer, and upload again
(a closed loop, ``--total`` uploads in all). The server's protocol answers a complete body from
``call_soon`` after blocking the loop for ``--block`` seconds, as a synchronous handler would.
Every loop then serves the same number of uploads per second (one per ``--block``); what
differs is who waits: on a fair loop every upload waits about N handlers (p50 = p99), on an
unfair one some connections are served again and again while others wait several rounds.

Figures per loop: p50/p95/p99/max upload latency and how many uploads each connection got
served (its spread). Each loop runs in a fresh process (``loops.make_loop``).

    python benchmarks/blocked_fairness.py [--loops asyncio uvloop ringloop-io_uring ringloop-epoll]
        [--clients 100] [--size 233609] [--block 0.06] [--total 300] [--no-readme]

Writes ``results/blocked_fairness.json`` and the README section ``blocked-fairness``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import (  # noqa: E402
    claim_stdout,
    describe_failure,
    emit,
    emit_error,
    machine_info,
    run_worker,
)
from loops import LOOPS, make_loop  # noqa: E402
from reporting import (  # noqa: E402
    RESULTS_DIR,
    add_output_args,
    markdown_table,
    measured_line,
    output_choice,
    publish,
)

DEFAULT_LOOPS = ["asyncio", "uvloop", "ringloop-io_uring", "ringloop-epoll"]


def percentile(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(p * (len(sorted_values) - 1)))]


async def serve_uploads(clients: int, size: int, block: float, total: int) -> dict[str, Any]:
    """The scenario on the running loop; returns latencies (s) and uploads served per client."""
    loop = asyncio.get_running_loop()
    served: collections.Counter[int] = collections.Counter()

    class BlockingUploads(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            self.transport, self.got = transport, 0

        def data_received(self, data: bytes) -> None:
            self.got += len(data)
            if self.got >= size:
                self.got -= size
                loop.call_soon(self.handle)

        def handle(self) -> None:
            time.sleep(block)  # the synchronous handler
            served[id(self)] += 1
            self.transport.write(b"k")

    server = await loop.create_server(BlockingUploads, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    latencies: list[float] = []
    left = [total]
    lock = threading.Lock()
    go = threading.Event()
    body = b"u" * size

    def client() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            go.wait()
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                t0 = time.monotonic()
                s.sendall(body)
                if s.recv(1) != b"k":
                    raise RuntimeError("the server closed the connection")
                latencies.append(time.monotonic() - t0)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    await asyncio.sleep(0.5)  # every connection made before the first upload
    start = time.monotonic()
    go.set()
    while any(t.is_alive() for t in threads):
        await asyncio.sleep(0.05)
    wall = time.monotonic() - start
    server.close()
    await server.wait_closed()
    return {"latencies_s": latencies, "served": sorted(served.values()), "wall_s": wall}


def worker(name: str, args: argparse.Namespace) -> None:
    """Run the scenario on loop ``name`` in this process; report on the harness's protocol
    (one "result" line, or an "error" line)."""
    stream = claim_stdout()
    try:
        loop, info = make_loop(name)
        try:
            out = loop.run_until_complete(
                serve_uploads(args.clients, args.size, args.block, args.total)
            )
        finally:
            loop.close()
    except Exception as exc:  # reported as data: the runner goes on with the next loop
        emit_error(stream, "run", exc)
        return
    lat = sorted(out["latencies_s"])
    served = out["served"]
    emit(
        stream,
        {
            "type": "result",
            "loop": name,
            **info,
            "uploads": len(lat),
            "per_s": round(len(lat) / out["wall_s"], 2),
            **{f"p{int(p * 100)}_s": round(percentile(lat, p), 3) for p in (0.5, 0.95, 0.99)},
            "max_s": round(lat[-1], 3),
            "p99_over_p50": round(percentile(lat, 0.99) / percentile(lat, 0.5), 2),
            "served_min": served[0] if served else 0,
            "served_max": served[-1] if served else 0,
        },
    )


def console(result: dict[str, Any]) -> list[str]:
    return [readme_body(result)]


def readme_body(result: dict[str, Any]) -> str:
    s = result["settings"]
    rows = [
        [
            f"{r['loop']} {r.get('version', '')}",
            str(r["uploads"]),
            str(r["per_s"]),
            f"{r['p50_s']:.2f}",
            f"{r['p95_s']:.2f}",
            f"{r['p99_s']:.2f}",
            f"{r['max_s']:.2f}",
            f"{r['p99_over_p50']:.2f}",
            f"{r['served_min']}-{r['served_max']}",
        ]
        if "error" not in r
        else [r["loop"], "error: " + r["error"][:80], "", "", "", "", "", "", ""]
        for r in result["rows"]
    ]
    table = markdown_table(
        ["loop", "uploads", "per s", "p50 s", "p95 s", "p99 s", "max s", "p99/p50", "served/conn"],
        rows,
    )
    return (
        measured_line(result["machine"])
        + f"{s['clients']} clients uploading {s['size']:,} B each, a handler that blocks "
        f"{s['block'] * 1000:.0f} ms per upload, {s['total']} uploads.\n\n{table}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loops", nargs="+", default=DEFAULT_LOOPS, choices=sorted(LOOPS))
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--size", type=int, default=233_609, help="bytes per upload")
    ap.add_argument("--block", type=float, default=0.06, help="seconds the handler blocks")
    ap.add_argument("--total", type=int, default=300, help="uploads in all")
    ap.add_argument("--quick", action="store_true", help="20 ms handler, 100 uploads")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    add_output_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.block, args.total = 0.02, 3 * args.clients
    if min(args.clients, args.size, args.total) < 1 or args.block < 0:
        ap.error("--clients, --size and --total must be at least 1, --block at least 0")
    if args.worker:
        worker(args.worker, args)
        return 0
    t0 = time.monotonic()
    rows = []
    for name in args.loops:
        cmd = [sys.executable, __file__, "--worker", name]
        cmd += ["--clients", str(args.clients), "--size", str(args.size)]
        cmd += ["--block", str(args.block), "--total", str(args.total)]
        run = run_worker(cmd, LOOPS[name].env, timeout=900)
        results = [line for line in run.lines if line["type"] == "result"]
        errors = [line["error"] for line in run.lines if line["type"] == "error"]
        if results:
            rows.append(results[-1])
        else:
            rows.append({"loop": name, "error": errors[-1] if errors else describe_failure(run)})
        print(f"{name}: done", file=sys.stderr)
    settings = {k: getattr(args, k) for k in ("clients", "size", "block", "total")}
    settings["seconds"] = round(time.monotonic() - t0)
    result = {"machine": machine_info(), "settings": settings, "rows": rows}
    out_dir, update_readme = output_choice(args)
    publish(
        result,
        out_dir or RESULTS_DIR,
        "blocked_fairness.json",
        console,
        section="blocked-fairness" if update_readme else None,
        readme_body=readme_body,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
