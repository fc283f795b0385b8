"""ringloop's native handler API (`ringloop.server.native`, `--interface native`; no reference
server has it, so the module's documented behaviour is the oracle), on both loop backends:
the `Request` (method, path, raw_path, query_string, http_version, headers, `header()`,
client, server, scheme, root_path, the body of a synchronous handler), `Response` bodies
(bytes, str, a plain bytes/str return, iterators and async iterators streamed chunked or with
their length, `FileBody` by sendfile), the `Writer` of an async handler (start, write, drain,
end; back-pressure), and errors (500 before the head, the connection closed after it; a bad
return value; the server goes on).
"""

from __future__ import annotations

import pytest
from srv_harness import MiB, chunked, exchange, request, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def native(ringloop_kind, pool):
    return pool.get(ringloop_kind, "srv_native_app:app", "native")


@pytest.fixture
def native_async(ringloop_kind, pool):
    return pool.get(ringloop_kind, "srv_native_app:app_async", "native")


@pytest.fixture
def native_writer(ringloop_kind, pool):
    return pool.get(ringloop_kind, "srv_native_app:app_writer", "native")


def test_request_fields(native):
    raw = request(
        "POST",
        "/info?x=%20y",
        headers=[("X-A", "first"), ("x-a", "second"), ("X-Other", "o")],
        body=b"12345",
    )
    with native.raw() as c:
        c.send(raw)
        info = c.read_response().json()
        sockname = list(c.sock.getsockname())
    assert info["method"] == "POST"
    assert info["path"] == "/info"
    assert info["raw_path"] == "/info"
    assert info["query_string"] == "x=%20y"
    assert info["http_version"] == "1.1"
    assert info["headers"][:4] == [
        ["host", "example.test"],
        ["x-a", "first"],
        ["x-a", "second"],
        ["x-other", "o"],
    ]
    assert info["x_a"] == "first"  # header(): the first value
    assert info["x_a_str"] == "first"  # a str name works too, case-insensitively
    assert info["client"] == sockname
    assert info["server"] == ["127.0.0.1", native.port]
    assert info["scheme"] == "http"
    assert info["root_path"] == ""
    assert info["body_len"] == 5


def test_path_is_decoded(native):
    info = exchange(native, request("GET", "/info/../%41%E2%9C%93")).json()
    assert info["raw_path"] == "/info/../%41%E2%9C%93"
    assert info["path"] == "/info/../A\u2713"


def test_sync_body_content_length_and_chunked(native):
    body = bytes(range(256)) * 2000
    assert exchange(native, request("POST", "/echo", body=body)).body == body
    data = request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")])
    data += chunked([b"x" * 100, b"y" * 100000])
    assert exchange(native, data).body == b"x" * 100 + b"y" * 100000


def test_sync_body_of_a_bodyless_request_is_empty_bytes(native):
    assert exchange(native, request("POST", "/body-repr", body=b"ab")).body == b"b'ab'"
    assert exchange(native, request("GET", "/body-repr")).body == b"b''"


def test_sync_body_arriving_slowly(native):
    # The synchronous handler is called once the whole body is there, however it arrives.
    with native.raw() as c:
        c.send(request("POST", "/echo", headers=[("Content-Length", "30000")]))
        for i in range(3):
            c.send(bytes([65 + i]) * 10000)
        r = c.read_response()
        assert r.body == b"A" * 10000 + b"B" * 10000 + b"C" * 10000


def test_bytes_and_str_returns(native):
    r = exchange(native, request("GET", "/bytes"))
    assert (r.status, r.body) == (200, b"plain bytes")
    assert r.header("content-type").startswith("text/plain")
    assert r.header("content-length") == "11"
    r = exchange(native, request("GET", "/str"))
    assert r.body == "unicode \u2713".encode()


def test_iterator_body_is_chunked(native):
    r = exchange(native, request("GET", "/iter"))
    assert r.chunked
    assert r.body == b"abbccc"


def test_large_iterator_body_with_length(native):
    size = 5 * MiB + 7
    with native.raw() as c:
        c.send(request("GET", f"/big?size={size}") + request("POST", "/echo", body=b"next"))
        r = c.read_response()
        assert r.header("content-length") == str(size)
        assert len(r.body) == size and not r.chunked
        assert c.read_response().body == b"next"


def test_file_body(native, tmp_path):
    data = bytes(range(256)) * 20000 + b"end"
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    with native.raw() as c:
        c.send(request("GET", f"/file?path={path}") + request("POST", "/echo", body=b"next"))
        r = c.read_response()
        assert r.header("content-length") == str(len(data))
        assert r.body == data
        assert c.read_response().body == b"next"


def test_missing_file_is_500(native, tmp_path):
    r = exchange(native, request("GET", f"/file?path={tmp_path / 'absent'}"))
    assert r.status == 500


