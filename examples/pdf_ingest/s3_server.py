"""A real S3-compatible server on loopback for the example: moto's standalone server (a
Werkzeug HTTP server speaking the S3 REST API, objects kept in its memory), started as a
child process on a free port, with the bucket created before it is handed out.

    python examples/pdf_ingest/s3_server.py [--port N]    # serve until Ctrl-C

In code: ``with S3Server() as s3: ...`` sets nothing globally; ``s3.env()`` is the
environment the app needs (endpoint, bucket, throwaway credentials).

Why moto: it installs from PyPI with pip alone (no Java, no Go binary, no container), speaks
enough of S3 for boto3 and aiobotocore unmodified, and starts in about a second.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import boto3
from botocore.config import Config

HOST = "127.0.0.1"
BUCKET = "pdf-ingest"
# moto accepts any key; these only keep botocore from looking for real ones.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class S3ServerError(RuntimeError):
    """The S3 server could not be started."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class S3Server:
    """moto's server in a child process; `start()` returns once the bucket exists."""

    def __init__(
        self,
        port: int | None = None,
        bucket: str = BUCKET,
        *,
        cpus: set[int] | None = None,
        nice: int = 0,
    ):
        self.port = port or free_port()
        self.bucket = bucket
        self.cpus = cpus  # pin the server to these CPUs (os.sched_setaffinity) when given
        self.nice = nice  # lower the server's CPU priority by this much (os.nice)
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "PDF_INGEST_S3_ENDPOINT": self.endpoint,
            "PDF_INGEST_BUCKET": self.bucket,
            "AWS_DEFAULT_REGION": "us-east-1",
            **CREDENTIALS,
        }

    def client(self):
        """A boto3 client for this server (for checks: reading objects back)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(s3={"addressing_style": "path"}),
        )

    def start(self, timeout: float = 180.0) -> S3Server:
        """Start the server and wait until it answers (or exits). ``timeout`` only bounds a
        server that never comes up: a niced one on a machine kept busy by others (two CPU
        hogs, the test suite) took over 30 s to import moto."""
        cmd = [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)]

        def preexec() -> None:
            if self.cpus:
                os.sched_setaffinity(0, self.cpus)
            if self.nice:
                os.nice(self.nice)

        # Werkzeug logs a line per request on stderr: a file, not a pipe, so it never fills.
        self._log = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                preexec_fn=preexec,
            )
        except OSError as e:
            raise S3ServerError(f"cannot run {' '.join(cmd)}: {e}") from None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace").strip()
                raise S3ServerError(
                    f"moto server exited with {self.proc.returncode}: {err[-2000:]}"
                )
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise S3ServerError(
                    f"moto server did not answer on {self.endpoint} within {timeout}s"
                )
            time.sleep(0.05)
        self.client().create_bucket(Bucket=self.bucket)
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="serve S3 (moto) on loopback with the bucket made")
    ap.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    ap.add_argument("--bucket", default=BUCKET)
    args = ap.parse_args(argv)
    try:
        server = S3Server(args.port, args.bucket).start()
    except S3ServerError as e:
        sys.exit(f"s3_server: {e}")
    for k, v in server.env().items():
        print(f"export {k}={v}")
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
