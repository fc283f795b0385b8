"""Load tool: N concurrent uploads of the sample PDF to one endpoint, over raw asyncio streams.

    python examples/pdf_ingest/load_test.py http://127.0.0.1:8000/ingest/async \\
        --concurrency 100 --requests 300 [--json out.json]

Each of `--concurrency` connections is opened first; then all of them send at once and keep
sending (keep-alive) until `--requests` requests have been sent in all. Per request it records
the latency from the first byte sent to the last byte of the answer, and whether the answer
was a 200 with the JSON the service returns. Prints p50/p95/p99, throughput and errors.

The client is a small HTTP/1.1 writer and reader over `asyncio.open_connection` (on uvloop
when installed), not aiohttp or httpx, so that its own cost per request stays small: on a
2-core machine it shares the CPUs with the server and the S3 server (see compare.py, which
pins them apart).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import urllib.parse
from collections import Counter
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))


class LoadError(Exception):
    """A request that did not get a well-formed 200 answer (the message says what instead)."""


@dataclass
class LoadResult:
    url: str
    concurrency: int
    requests: int
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)  # of the successful requests

    @property
    def throughput(self) -> float:
        return self.ok / self.wall_s if self.wall_s else 0.0

    def percentile(self, p: float) -> float:
        return percentile(self.latencies_ms, p)

    def summary(self) -> dict:
        return {
            "url": self.url,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "wall_s": round(self.wall_s, 3),
            "throughput_rps": round(self.throughput, 2),
            "p50_ms": round(self.percentile(50), 1),
            "p95_ms": round(self.percentile(95), 1),
            "p99_ms": round(self.percentile(99), 1),
            "max_ms": round(max(self.latencies_ms, default=math.nan), 1),
        }

    def to_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile, nearest rank (no interpolation between two requests)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def parse_url(url: str) -> tuple[str, int, str]:
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        raise ValueError(f"need an http://host:port/path URL, not {url!r}")
    return u.hostname, u.port or 80, u.path or "/"


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    if not status_line:
        raise LoadError("connection closed before the answer")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise LoadError(f"bad status line {status_line[:60]!r}")
    status = int(parts[1])
    length = None
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                break
            body += await reader.readexactly(size)
            await reader.readline()
        return status, bytes(body)
    if length is None:
        raise LoadError("answer without content-length")
    return status, await reader.readexactly(length)


async def run_load(
    url: str,
    body: bytes,
    concurrency: int,
    requests: int,
    *,
    timeout: float = 600.0,
    connect_timeout: float = 30.0,
) -> LoadResult:
    """Send `requests` POSTs of `body` to `url` over `concurrency` keep-alive connections."""
    if concurrency < 1 or requests < 1:
        raise ValueError(f"need concurrency >= 1 and requests >= 1 (got {concurrency}, {requests})")
    host, port, path = parse_url(url)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/pdf\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    result = LoadResult(url, concurrency, requests)
    errors: Counter[str] = Counter()
    remaining = requests
    go = asyncio.Event()
    connected = 0
    all_connected = asyncio.Event()
    workers_n = min(concurrency, requests)

    async def worker() -> None:
        nonlocal remaining, connected
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=1 << 20), connect_timeout
            )
        except (TimeoutError, OSError) as e:
            errors[f"connect: {type(e).__name__}"] += 1
            reader = writer = None
        connected += 1
        if connected == workers_n:
            all_connected.set()
        await go.wait()
        try:
            while remaining > 0:
                remaining -= 1
                if writer is None:
                    errors["no connection"] += 1
                    continue
                t0 = time.perf_counter()
                try:
                    writer.write(head)
                    writer.write(body)
                    status, answer = await asyncio.wait_for(_read_answer(reader), timeout)
                    if status != 200:
                        raise LoadError(f"HTTP {status}")
                    if b'"image_keys"' not in answer:
                        raise LoadError("200 without the service's JSON")
                except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
                    errors[type(e).__name__] += 1
                    writer.close()
                    writer = None  # the connection's state is unknown: stop using it
                    continue
                except LoadError as e:
                    errors[str(e)] += 1
                    continue
                result.latencies_ms.append((time.perf_counter() - t0) * 1000)
        finally:
            if writer is not None:
                writer.close()

    tasks = [asyncio.create_task(worker()) for _ in range(workers_n)]
    await all_connected.wait()
    start = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    result.wall_s = time.perf_counter() - start
    result.ok = len(result.latencies_ms)
    result.errors = dict(errors)
    return result


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def raise_fd_limit(need: int) -> None:
    """Each connection is a file descriptor: lift the soft limit toward the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def load(url: str, body: bytes, concurrency: int, requests: int, **kw) -> LoadResult:
    """`run_load` on a fresh loop (uvloop when installed)."""
    raise_fd_limit(concurrency + 256)
    loop = new_loop()
    try:
        return loop.run_until_complete(run_load(url, body, concurrency, requests, **kw))
    finally:
        loop.close()


def format_summary(s: dict) -> str:
    errors = ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) or "none"
    return (
        f"{s['url']}  concurrency {s['concurrency']}, {s['ok']}/{s['requests']} ok in "
        f"{s['wall_s']:.1f} s: {s['throughput_rps']:.1f} req/s, p50 {s['p50_ms']:.0f} ms, "
        f"p95 {s['p95_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms; errors: {errors}"
    )


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, HERE)
    from samples import make_pdf

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", help="e.g. http://127.0.0.1:8000/ingest/async")
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--requests", type=int, default=None, help="default: 3 x concurrency")
    ap.add_argument("--pages", type=int, default=6, help="pages of the sample PDF")
    ap.add_argument("--images", type=int, default=4, help="images in the sample PDF")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--json", metavar="PATH", help="write every latency and the summary here")
    args = ap.parse_args(argv)
    try:
        parse_url(args.url)
        body = make_pdf(args.pages, args.images)
    except ValueError as e:
        ap.error(str(e))
    requests = args.requests or 3 * args.concurrency
    if args.concurrency < 1 or requests < 1:
        ap.error("--concurrency and --requests must be at least 1")
    result = load(args.url, body, args.concurrency, requests, timeout=args.timeout)
    print(format_summary(result.summary()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f)
    if result.ok == 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