@pytest.mark.parametrize("code", [204, 304])
def test_no_body_statuses(native, code):
    with native.raw() as c:
        c.send(request("GET", f"/status?code={code}") + request("POST", "/echo", body=b"x"))
        assert c.read_response().status == code
        assert c.read_response().body == b"x"


def test_head_has_no_body(native):
    with native.raw() as c:
        c.send(request("HEAD", "/bytes") + request("POST", "/echo", body=b"x"))
        head = c.read_response(head=True)
        assert head.header("content-length") == "11"
        assert c.read_response().body == b"x"


def test_exception_is_500_logged_and_the_server_goes_on(native):
    mark = native.log_mark()
    assert exchange(native, request("GET", "/raise")).status == 500
    wait_until(lambda: "native boom" in native.log_since(mark), 5, "the traceback logged")
    log = native.log_since(mark)
    assert "Traceback (most recent call last)" in log and "srv_native_app.py" in log, log
    assert exchange(native, request("GET", "/bytes")).body == b"plain bytes"


def test_bad_return_value_is_500(native):
    assert exchange(native, request("GET", "/bad-return")).status == 500


def test_str_header_is_500(native):
    r = exchange(native, request("GET", "/bad-header"))
    assert r.status == 500
    assert r.header("x-str") is None


def test_exception_in_an_iterator_closes_the_connection(native):
    with native.raw() as c:
        c.send(request("GET", "/raise-in-iterator"))
        assert c.read_head().status == 200
        rest = c.rest()
        assert c.eof
        assert not rest.endswith(b"0\r\n\r\n")


# -- async handlers --------------------------------------------------------------------------------


def test_async_read(native_async):
    body = b"z" * 300000
    assert exchange(native_async, request("POST", "/echo", body=body)).body == body


def test_async_stream(native_async):
    data = request("POST", "/stream-in", headers=[("Transfer-Encoding", "chunked")])
    r = exchange(native_async, data + chunked([b"a" * 10, b"b" * 20, b"c" * 30]))
    total, _, pieces = r.body.decode().partition(" in ")
    assert total == "60" and int(pieces) >= 1


def test_async_request_fields(native_async):
    info = exchange(native_async, request("PUT", "/info?q=1", body=b"abc")).json()
    assert (info["method"], info["path"], info["query_string"], info["body_len"]) == (
        "PUT",
        "/info",
        "q=1",
        3,
    )


def test_async_handler_has_no_sync_body(native_async):
    assert exchange(native_async, request("POST", "/sync-body", body=b"x")).body == b"None"


def test_async_iterator_body(native_async):
    r = exchange(native_async, request("GET", "/aiter"))
    assert r.body == b"part0;part1;part2;part3;"


def test_async_concurrent_requests(native_async):
    conns = [native_async.raw() for _ in range(20)]
    for c in conns:
        c.send(request("GET", "/sleep?s=0.3"))
    for c in conns:
        assert c.read_response().body == b"slept"
        c.close()


def test_async_exception_is_500(native_async):
    mark = native_async.log_mark()
    assert exchange(native_async, request("GET", "/raise")).status == 500
    wait_until(lambda: "async native boom" in native_async.log_since(mark), 5, "the error logged")
    log = native_async.log_since(mark)
    assert "Traceback (most recent call last)" in log and "srv_native_app.py" in log, log
    assert exchange(native_async, request("POST", "/echo", body=b"ok")).body == b"ok"


def test_writer(native_writer):
    r = exchange(native_writer, request("GET", "/write"))
    assert (r.status, r.body) == (200, b"one two end")


def test_writer_large_body_with_back_pressure(native_writer):
    size = 64 * MiB
    before = native_writer.rss()
    with native_writer.raw(timeout=30) as c:
        c.send(request("GET", f"/big?size={size}"))
        head = c.read_head()
        assert head.header("content-length") == str(size)
        got = len(c.buf)
        c.buf = b""
        import time

        time.sleep(1)  # the client does not read: the handler must wait in drain()
        grown = native_writer.rss() - before
        while got < size:
            data = c.sock.recv(1 << 20)
            assert data
            got += len(data)
    assert got == size
    assert grown < 40 * MiB, f"server grew {grown / MiB:.0f} MiB while the client did not read"


def test_writer_exception_after_start_closes(native_writer):
    with native_writer.raw() as c:
        c.send(request("GET", "/raise-after-start"))
        assert c.read_head().status == 200
        rest = c.rest()
        assert c.eof
        assert not rest.endswith(b"0\r\n\r\n")


def test_writer_returning_without_end_closes(native_writer):
    with native_writer.raw() as c:
        c.send(request("GET", "/no-end"))
        assert c.read_head().status == 200
        rest = c.rest()
        assert c.eof
        assert not rest.endswith(b"0\r\n\r\n")
