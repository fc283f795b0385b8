"""The HTTPS suite's TLS floor (``benchmarks/tls_floor``) against real TLS clients.

The floor is a benchmark subject, but its figures mean something only if it does the work of
an HTTPS server: full handshakes with ringloop's rustls configuration, the suite's canned
response on keep-alive and on a fresh connection, close_notify at the end. Python's ``ssl``
(OpenSSL) is the client, on 127.0.0.1. The first ``cargo build`` compiles aws-lc's C (minutes
on a 2-core machine): ``slow``, in ``make test-long``.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import https_suite  # noqa: E402

pytestmark = pytest.mark.slow

RESPONSE = re.compile(
    rb"HTTP/1\.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 13\r\n"
    rb"(?P<connection>connection: [a-z-]+\r\n)?"
    rb"date: [A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT\r\n"
    rb"server: tlsfloor\r\n\r\nHello, world!"
)
READY_DEADLINE = 60.0
IO_TIMEOUT = 30.0


def _ready_line(proc: subprocess.Popen[str], deadline: float) -> dict:
    """The floor's ready line, waited for on its stdout (the line or its exit, by deadline)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError("tls_floor: no ready line within the deadline")
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"tls_floor exited before ready: {proc.wait()}")
            if line.startswith("{"):
                obj = json.loads(line)
                assert obj["type"] == "ready", obj
                return obj


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return https_suite.make_keys(tmp_path_factory.mktemp("tls-floor-keys"))


@pytest.fixture(scope="module", params=["rsa", "ecdsa"])
def floor(request: pytest.FixtureRequest, keys: dict[str, tuple[Path, Path]]) -> Iterator[int]:
    """A running floor with the key kind of the param; its port. Stopped by closing stdin,
    which it must answer with its "done" line and a clean exit."""
    binary = https_suite.build_floor()
    cert, key = keys[request.param]
    proc = subprocess.Popen(
        [str(binary), str(cert), str(key)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = _ready_line(proc, time.monotonic() + READY_DEADLINE)
        assert ready["pid"] == proc.pid
        yield ready["port"]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        rest = proc.stdout.read()  # to EOF: the process is exiting
        assert proc.wait(timeout=IO_TIMEOUT) == 0
        assert '{"type": "done"}' in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _client(**kw: object) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def _connect(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    # suppress_ragged_eofs=False: an EOF without the server's close_notify is an error.
    return ctx.wrap_socket(raw, suppress_ragged_eofs=False)


def _response(s: ssl.SSLSocket, buf: bytearray) -> re.Match[bytes]:
    """One whole response off ``s`` (the floor's are 13-byte bodies); the rest stays in buf."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0 and len(buf) >= end + 4 + 13:
            m = RESPONSE.match(bytes(buf[: end + 4 + 13]))
            assert m is not None, bytes(buf)
            del buf[: end + 4 + 13]
            return m
        chunk = s.recv(65536)
        assert chunk, f"closed mid-response: {bytes(buf)!r}"
        buf += chunk


def _until_eof(s: ssl.SSLSocket) -> bytes:
    """What the server sends until its close_notify (SSLEOFError if it closes without)."""
    rest = b""
    while chunk := s.recv(65536):
        rest += chunk
    return rest


def test_two_requests_on_one_connection(floor: int) -> None:
    with _connect(floor, _client()) as s:
        # ringloop's configuration: TLS 1.3, the server's AES-128 preference over the
        # client's AES-256 first, ALPN http/1.1.
        assert s.version() == "TLSv1.3"
        assert s.cipher()[0] == "TLS_AES_128_GCM_SHA256"
        assert s.selected_alpn_protocol() == "http/1.1"
        buf = bytearray()
        for _ in range(2):
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _response(s, buf)["connection"] is None
        # Pipelined, the second asking to close: both answered, then close_notify.
        s.sendall(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        assert _response(s, buf)["connection"] is None
        assert _response(s, buf)["connection"] == b"connection: close\r\n"
        assert buf + _until_eof(s) == b""


@pytest.mark.parametrize("version", ["TLSv1_3", "TLSv1_2"])
def test_fresh_connection_like_s_time(floor: int, version: str) -> None:
    """A new connection and a full handshake per request, ``openssl s_time -www``'s
    HTTP/1.0 request: answered with ``connection: close``, then close_notify."""
    v = getattr(ssl.TLSVersion, version)
    for _ in range(2):
        with _connect(floor, _client(minimum_version=v, maximum_version=v)) as s:
            assert s.version() == version.replace("_", ".")
            assert s.session_reused is False
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            buf = bytearray()
            assert _response(s, buf)["connection"] == b"connection: close\r\n"
            assert buf + _until_eof(s) == b""


def test_http10_keep_alive_and_client_close_notify(floor: int) -> None:
    with _connect(floor, _client()) as s:
        buf = bytearray()
        s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert _response(s, buf)["connection"] == b"connection: keep-alive\r\n"
        # The client's close_notify gets the server's, then the close.
        raw = s.unwrap()
        assert raw.recv(1) == b""
        raw.close()


def test_garbage_gets_an_alert_and_a_close(floor: int) -> None:
    with socket.create_connection(("127.0.0.1", floor), timeout=IO_TIMEOUT) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while chunk := raw.recv(4096):
            got += chunk
        assert got[:1] == b"\x15"  # a TLS alert record, then EOF
