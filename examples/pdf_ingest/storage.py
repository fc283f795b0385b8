"""Where the example's objects go: S3 settings from the environment, and the two clients the
endpoints use (boto3, synchronous; aiobotocore, asyncio).

    PDF_INGEST_S3_ENDPOINT   endpoint URL; unset for AWS itself (default: unset)
    PDF_INGEST_BUCKET        bucket name (default: pdf-ingest)
    AWS_DEFAULT_REGION       region (default: us-east-1)
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE
                             credentials, read by botocore's usual chain
    PDF_INGEST_S3_POOL       connections per client (default: 50)

s3_server.py sets the first two (and test credentials) when it starts the local server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import boto3
from aiobotocore.session import get_session
from botocore.config import Config


@dataclass(frozen=True)
class S3Settings:
    endpoint: str | None
    bucket: str
    region: str
    pool: int

    @classmethod
    def from_env(cls) -> S3Settings:
        pool = os.environ.get("PDF_INGEST_S3_POOL", "50")
        if not pool.isdigit() or int(pool) < 1:
            raise ValueError(f"PDF_INGEST_S3_POOL must be a positive integer, not {pool!r}")
        return cls(
            endpoint=os.environ.get("PDF_INGEST_S3_ENDPOINT") or None,
            bucket=os.environ.get("PDF_INGEST_BUCKET", "pdf-ingest"),
            region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            pool=int(pool),
        )

    def client_kwargs(self) -> dict:
        return {
            "endpoint_url": self.endpoint,
            "region_name": self.region,
            # Path-style addressing: a loopback endpoint has no per-bucket DNS names.
            "config": Config(
                max_pool_connections=self.pool,
                s3={"addressing_style": "path"} if self.endpoint else {},
                retries={"max_attempts": 2, "mode": "standard"},
            ),
        }


def sync_client(settings: S3Settings):
    """A boto3 S3 client: every call blocks the calling thread until S3 answers."""
    return boto3.client("s3", **settings.client_kwargs())


def async_client(settings: S3Settings):
    """An aiobotocore S3 client context manager (``async with async_client(s) as s3``)."""
    return get_session().create_client("s3", **settings.client_kwargs())
