"""Fixtures for the example's tests: a real S3 server (moto, in a child process on a free
loopback port, for the whole session), the sample PDF, and an httpx client on the app with its
lifespan run (so it holds real boto3 and aiobotocore clients pointed at that server)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import pytest_asyncio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NEEDED = ("pymupdf", "boto3", "aiobotocore", "moto", "flask", "httpx")
missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
if missing:
    pytest.skip(
        f"the pdf_ingest example needs {', '.join(missing)}: "
        "pip install -r examples/pdf_ingest/requirements.txt",
        allow_module_level=True,
    )

import httpx  # noqa: E402
from s3_server import S3Server  # noqa: E402
from samples import make_pdf  # noqa: E402

_warmed: set[str] = set()


@pytest.fixture(scope="session")
def s3():
    # Niced: when the machine is short of CPU, the loop under test (judged on wall time
    # against a 10 ms threshold) goes first and the S3 server answers a little later.
    with S3Server(nice=10) as server, pytest.MonkeyPatch.context() as mp:
        for key, value in server.env().items():
            mp.setenv(key, value)
        yield server


@pytest.fixture(scope="session")
def pdf() -> bytes:
    # Two images: each upload is a task step of 3-5 ms of botocore Python (signing,
    # checksums); fewer of them keep a busy machine from stretching one past 10 ms.
    return make_pdf(pages=4, images=2)


@pytest_asyncio.fixture
async def client(s3, pdf):
    from app import app

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ingest") as c:
            # FastAPI reads each endpoint's source file (inspect.getsourcelines) on its first
            # request in a process: a one-time file read on the loop, which the watch reports.
            # Warm both endpoints once, as a deployment's readiness probe would.
            for path in ("/ingest/blocking", "/ingest/async"):
                if path not in _warmed:
                    (await c.post(path, content=pdf)).raise_for_status()
                    _warmed.add(path)
            yield c
