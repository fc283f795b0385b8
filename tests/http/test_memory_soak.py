"""Memory over a long run: after 1,000,000 keep-alive requests a worker's RSS is within 5 % of
its RSS after the first 100,000 (a leak of even a few bytes per request shows), for each
interface. Requests come from the benchmarks' C client (`count` mode: an exact number of
requests over 64 connections, one in flight on each), so the client costs the server core
nothing and the counts are exact; every response is checked (status 200, its length)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from serve_helpers import HOST, PYTHON, free_port, wait_until

CLIENT_SOURCE = Path(__file__).resolve().parents[2] / "benchmarks" / "http_client.c"
FIRST, TOTAL, CONNECTIONS = 100_000, 1_000_000, 64


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler (cc) is needed to build the load client")
    out = tmp_path_factory.mktemp("client") / "http_client"
    subprocess.run([cc, "-O2", "-o", str(out), str(CLIENT_SOURCE)], check=True)
    return out


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _load(client: Path, port: int, requests: int) -> None:
    out = subprocess.run(
        [str(client), "count", str(port), str(CONNECTIONS), str(requests), "/"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["requests"] == requests and report["errors"] == 0, report


@pytest.mark.slow
@pytest.mark.parametrize("interface", ["asgi", "wsgi", "native"])
def test_rss_after_a_million_requests_is_within_5_percent_of_after_100k(serve, client, interface):
    port = free_port()
    served = serve(
        argv=[PYTHON, "-m", "ringloop", "serve", f"soak_apps:{interface}", "--port", str(port),
              "--interface", interface, "--no-access-log", "--log-level", "warning"]
    )  # fmt: skip

    def listening() -> bool:
        with socket.create_connection((HOST, port), timeout=1):
            return True

    wait_until(listening, 20, "the server listening")
    _load(client, port, FIRST)
    after_first = _rss_kib(served.pid)
    _load(client, port, TOTAL - FIRST)
    after_all = _rss_kib(served.pid)
    assert after_all <= after_first * 1.05, (
        f"{interface}: {after_first} KiB after {FIRST:,} requests, {after_all} KiB after {TOTAL:,}"
    )
