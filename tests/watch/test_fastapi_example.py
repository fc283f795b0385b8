"""The README's worked example, for real: a FastAPI endpoint that blocks, the pytest run with
`--ringloop-blocking` that fails naming the line, and the `asyncio.to_thread` fix that passes."""

from __future__ import annotations

import pathlib
import re

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fastapi_blocking"


def test_fastapi_blocking_endpoint_fails_naming_the_line(pytester):
    app = (EXAMPLE / "app.py").read_text()
    pytester.makepyfile(app=app, test_app=(EXAMPLE / "test_app.py").read_text())
    result = pytester.runpytest_subprocess("--ringloop-blocking=0.01", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    line = 1 + app.splitlines().index(
        next(ln for ln in app.splitlines() if "time.sleep(0.05)" in ln)
    )
    assert re.search(rf"at app\.py:{line} in load_profile", out), out
    assert "FAILED test_app.py::test_profile " in out
    assert "test_profile_fixed" not in out.split("short test summary")[-1]
