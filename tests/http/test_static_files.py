"""`--static-path-route/-mount/-expires`: files served by `ringloop serve` itself, checked with a
real HTTP client (http.client) and raw sockets for the requests a client library refuses to
send (NUL, backslashes, unnormalized dot segments).

One server per backend serves a tree made for the module: small and large files (the large
one goes out with sendfile, or through `send_rest` when the socket is full), a `.br`/`.gz`
pair, a directory, symlinks inside and out of the root, and a secret beside the root that no
request may ever read a byte of.
"""

from __future__ import annotations

import gzip
import http.client
import os
import shutil
import socket
import subprocess
import sys

import pytest
from serve_helpers import HERE, HOST, PYTHON, Served, free_port

pytestmark = pytest.mark.timeout(90)

SECRET = b"TOP-SECRET-OUTSIDE-THE-ROOT"
SMALL = b"hello, static world\n"
BIG = os.urandom(3 * 1024 * 1024 + 17)  # past INLINE_MAX, and past one socket buffer
CSS = b"body { color: red }\n" * 20


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("static")
    (base / "secret.txt").write_bytes(SECRET)
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (root / "small.txt").write_bytes(SMALL)
    (root / "big.bin").write_bytes(BIG)
    (root / "style.css").write_bytes(CSS)
    (root / "style.css.br").write_bytes(b"pretend-brotli")
    (root / "style.css.gz").write_bytes(gzip.compress(CSS))
    (root / "sub" / "page.html").write_bytes(b"<p>hi</p>")
    (root / "empty.txt").write_bytes(b"")
    (root / "out-rel").symlink_to("../secret.txt")
    (root / "out-abs").symlink_to(base / "secret.txt")
    (root / "out-dir").symlink_to(base)
    (root / "in-link.txt").symlink_to("small.txt")
    (root / "%2e%2e").mkdir()  # a literal name: what a double-encoded `..` decodes to once
    (root / "%2e%2e" / "x.txt").write_bytes(b"literal")
    other = base / "other"
    other.mkdir()
    (other / "o.txt").write_bytes(b"other mount")
    return base


