"""The tests a team would write for the ingest service: both endpoints against a real S3
server, objects read back; and the blocking checks.

    pytest examples/pdf_ingest/test_ingest.py                          # all pass
    pytest examples/pdf_ingest/test_ingest.py --ringloop-blocking=0.01 # test_ingest_blocking fails

The first run passes: the blocking endpoint works, it just blocks. The tests that open a
`no_blocking` scope themselves show what the watch reports for it. The second run puts every
async test in `no_blocking(0.01)`: the plain test of `/ingest/blocking` fails with the report
(its put_object line, its extraction line), and the same test of `/ingest/async` passes.
"""

from __future__ import annotations

import asyncio
import inspect

import app
import pytest
from extract import extract
from ringloop.watch import BlockingError, no_blocking, no_event_loop_blocking


def line_in(func, needle: str) -> int:
    """The line of `func`'s source holding `needle` (the reports name lines: look them up)."""
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, text in enumerate(lines) if needle in text)


PUT_LINE = line_in(app.ingest_blocking, "s3.put_object(")
EXTRACT_FILE = "extract.py"


async def upload(pdf: bytes, size: int = 64 * 1024):
    """The PDF in 64 kB pieces, as an upload arrives from the network. With httpx's
    ASGITransport the client and the app run in the test's own task: without a pause between
    pieces, building the request and the app's whole first step would be one slice."""
    for i in range(0, len(pdf), size):
        await asyncio.sleep(0)
        yield pdf[i : i + size]


async def ingest(client, path: str, pdf: bytes) -> dict:
    headers = {"content-type": "application/pdf", "content-length": str(len(pdf))}
    r = await client.post(path, content=upload(pdf), headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def check_stored(s3, body: dict, pdf: bytes) -> None:
    """Every image key answered is in the bucket, holding that image's bytes (read back with
    boto3 in a worker thread: the test must not block the loop it checks)."""
    await asyncio.to_thread(_check_stored, s3, body, pdf)


def _check_stored(s3, body: dict, pdf: bytes) -> None:
    expected = extract(pdf)
    assert body["pages"] == expected.pages
    assert body["text_chars"] == expected.text_chars
    assert len(body["image_keys"]) == len(expected.images) > 0
    s3c = s3.client()
    for key, image in zip(body["image_keys"], expected.images, strict=True):
        assert key == f"documents/{body['document_id']}/{image.name}"
        obj = s3c.get_object(Bucket=s3.bucket, Key=key)
        assert obj["Body"].read() == image.data
        assert obj["ContentType"] == image.mime


@pytest.mark.asyncio
async def test_ingest_blocking(client, s3, pdf):
    await check_stored(s3, await ingest(client, "/ingest/blocking", pdf), pdf)


@pytest.mark.asyncio
async def test_ingest_async(client, s3, pdf):
    await check_stored(s3, await ingest(client, "/ingest/async", pdf), pdf)


@pytest.mark.asyncio
async def test_both_endpoints_answer_alike(client, pdf):
    a = await ingest(client, "/ingest/blocking", pdf)
    b = await ingest(client, "/ingest/async", pdf)
    assert a["document_id"] != b["document_id"]
    strip = lambda body: [k.rsplit("/", 1)[1] for k in body["image_keys"]]  # noqa: E731
    assert strip(a) == strip(b)
    assert {k: v for k, v in a.items() if k not in ("document_id", "image_keys")} == {
        k: v for k, v in b.items() if k not in ("document_id", "image_keys")
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/ingest/blocking", "/ingest/async"])
async def test_not_a_pdf_is_422(client, path):
    r = await client.post(path, content=b"%PDF-1.7 but not really")
    assert r.status_code == 422
    assert "not a readable PDF" in r.json()["detail"]
    assert (await client.post(path, content=b"")).status_code == 400


@pytest.mark.asyncio
@pytest.mark.allow_blocking  # this test expects the block; it checks the report itself
async def test_blocking_endpoint_is_reported(client, pdf):
    with pytest.raises(BlockingError) as caught:
        async with no_blocking(action="raise", threshold=0.01):
            await ingest(client, "/ingest/blocking", pdf)
    blocks = caught.value.blocks
    # One slice: nothing in the handler awaits between the extraction and the uploads.
    block = max(blocks, key=lambda b: b.duration)
    assert block.duration >= 0.01
    assert block.task_name and block.coroutine
    # The application's own share has the I/O or CPU kind; on a loaded machine waiting for a
    # CPU (or collection) may be the largest share, and so the block's kind.
    own = next(c.cause for c in block.causes if c.application)
    assert own in ("socket", "http", "dns", "network", "cpu", "wait")
    assert block.kind in (own, "starved", "throttled", "gc", "gil")
    # The time went to both halves of the handler: the put_object line and the extraction.
    where = [loc for loc, _ in block.samples]
    assert any(loc.endswith(f"app.py:{PUT_LINE} in ingest_blocking") for loc in where), where
    assert any(f"{EXTRACT_FILE}:" in loc and loc.endswith(" in extract") for loc in where), where
    # moto's server closes the connection after each answer, so each put_object reconnects:
    # socket I/O that the audit hook saw on the loop thread.
    assert any(ev.kind in ("socket", "http", "dns") for ev in block.io_events), block.io_events
    report = str(caught.value)
    assert f"app.py:{PUT_LINE} in ingest_blocking" in report
    assert "s3.put_object(" in report


@pytest.mark.asyncio
async def test_async_endpoint_passes_the_same_scope(client, s3, pdf):
    async with no_blocking(action="raise", threshold=0.01):
        body = await ingest(client, "/ingest/async", pdf)
    await check_stored(s3, body, pdf)


@pytest.mark.asyncio
@pytest.mark.allow_blocking
async def test_pyleak_style_scope(client, pdf):
    # The same checks written for pyleak, with only the import changed.
    with pytest.raises(BlockingError):
        async with no_event_loop_blocking(action="raise", threshold=0.01):
            await ingest(client, "/ingest/blocking", pdf)
    async with no_event_loop_blocking(action="raise", threshold=0.01):
        await ingest(client, "/ingest/async", pdf)
