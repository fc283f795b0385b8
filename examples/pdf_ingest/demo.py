"""The PDF-ingest story in about a minute: a real S3 server, the app under `ringloop serve`, a
short load on the blocking and the async endpoint, the latency table, and the block report
that names the blocking line.

    python examples/pdf_ingest/demo.py --quick        # `make demo` runs this
    python examples/pdf_ingest/demo.py --servers uvicorn ringloop --concurrency 100

Starts everything it needs (moto on loopback, the server) and stops it all before exiting.
When `ringloop serve` has `--watch-threshold` (the server's own blocking report), the demo
passes `--watch-threshold` and prints what the server logged. Otherwise it shows the same
report from an in-process `no_blocking` scope around one request to /ingest/blocking.

The threshold is chosen from this machine's speed, so the blocked requests are caught on a
fast machine and a slow one alike: half the time one extraction of the sample PDF takes here
(best of three), at most 50 ms. A request to /ingest/blocking runs that extraction and then
its uploads in one slice of the loop, so its slice is at least twice the threshold. (A fixed
50 ms missed every request on a fast CPU, where the whole slice stayed under it.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare import run, table  # noqa: E402
from s3_server import S3Server  # noqa: E402
from samples import make_pdf  # noqa: E402
from servers import KINDS, ringloop_serve_flags  # noqa: E402

WATCH_FLAG = "--watch-threshold"
MAX_THRESHOLD = 0.05  # seconds: a slow machine's threshold, what the demo used to use
MIN_THRESHOLD = 0.002  # below this, scheduling noise would be reported too


def watch_threshold(pdf: bytes) -> float:
    """Half the time `extract(pdf)` takes on this machine (best of three), within
    [MIN_THRESHOLD, MAX_THRESHOLD]: a blocking request's slice holds one whole extraction
    and more, so it is reported whatever the CPU."""
    import time

    from extract import extract

    took = []
    for _ in range(3):
        t0 = time.perf_counter()
        extract(pdf)
        took.append(time.perf_counter() - t0)
    return round(min(MAX_THRESHOLD, max(MIN_THRESHOLD, min(took) / 2)), 4)


def server_block_report(log: str) -> str:
    """The part of the server's log from its first block report on."""
    at = log.find("loop blocked")
    if at < 0:
        return ""
    start = log.rfind("\n", 0, at) + 1
    return log[start:]


async def _one_blocking_request(pdf: bytes, threshold: float) -> str:
    import httpx
    from app import app
    from ringloop.watch import no_blocking

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
            await client.post("/ingest/blocking", content=pdf)  # FastAPI's first-call work
            async with no_blocking(threshold=threshold, action=lambda block: None) as scope:
                await client.post("/ingest/blocking", content=pdf)
    if not scope.blocks:
        return f"(no block over {threshold * 1000:g} ms this time)"
    return str(max(scope.blocks, key=lambda b: b.duration))


def inprocess_block_report(s3: S3Server, pdf: bytes, threshold: float) -> str:
    saved = dict(os.environ)
    os.environ.update(s3.env())
    try:
        return asyncio.run(_one_blocking_request(pdf, threshold))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 concurrent, 60 requests per run")
    ap.add_argument("--concurrency", type=int, nargs="+", default=None)
    ap.add_argument("--requests", type=int, default=None, help="requests per run")
    ap.add_argument("--servers", nargs="+", choices=KINDS, default=["ringloop"])
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra flag for `ringloop serve` (repeat; use --server-arg=--flag for flags)",
    )
    args = ap.parse_args(argv)
    concurrency = args.concurrency or ([20] if args.quick else [100])
    requests = args.requests or (60 if args.quick else 300)
    if min(concurrency) < 1 or requests < 1:
        ap.error("--concurrency and --requests must be at least 1")

    pdf = make_pdf()
    threshold = watch_threshold(pdf)
    extra = list(args.server_arg)
    watch_in_server = WATCH_FLAG in ringloop_serve_flags()
    if watch_in_server and WATCH_FLAG not in extra:
        extra += [WATCH_FLAG, str(threshold)]
    if WATCH_FLAG in extra[:-1]:
        threshold = float(extra[extra.index(WATCH_FLAG) + 1])

    print(f"sample PDF: {len(pdf)} bytes, 6 pages, 4 images; servers: {', '.join(args.servers)}")
    print(
        f"watch threshold: {threshold * 1000:g} ms (half of one extraction here, at most "
        f"{MAX_THRESHOLD * 1000:g} ms: a blocking request's slice holds a whole extraction)"
    )
    logs: dict[str, str] = {}
    flags = {"ringloop": extra, "uvicorn": []}
    rows = run(concurrency, 1, requests, pdf, tuple(args.servers), flags, logs=logs)
    print()
    print(table(rows))

    report = server_block_report(logs.get("ringloop", "")) if watch_in_server else ""
    if report:
        lines = [line for line in report.splitlines() if "loop blocked" in line]
        by_route: dict[str, int] = {}
        for line in lines:
            route = line.split(" route=", 1)[1].split(" ", 1)[0] if " route=" in line else "-"
            by_route[route] = by_route.get(route, 0) + 1
        counts = ", ".join(f"{n} on {route}" for route, n in sorted(by_route.items()))
        print(
            f"ringloop serve {WATCH_FLAG} {threshold:g} logged {len(lines)} blocks ({counts}); "
            "the first:"
        )
        print("\n".join(lines[:6]))
    else:
        why = "" if watch_in_server else f" (this ringloop serve has no {WATCH_FLAG})"
        print(f"the watch's report for one request to /ingest/blocking{why}:")
        with S3Server() as s3:
            report = inprocess_block_report(s3, pdf, threshold)
        # The full stack runs through FastAPI's and botocore's frames: show the head.
        print(report.split("  stack (innermost last):")[0].rstrip())


if __name__ == "__main__":
    main()