@pytest.fixture(scope="module", params=["io_uring", "epoll"])
def server(request, tree, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("log") / "server.log"
    env = dict(os.environ, RINGLOOP_BACKEND=request.param)
    argv = [
        *(PYTHON, "-m", "ringloop", "serve", "serve_apps:app", "--port", str(port)),
        *("--static-path-route", "/static", "--static-path-mount", str(tree / "root")),
        *("--static-path-route", "/static/other", "--static-path-mount", str(tree / "other")),
        *("--static-path-expires", "1h", "--no-access-log"),
    ]
    served = Served(argv, log, env=env, cwd=HERE)
    served.wait_serving()
    yield port
    served.kill_tree()


def get(port, path, headers=None, method="GET", conn=None):
    c = conn or http.client.HTTPConnection(HOST, port, timeout=30)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    if conn is None:
        c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def raw(port, target: bytes) -> bytes:
    """One request with `target` as sent, the whole response (the server closes: no keep-alive)."""
    with socket.create_connection((HOST, port), timeout=30) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def test_small_file_with_validators_and_type(server):
    status, h, body = get(server, "/static/small.txt")
    assert (status, body) == (200, SMALL)
    assert h["content-type"] == "text/plain; charset=utf-8"
    assert h["content-length"] == str(len(SMALL))
    assert h["cache-control"] == "max-age=3600"
    assert h["accept-ranges"] == "bytes"
    assert h["vary"] == "accept-encoding"
    assert h["etag"].startswith('"') and h["last-modified"].endswith("GMT")
    assert get(server, "/static/sub/page.html")[1]["content-type"] == "text/html; charset=utf-8"
    assert get(server, "/static/empty.txt")[::2] == (200, b"")


def test_large_files_on_one_keep_alive_connection(server):
    c = http.client.HTTPConnection(HOST, server, timeout=30)
    for _ in range(3):
        status, h, body = get(server, "/static/big.bin", conn=c)
        assert status == 200 and body == BIG
        assert h["content-type"] == "application/octet-stream"
    # The application still answers on the same connection afterwards.
    assert get(server, "/", conn=c)[0] == 200
    c.close()


def test_pipelined_requests_are_answered_in_order(server):
    req = b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /static/small.txt HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((HOST, server), timeout=30) as s:
        s.sendall(req)
        f = s.makefile("rb")
        for expected in (BIG, SMALL):
            assert f.readline().startswith(b"HTTP/1.1 200")
            length = None
            while (line := f.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            assert f.read(length) == expected


def test_client_eof_after_the_request_still_gets_the_whole_file(server):
    # The body outgrows the socket buffer, so its rest goes out after the EOF arrived.
    with socket.create_connection((HOST, server), timeout=30) as s:
        s.sendall(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and body == BIG


def test_head_has_the_head_of_get(server):
    status, h, body = get(server, "/static/big.bin", method="HEAD")
    assert (status, body) == (200, b"")
    assert h["content-length"] == str(len(BIG))


def test_other_methods_are_405(server):
    status, h, _ = get(server, "/static/small.txt", method="POST")
    assert status == 405 and h["allow"] == "GET, HEAD"


def test_paths_outside_the_routes_reach_the_application(server):
    status, _, body = get(server, "/staticx/small.txt")
    assert status == 200 and body.isdigit()  # serve_apps:app answers with its pid


def test_longest_route_wins(server):
    assert get(server, "/static/other/o.txt")[::2] == (200, b"other mount")


def test_conditional_requests(server):
    _, h, _ = get(server, "/static/small.txt")
    etag, modified = h["etag"], h["last-modified"]
    status, h304, body = get(server, "/static/small.txt", {"If-None-Match": etag})
    assert (status, body) == (304, b"") and h304["etag"] == etag
    assert get(server, "/static/small.txt", {"If-None-Match": f'"x", W/{etag}'})[0] == 304
    assert get(server, "/static/small.txt", {"If-None-Match": '"other"'})[0] == 200
    assert get(server, "/static/small.txt", {"If-Modified-Since": modified})[0] == 304
    old = "Sat, 01 Jan 2000 00:00:00 GMT"
    assert get(server, "/static/small.txt", {"If-Modified-Since": old})[0] == 200
    assert get(server, "/static/small.txt", {"If-Match": '"other"'})[0] == 412
    assert get(server, "/static/small.txt", {"If-Match": etag})[0] == 200
    assert get(server, "/static/small.txt", {"If-Unmodified-Since": old})[0] == 412
    assert get(server, "/static/small.txt", {"If-Unmodified-Since": modified})[0] == 200


def test_ranges(server):
    status, h, body = get(server, "/static/small.txt", {"Range": "bytes=0-4"})
    assert (status, body, h["content-range"]) == (206, SMALL[:5], f"bytes 0-4/{len(SMALL)}")
    assert get(server, "/static/small.txt", {"Range": "bytes=-3"})[2] == SMALL[-3:]
    start = len(BIG) - 2 * 1024 * 1024
    status, h, body = get(server, "/static/big.bin", {"Range": f"bytes={start}-"})
    assert (status, body) == (206, BIG[start:])
    status, h, body = get(server, "/static/small.txt", {"Range": "bytes=1000-"})
    assert (status, h["content-range"]) == (416, f"bytes */{len(SMALL)}")
    # Several ranges: the whole file (RFC 9110 §14.2 lets a server ignore Range).
    assert get(server, "/static/small.txt", {"Range": "bytes=0-1,3-4"})[::2] == (200, SMALL)
    etag = h["etag"] if "etag" in h else get(server, "/static/small.txt")[1]["etag"]
    assert get(server, "/static/small.txt", {"Range": "bytes=0-1", "If-Range": etag})[0] == 206
    assert get(server, "/static/small.txt", {"Range": "bytes=0-1", "If-Range": '"old"'})[::2] == (
        200,
        SMALL,
    )
    assert get(server, "/static/small.txt", {"Range": "bytes=0-1"}, method="HEAD")[0] == 200


def test_precompressed_siblings_follow_accept_encoding(server):
    status, h, body = get(server, "/static/style.css", {"Accept-Encoding": "gzip, br"})
    assert (status, h["content-encoding"], body) == (200, "br", b"pretend-brotli")
    assert h["content-type"] == "text/css; charset=utf-8" and h["vary"] == "accept-encoding"
    status, h, body = get(server, "/static/style.css", {"Accept-Encoding": "gzip;q=1, br;q=0.5"})
    assert (h["content-encoding"], gzip.decompress(body)) == ("gzip", CSS)
    status, h, body = get(server, "/static/style.css", {"Accept-Encoding": "br;q=0, identity"})
    assert ("content-encoding" not in h, body) == (True, CSS)
    assert "content-encoding" not in get(server, "/static/style.css")[1]
    # Each representation has its own validator.
    tags = {
        get(server, "/static/style.css", {"Accept-Encoding": ae})[1]["etag"]
        for ae in ("br", "gzip", "")
    }
    assert len(tags) == 3


TRAVERSALS = [
    b"/static/../secret.txt",
    b"/static/sub/../../secret.txt",
    b"/static/./../secret.txt",
    b"/static/%2e%2e/secret.txt",
    b"/static/%2E%2E/secret.txt",
    b"/static/.%2e/secret.txt",
    b"/static/..%2fsecret.txt",
    b"/static/..%2Fsecret.txt",
    b"/static/%2e%2e%2fsecret.txt",
    b"/static/%252e%252e/secret.txt",
    b"/static/%252e%252e%252fsecret.txt",
    b"/static/..%5csecret.txt",
    b"/static/..%255csecret.txt",
    b"/static/..\\secret.txt",
    b"/static/small.txt%00.png",
    b"/static/%00",
    b"/static//secret.txt",
    b"/static/out-rel",
    b"/static/out-abs",
    b"/static/out-dir/secret.txt",
    b"/static/sub",
    b"/static/sub/",
    b"/static/",
    b"/static",
    b"/static/missing.txt",
    b"/static/%zz",
    b"http://x/static/../secret.txt",
]


@pytest.mark.parametrize("target", TRAVERSALS, ids=[t.decode("latin-1") for t in TRAVERSALS])
def test_nothing_outside_the_root_and_no_directories(server, target):
    response = raw(server, target)
    status_line = response.split(b"\r\n", 1)[0]
    # 404, or 400 where the request line itself is refused (a raw backslash, NUL).
    assert status_line.split()[1] in (b"404", b"400"), response[:200]
    assert SECRET not in response


def test_symlink_inside_the_root_and_literal_percent_names(server):
    assert get(server, "/static/in-link.txt")[::2] == (200, SMALL)
    # `%252e%252e` decodes once to the literal directory name `%2e%2e`, inside the root.
    assert get(server, "/static/%252e%252e/x.txt")[::2] == (200, b"literal")


def test_tls_sends_large_files_through_the_tls_transport(tree, tmp_path):
    trustme = pytest.importorskip("trustme")
    import ssl

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key_path, cert_path = tmp_path / "key.pem", tmp_path / "cert.pem"
    cert.private_key_pem.write_to_path(str(key_path))
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    port = free_port()
    argv = [
        *(PYTHON, "-m", "ringloop", "serve", "serve_apps:app", "--port", str(port)),
        *("--static-path-mount", str(tree / "root"), "--no-access-log"),
        *("--ssl-keyfile", str(key_path), "--ssl-certfile", str(cert_path)),
    ]
    served = Served(argv, tmp_path / "server.log", cwd=HERE)
    try:
        served.wait_serving()
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        c = http.client.HTTPSConnection(HOST, port, context=ctx, timeout=30)
        for path, expected in (("/static/big.bin", BIG), ("/static/small.txt", SMALL)):
            c.request("GET", path)
            r = c.getresponse()
            assert (r.status, r.read()) == (200, expected)
        c.request("GET", "/static/big.bin", headers={"Range": "bytes=10-99999"})
        r = c.getresponse()
        assert (r.status, r.read()) == (206, BIG[10:100000])
        c.close()
    finally:
        served.kill_tree()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--static-path-route", "/a", "--static-path-route", "/b", "--static-path-mount", "."],
            "--static-path-route and --static-path-mount: 2 routes for 1 mounts",
        ),
        (
            ["--static-path-mount", "/nonexistent/dir"],
            "--static-path-mount: '/nonexistent/dir' is not a directory",
        ),
        (["--static-path-route", "/a"], "--static-path-route: needs a --static-path-mount"),
        (["--static-path-mount", ".", "--static-path-route", "a"], "does not start with '/'"),
        (["--static-path-mount", ".", "--static-path-expires", "soon"], "--static-path-expires"),
    ],
)
def test_bad_static_flags_are_one_line(argv, line):
    done = subprocess.run(
        [sys.executable, "-m", "ringloop", "serve", "serve_apps:app", *argv],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=60,
    )
    assert done.returncode == 2
    assert line in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_served_over_http2_through_the_windows(server):
    """An h2c client gets the same answers: a small file, a 3 MiB one through its 64 KiB
    stream window (read and framed a piece at a time, never sendfile'd), HEAD's length
    without a body, a 304, a 404 under the route, and the application beside them; many at
    once on one connection."""
    import httpx

    with httpx.Client(http1=False, http2=True, timeout=30) as c:
        base = f"http://{HOST}:{server}"
        r = c.get(f"{base}/static/small.txt")
        assert (r.http_version, r.status_code, r.content) == ("HTTP/2", 200, SMALL)
        assert r.headers["content-length"] == str(len(SMALL))
        etag = r.headers["etag"]
        r = c.get(f"{base}/static/big.bin")
        assert r.status_code == 200 and r.content == BIG
        r = c.head(f"{base}/static/big.bin")
        assert (r.status_code, r.headers["content-length"], r.content) == (200, str(len(BIG)), b"")
        assert c.get(f"{base}/static/small.txt", headers={"if-none-match": etag}).status_code == 304
        assert c.get(f"{base}/static/missing.txt").status_code == 404
        assert c.get(f"{base}/static/empty.txt").content == b""
        assert c.get(f"{base}/").status_code == 200


def test_many_static_streams_at_once_over_http2(server):
    h2load = shutil.which("h2load")
    if h2load is None:
        pytest.skip("h2load is not installed (Debian's nghttp2-client)")
    out = subprocess.run(
        [h2load, "-n", "60", "-c", "1", "-m", "20", f"http://{HOST}:{server}/static/big.bin"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "60 succeeded, 0 failed, 0 errored" in out, out
    assert "status codes: 60 2xx" in out, out
