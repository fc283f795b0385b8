"""A PDF-ingest service: two endpoints that do the same work, one blocking the event loop.

    POST /ingest/blocking   body: the PDF (Content-Type: application/pdf)
    POST /ingest/async      same body, same answer

Each opens the PDF with PyMuPDF, counts its pages and text, and uploads every embedded image
to S3 under ``documents/<id>/``; both answer
``{"document_id", "pages", "text_chars", "image_keys"}``.

`/ingest/blocking` is the code users write first: it looks async, but PyMuPDF and boto3's
`put_object` run right in the `async def`, so while one request extracts or waits for S3 every
other request on the process waits too. `/ingest/async` runs the extraction in a worker thread
(`asyncio.to_thread`), one extraction at a time in arrival order, and uploads the images
concurrently through aiobotocore while the next request's extraction runs.

S3 settings come from the environment (storage.py); `python s3_server.py` starts a local one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from extract import Extracted, NotAPdf, extract, warm_up
from fastapi import FastAPI, HTTPException, Request
from storage import S3Settings, async_client, sync_client

MAX_PDF_BYTES = 50 * 1024 * 1024
READY_KEY = "_pdf_ingest/ready"
# One extraction at a time, in arrival order (asyncio.Semaphore wakes its waiters first in,
# first out). MuPDF keeps the GIL while it works, so extractions in parallel threads only
# share one core: each takes longer, and every request's uploads wait behind all of them.
EXTRACTIONS = asyncio.Semaphore(1)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    settings = S3Settings.from_env()
    app.state.settings = settings
    app.state.s3_sync = sync_client(settings)
    # Write a marker with each client at start-up: a wrong bucket, credentials or permission
    # fails here rather than on the first upload, and the first call of an operation on a
    # new botocore client (endpoint rules, operation model, handler lookups: 10-20 ms of
    # Python) is paid now, not on the event loop in the middle of the first request.
    app.state.s3_sync.put_object(Bucket=settings.bucket, Key=READY_KEY, Body=b"sync")
    async with async_client(settings) as s3:
        await s3.put_object(Bucket=settings.bucket, Key=READY_KEY, Body=b"async")
        # Start the executor's first thread now: starting one hands it the GIL, and if it
        # goes straight into MuPDF (which keeps the GIL while it works) the loop waits.
        await asyncio.to_thread(warm_up)
        app.state.s3_async = s3
        yield
    app.state.s3_sync.close()


app = FastAPI(title="pdf-ingest", lifespan=lifespan)


async def read_pdf(request: Request) -> bytes:
    body = await request.body()
    if not body:
        raise HTTPException(400, "empty body: send the PDF as the request body")
    if len(body) > MAX_PDF_BYTES:
        raise HTTPException(413, f"PDF larger than {MAX_PDF_BYTES} bytes")
    return body


def answer(doc_id: str, doc: Extracted, keys: list[str]) -> dict:
    return {
        "document_id": doc_id,
        "pages": doc.pages,
        "text_chars": doc.text_chars,
        "image_keys": keys,
    }


@app.post("/ingest/blocking")
async def ingest_blocking(request: Request) -> dict:
    pdf = await read_pdf(request)
    try:
        doc = extract(pdf)  # blocks the loop: MuPDF parsing and decoding
    except NotAPdf as e:
        raise HTTPException(422, str(e)) from None
    s3, bucket = request.app.state.s3_sync, request.app.state.settings.bucket
    doc_id = uuid.uuid4().hex
    keys = []
    for image in doc.images:
        key = f"documents/{doc_id}/{image.name}"
        s3.put_object(Bucket=bucket, Key=key, Body=image.data, ContentType=image.mime)  # blocks
        keys.append(key)
    return answer(doc_id, doc, keys)


@app.post("/ingest/async")
async def ingest_async(request: Request) -> dict:
    pdf = await read_pdf(request)
    try:
        async with EXTRACTIONS:
            doc = await asyncio.to_thread(extract, pdf)
    except NotAPdf as e:
        raise HTTPException(422, str(e)) from None
    s3, bucket = request.app.state.s3_async, request.app.state.settings.bucket
    doc_id = uuid.uuid4().hex
    keys = [f"documents/{doc_id}/{image.name}" for image in doc.images]
    await asyncio.gather(
        *(
            s3.put_object(Bucket=bucket, Key=key, Body=image.data, ContentType=image.mime)
            for key, image in zip(keys, doc.images, strict=True)
        )
    )
    return answer(doc_id, doc, keys)
