"""HTTP/2 conformance: `httpwg` (crates.io `httpwg-cli`, the h2spec replacement from the loona
project: RFC 9113's 108 cases — preface, frames, stream states, flow control, SETTINGS, PING,
GOAWAY, CONTINUATION, field validity) run against `ringloop serve --http 2` in cleartext.

The binary is installed by `make test` (`cargo install httpwg-cli` into
`~/.cache/ringloop/httpwg-cli`, or where `RINGLOOP_HTTPWG` points); without it this test skips,
and fails under `RINGLOOP_REQUIRE=1`. Every case runs on its own connection, all at once;
a case that waits for a frame waits `--frame-timeout` for it, generous here so that a loaded
machine does not make one fail: the server answers in microseconds, the wait is a bound, not
a pace (the cases that expect silence are the ones that take that long).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from srv_harness import HOST, Kind

APP = "srv_h2_conformance_app:app"
pytestmark = pytest.mark.timeout(300)
FRAME_TIMEOUT_MS = 3000
# Cases that cannot pass for a reason outside our code, each with the reason: none today.
KNOWN: dict[str, str] = {}


def _httpwg() -> str:
    cached = Path.home() / ".cache" / "ringloop" / "httpwg-cli" / "bin" / "httpwg"
    for candidate in (os.environ.get("RINGLOOP_HTTPWG"), str(cached), shutil.which("httpwg")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    why = "httpwg is not installed (make test installs it: cargo install httpwg-cli)"
    if os.environ.get("RINGLOOP_REQUIRE") == "1":
        pytest.fail(why + " (RINGLOOP_REQUIRE=1)", pytrace=False)
    pytest.skip(why)


def test_httpwg_passes_in_full(ringloop_kind: Kind, start_server):
    """Every case of httpwg passes (the ones in `KNOWN` excepted, with their reasons)."""
    binary = _httpwg()
    server = start_server(ringloop_kind, APP, "asgi", http="2", log_level="warning")
    proc = subprocess.run(
        [
            binary,
            "--address",
            f"{HOST}:{server.port}",
            "--connect-timeout",
            "5000",
            "--frame-timeout",
            str(FRAME_TIMEOUT_MS),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_COLOR": "1", "RUST_LOG": "warn"},
    )
    out = proc.stderr + proc.stdout
    passed = re.findall(r"Test passed: (.+)", out)
    failed = re.findall(r"Test failed: (.+)", out)
    summary = re.search(r"Passed .*?(\d+)/(\d+).*? tests", out)
    assert summary, f"httpwg printed no summary (exit {proc.returncode}):\n{out[-4000:]}"
    total = int(summary.group(2))
    assert total >= 100 and len(passed) + len(failed) == total, out[-4000:]
    unexpected = sorted(name for name in failed if not any(k in name for k in KNOWN))
    assert not unexpected, (
        f"{len(unexpected)} of {total} httpwg cases failed:\n  "
        + "\n  ".join(unexpected)
        + f"\n\nhttpwg's output (tail):\n{out[-6000:]}\n\nserver log:\n{server.log()[-3000:]}"
    )
    assert server.alive(), f"the server died during the suite:\n{server.log()[-3000:]}"
