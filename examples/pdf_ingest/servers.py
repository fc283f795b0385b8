"""Start and stop the app under the servers the load tool compares, each in a child process
on a free loopback port (the S3 server is s3_server.py's).

    uvicorn   python -m uvicorn app:app --loop uvloop --http httptools   (1 worker)
    ringloop  python -m ringloop serve app:app                           (1 worker)

`AppServer(kind, env, cpus=...)` is a context manager; `.url(path)` gives the address. CPU
pinning (os.sched_setaffinity in the child) keeps the server off the cores the client and the
S3 server use, where the machine has enough of them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from s3_server import HOST, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("uvicorn", "ringloop")


class AppServerError(RuntimeError):
    """The app server did not start (the message carries the end of its log)."""


def ringloop_serve_flags() -> str:
    """`python -m ringloop serve --help`, to find out which flags this version has."""
    out = subprocess.run(
        [sys.executable, "-m", "ringloop", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout


def command(kind: str, port: int, extra: list[str]) -> list[str]:
    common = ["--host", HOST, "--port", str(port), "--app-dir", HERE, "--no-access-log"]
    common += ["--log-level", "warning"]
    if kind == "uvicorn":
        uvicorn = [sys.executable, "-m", "uvicorn", "app:app", "--loop", "uvloop"]
        return [*uvicorn, "--http", "httptools", *common, *extra]
    if kind == "ringloop":
        return [sys.executable, "-m", "ringloop", "serve", "app:app", *common, *extra]
    raise ValueError(f"unknown server {kind!r}: choose from {', '.join(KINDS)}")


class AppServer:
    def __init__(
        self,
        kind: str,
        env: dict[str, str],
        *,
        cpus: set[int] | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.kind = kind
        self.port = free_port()
        self.cmd = command(kind, self.port, list(extra or ()))
        self.env = {**os.environ, **env}
        self.cpus = cpus
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"pdf-ingest-{kind}-", suffix=".log")

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def log_text(self) -> str:
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def start(self, timeout: float = 60.0) -> AppServer:
        cpus = self.cpus

        def preexec() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.proc = subprocess.Popen(
            self.cmd,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec,
        )
        deadline = time.monotonic() + timeout
        # Ready when the app answers: both servers run the lifespan (S3 clients, the marker
        # object, the warm-up extraction) before they accept.
        while True:
            if self.proc.poll() is not None:
                raise AppServerError(
                    f"{self.kind} exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}"
                )
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(self.url("/openapi.json"), timeout=2) as r:
                    if r.status == 200:
                        return self
            if time.monotonic() > deadline:
                self.stop()
                raise AppServerError(f"{self.kind} did not answer within {timeout}s")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.log.close()
