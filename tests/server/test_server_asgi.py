"""ASGI 3.0 HTTP conformance (spec 2.x), on ringloop's server (both loop backends) and uvicorn
(httptools and h11) running the same plain ASGI application (`srv_asgi_app`):

* the `http` scope: type, asgi version, http_version, method, scheme, percent-decoded path,
  raw_path, query_string bytes, root_path, headers (lower-cased bytes, in order, duplicates
  kept), client, server, and the lifespan `state` (a shallow copy per request);
* `receive()`: `http.request` messages with `more_body`, streamed as the body arrives; then
  `http.disconnect` after the response and when the client goes;
* `send()` misuse raises (body before start, start twice, send after the response completed,
  str headers, CR/LF in a header, unknown message types) and the client gets a 500 when
  nothing was sent; an exception before the response starts is a 500, after it the
  connection is closed; an app that returns without a response gets a 500;
* `send()` on a closed connection raises an `OSError` (spec 2.4);
* extensions: `http.response.trailers` when advertised, `http.response.pathsend`;
* a large streamed response to a client that reads slowly keeps the server's memory bounded.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from srv_harness import MiB, chunked, exchange, get, new_key, request, result, wait_until

pytestmark = pytest.mark.timeout(60)

UVICORN = ("uvicorn-httptools", "uvicorn-h11")


def scope_of(server, raw: bytes) -> dict:
    with server.raw() as c:
        c.send(raw)
        r = c.read_response()
        assert r.status == 200, r
        scope = r.json()
        scope["_client_sockname"] = list(c.sock.getsockname())
        return scope


def b(value) -> bytes:
    """A bytes value of the JSON scope back to bytes."""
    assert isinstance(value, dict) and set(value) == {"bytes"}, value
    return value["bytes"].encode("latin-1")


def header_list(scope) -> list[tuple[bytes, bytes]]:
    return [(b(n), b(v)) for n, v in scope["headers"]]


# -- the scope -------------------------------------------------------------------------------------


def test_scope_keys_and_types(asgi):
    s = scope_of(asgi, request("GET", "/scope?x=1"))
    assert s["type"] == "http"
    assert s["asgi"]["version"] == "3.0"
    assert isinstance(s["asgi"].get("spec_version", "2.0"), str)
    assert s["http_version"] == "1.1"
    assert s["method"] == "GET"
    assert s["scheme"] == "http"
    assert s["path"] == "/scope"
    assert b(s["raw_path"]) == b"/scope"
    assert b(s["query_string"]) == b"x=1"
    assert s["root_path"] == ""
    assert s["server"] == ["127.0.0.1", asgi.port]
    assert s["client"] == s["_client_sockname"]


def test_scope_http10(asgi):
    s = scope_of(asgi, request("GET", "/scope", version="HTTP/1.0", host=None))
    assert s["http_version"] == "1.0"


def test_scope_path_is_percent_decoded_and_raw_path_is_not(asgi):
    target = "/scope/a%20b/%E2%9C%93/%2F/%ff?q=%20x&y=%E2+z"
    s = scope_of(asgi, request("GET", target))
    assert s["path"] == "/scope/a b/\u2713///\ufffd"
    assert b(s["raw_path"]) == b"/scope/a%20b/%E2%9C%93/%2F/%ff"
    assert b(s["query_string"]) == b"q=%20x&y=%E2+z"  # as sent: never decoded


def test_scope_empty_query_string_is_empty_bytes(asgi):
    s = scope_of(asgi, request("GET", "/scope"))
    assert b(s["query_string"]) == b""


@pytest.mark.reference_lax(
    "httptools keeps trailing whitespace in a field value (RFC 9112 §5: OWS is not part of it)",
    kinds=("uvicorn-httptools",),
)
def test_scope_headers_lowercased_in_order_with_duplicates(asgi):
    raw = (
        b"GET /scope HTTP/1.1\r\nHost: example.test\r\nX-Dup: 1\r\nAccept: */*\r\n"
        b"x-DUP: 2\r\nCoOkIe: a=1\r\nCookie: b=2\r\nX-Pad: \t padded value \t\r\n"
        b"X-Latin: caf\xe9\r\nX-Empty:\r\n\r\n"
    )
    s = scope_of(asgi, raw)
    assert header_list(s) == [
        (b"host", b"example.test"),
        (b"x-dup", b"1"),
        (b"accept", b"*/*"),
        (b"x-dup", b"2"),
        (b"cookie", b"a=1"),
        (b"cookie", b"b=2"),
        (b"x-pad", b"padded value"),
        (b"x-latin", b"caf\xe9"),
        (b"x-empty", b""),
    ]


def test_scope_method_of_each_request(asgi):
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        s = scope_of(asgi, request(method, "/scope", body=b"x"))
        assert s["method"] == method
        assert b(s["body"]) == b"x"


def test_scope_of_each_request_on_one_connection(asgi):
    # Requests on one keep-alive connection: the same target and fields again, others, fields
    # that change in value or in case, another version, and an application that changes its
    # scope: each scope is its own request's.
    host = ("Host", "example.test")
    sent = [
        ("GET", "/scope", "HTTP/1.1", [host, ("Accept", "*/*")]),
        ("GET", "/scope?mutate=1", "HTTP/1.1", [host, ("Accept", "*/*"), ("X-A", "1")]),
        ("GET", "/scope?mutate=1", "HTTP/1.1", [host, ("ACCEPT", "*/*")]),
        ("POST", "/scope/a%20b", "HTTP/1.1", [host, ("Accept", "text/plain")]),
        ("GET", "/scope/a%20b", "HTTP/1.1", [("Host", "other.test"), ("Accept", "text/plain")]),
        ("GET", "/scope", "HTTP/1.1", [("Accept", "*/*"), host, ("X-B", "2")]),
        # Last: uvicorn closes an HTTP/1.0 connection whatever it asks.
        ("GET", "/scope", "HTTP/1.0", [host, ("Connection", "keep-alive")]),
    ]
    with asgi.raw() as c:
        for method, target, version, fields in sent:
            body = b"" if method == "POST" else None
            c.send(request(method, target, version=version, headers=fields, body=body, host=None))
            r = c.read_response()
            assert r.status == 200, r
            s = r.json()
            path, _, query = target.partition("?")
            assert (s["method"], s["http_version"]) == (method, version[5:])
            assert s["path"] == path.replace("%20", " ")
            assert (b(s["raw_path"]), b(s["query_string"])) == (path.encode(), query.encode())
            assert s["server"] == ["127.0.0.1", asgi.port]
            assert s["client"] == list(c.sock.getsockname())
            expected = [(n.lower(), v) for n, v in fields]
            expected += [("content-length", "0")] if method == "POST" else []
            assert header_list(s) == [(n.encode(), v.encode()) for n, v in expected]


def test_an_earlier_requests_receive_and_send_do_not_reach_the_next(asgi):
    key = new_key()
    with asgi.raw() as c:
        c.send(request("GET", f"/keep-callables?key={key}"))
        assert c.read_response().body == b"kept"
        for _ in range(2):  # and a request after one whose pair nobody kept
            c.send(request("GET", "/path"))
            assert c.read_response().status == 200
        c.send(request("GET", f"/use-kept?key={key}"))
        r = c.read_response()
        assert r.json() == {"receive": "http.disconnect", "send": "RuntimeError"}


def test_scope_state_comes_from_lifespan(asgi):
    s = scope_of(asgi, request("GET", "/scope"))
    assert s["state_started_by"] == "lifespan"
    assert s["state_keys"] == ["shared", "started_by"]


def test_scope_state_is_a_shallow_copy_per_request(asgi):
    first = json.loads(get(asgi, "/state-mutate").body)
    second = json.loads(get(asgi, "/state-mutate").body)
    assert first["leaked"] is False and second["leaked"] is False  # a key set is not seen
    assert second["n"] == first["n"] + 1  # a shared object mutated is


def test_root_path(asgi_kind, pool):
    server = pool.get(asgi_kind, "srv_asgi_app:root_app", root_path="/api")
    r = exchange(server, request("GET", "/items/%41?q=1"))
    assert r.json() == {"path": "/api/items/A", "raw_path": "/api/items/%41", "root_path": "/api"}


@pytest.mark.parametrize(
    ("allow", "trusted"), [("127.0.0.1", True), ("10.9.9.9", False)], ids=["trusted", "untrusted"]
)
def test_proxy_headers(asgi_kind, pool, allow, trusted):
    server = pool.get(asgi_kind, "srv_asgi_app:app", proxy_headers=True, forwarded_allow_ips=allow)
    s = scope_of(
        server,
        request(
            "GET",
            "/scope",
            headers=[("X-Forwarded-For", "203.0.113.7, 127.0.0.1"), ("X-Forwarded-Proto", "https")],
        ),
    )
    if trusted:
        assert s["client"][0] == "203.0.113.7"
        assert s["scheme"] == "https"
    else:
        assert s["client"] == s["_client_sockname"]
        assert s["scheme"] == "http"


# -- receive() -------------------------------------------------------------------------------------


def test_receive_without_body_is_one_empty_message(asgi):
    r = exchange(asgi, request("GET", "/echo-info"))
    assert r.json()["messages"] == [[0, False]]


def test_receive_content_length_body(asgi):
    body = bytes(range(256)) * 4096  # 1 MiB
    info = exchange(asgi, request("POST", "/echo-info", body=body)).json()
    messages = info["messages"]
    assert info["len"] == len(body)
    assert sum(n for n, _ in messages) == len(body)
    assert [more for _, more in messages] == [True] * (len(messages) - 1) + [False]


def test_receive_chunked_body(asgi):
    parts = [b"a" * 10, b"b" * 70000, b"c"]
    data = request("POST", "/echo-info", headers=[("Transfer-Encoding", "chunked")])
    info = exchange(asgi, data + chunked(parts)).json()
    assert info["len"] == 70011
    assert info["messages"][-1][1] is False


def _read_chunks(c, n: int) -> bytes:
    got = b""
    while len(got) < n:
        size = int(c._line(), 16)
        assert size, "the response ended early"
        got += c._exact(size)
        assert c._exact(2) == b"\r\n"
    return got


def test_receive_streams_the_body_as_it_arrives(asgi):
    # Full duplex: each piece of a chunked body is echoed before the next one is sent, so
    # the server must hand it to the application without waiting for the end of the body.
    with asgi.raw() as c:
        first = b"A" * 1000
        c.send(
            request("POST", "/duplex", headers=[("Transfer-Encoding", "chunked")])
            + b"%x\r\n%s\r\n" % (len(first), first)
        )
        head = c.read_head()
        assert head.status == 200
        assert _read_chunks(c, len(first)) == first
        for i in range(1, 5):
            piece = bytes([65 + i]) * (1000 * (i + 1))
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            assert _read_chunks(c, len(piece)) == piece
        c.send(b"0\r\n\r\n")
        assert c._line() == b"0"


def test_response_head_leaves_at_start_before_any_body(asgi):
    with asgi.raw(timeout=2) as c:
        c.send(request("POST", "/duplex", headers=[("Transfer-Encoding", "chunked")]))
        # No body byte sent yet: the app has sent http.response.start and waits in receive().
        head = c.read_head()
        assert head.status == 200
        c.send(b"3\r\nabc\r\n0\r\n\r\n")
        assert _read_chunks(c, 3) == b"abc"


def test_receive_after_the_response_is_disconnect(asgi):
    key = new_key()
    r = exchange(asgi, request("POST", f"/receive-after-response?key={key}", body=b"abc"))
    assert r.body == b"ok"
    rec = result(asgi, key)
    assert rec["after"] == "http.disconnect"
    assert rec["messages"] == [[3, False]]


def test_receive_disconnect_when_the_client_goes(asgi):
    key = new_key()
    c = asgi.raw()
    c.send(request("POST", f"/wait-disconnect?key={key}", body=b"hello"))
    result(asgi, key + "-started")
    c.close()
    assert result(asgi, key) == {"got": "http.disconnect", "body_len": 5}


def test_receive_disconnect_while_the_body_is_incomplete(asgi):
    key = new_key()
    c = asgi.raw()
    c.send(request("POST", f"/count?key={key}", headers=[("Content-Length", "1000")]) + b"x" * 10)
    time.sleep(0.2)
    c.close()
    rec = result(asgi, key)
    assert rec["disconnect_after"] <= 10


@pytest.mark.reference_lax(
    "uvicorn's send() silently does nothing once the client is gone (spec 2.4: should raise "
    "an OSError subclass)",
    kinds=UVICORN,
)
def test_send_on_a_closed_connection_raises_oserror(asgi):
    key = new_key()
    c = asgi.raw()
    c.send(request("GET", f"/send-after-disconnect?key={key}"))
    assert c.read_head().status == 200
    c.reset()
    rec = result(asgi, key, timeout=15)
    assert rec["error"] is not None, "send() kept succeeding after the client was gone"
    assert rec["oserror"], rec


# -- send() misuse ---------------------------------------------------------------------------------


def misuse(server, what: str, *, expect_500: bool):
    key = new_key()
    with server.raw() as c:
        c.send(request("GET", f"/misuse/{what}?key={key}"))
        if expect_500:
            r = c.read_response()
            assert r.status == 500, r
            return result(server, key), r
        return result(server, key), c


def test_body_before_start_raises_and_is_500(asgi):
    rec, _ = misuse(asgi, "body-before-start", expect_500=True)
    assert rec["error"] == "RuntimeError"


def test_start_twice_raises_and_the_first_start_stands(asgi):
    key = new_key()
    with asgi.raw() as c:
        c.send(request("GET", f"/misuse/start-twice?key={key}"))
        r = c.read_response()
    assert (r.status, r.body) == (200, b"first start wins")
    assert result(asgi, key)["error"] == "RuntimeError"


def test_send_after_the_response_completed_raises(asgi):
    key = new_key()
    with asgi.raw() as c:
        c.send(request("GET", f"/misuse/after-complete?key={key}") + request("GET", "/path"))
        r = c.read_response()
        assert (r.status, r.body) == (200, b"complete")
        # The connection goes on: nothing of the refused send reached the wire.
        assert c.read_response().body == b"GET /path "
    assert result(asgi, key)["error"] == "RuntimeError"


@pytest.mark.reference_lax(
    "uvicorn counts the response as started before it checks the headers, then closes the "
    "connection with no response at all (h11 also accepts str headers)",
    kinds=UVICORN,
)
def test_str_header_is_refused_with_500(asgi):
    rec, r = misuse(asgi, "str-header", expect_500=True)
    assert rec["error"] in ("TypeError", "ValueError", "RuntimeError", "AttributeError")
    assert b"should not be sent" not in r.body


@pytest.mark.reference_lax(
    "uvicorn counts the response as started before it checks the headers, then closes the "
    "connection with no response at all (h11 also accepts str headers)",
    kinds=UVICORN,
)
def test_header_injection_is_refused_with_500(asgi):
    rec, r = misuse(asgi, "bad-header-value", expect_500=True)
    assert rec["error"] is not None
    assert r.header("x-injected") is None


def test_unknown_message_type_raises_and_is_500(asgi):
    rec, _ = misuse(asgi, "unknown-type", expect_500=True)
    assert rec["error"] == "RuntimeError"


def _assert_logged_with_traceback(server, mark: int, message: str) -> None:
    wait_until(lambda: message in server.log_since(mark), 5, f"{message!r} logged")
    log = server.log_since(mark)
    assert "Traceback (most recent call last)" in log, log
    assert "srv_asgi_app.py" in log, "the traceback does not reach the application's frame"


def test_exception_after_an_await_is_500_and_logged_with_traceback(asgi):
    mark = asgi.log_mark()
    r = exchange(asgi, request("GET", "/misuse/raise-after-await"))
    assert r.status == 500
    _assert_logged_with_traceback(asgi, mark, "boom after an await")


def test_exception_before_start_is_500_and_logged_with_traceback(asgi):
    mark = asgi.log_mark()
    r = exchange(asgi, request("GET", "/misuse/raise-before-start"))
    assert r.status == 500
    _assert_logged_with_traceback(asgi, mark, "boom before start")


def test_exception_after_start_closes_the_connection(asgi):
    with asgi.raw() as c:
        c.send(request("GET", "/misuse/raise-after-start"))
        head = c.read_head()
        assert head.status == 200
        rest = c.rest()
        assert c.eof, "the connection stayed open after the application failed mid-response"
        # The response is cut: a chunked body without its last chunk.
        assert not rest.endswith(b"0\r\n\r\n")


def test_return_without_response_is_500(asgi):
    mark = asgi.log_mark()
    r = exchange(asgi, request("GET", "/misuse/return-without-response"))
    assert r.status == 500
    wait_until(lambda: "without starting response" in asgi.log_since(mark), 5, "the error logged")


def test_return_after_start_closes_the_connection(asgi):
    with asgi.raw() as c:
        c.send(request("GET", "/misuse/return-after-start"))
        head = c.read_head()
        assert head.status == 200
        rest = c.rest()
        assert c.eof
        assert not rest.endswith(b"0\r\n\r\n")


def test_the_server_survives_every_misuse(asgi):
    for what in ("body-before-start", "raise-before-start", "raise-after-start"):
        with asgi.raw() as c:
            c.send(request("GET", f"/misuse/{what}?key={new_key()}"))
            c.rest(timeout=2)
    r = exchange(asgi, request("GET", "/path?alive=1"))
    assert r.body == b"GET /path alive=1"


# -- extensions ------------------------------------------------------------------------------------


def test_trailers_when_advertised(asgi):
    # Advertised to a request that says it takes trailers (ringloop: only to such a request).
    s = scope_of(asgi, request("GET", "/scope", headers=[("TE", "trailers")]))
    if "http.response.trailers" not in s["extensions"]:
        pytest.skip(f"{asgi.kind} does not advertise http.response.trailers")
    with asgi.raw() as c:
        c.send(request("GET", "/trailers", headers=[("TE", "trailers")]))
        r = c.read_response()
        assert r.body == b"with trailers"
        assert r.trailers == [("x-checksum", "abc")]


@pytest.mark.ringloop_only("uvicorn does not implement http.response.pathsend")
def test_pathsend(asgi, tmp_path):
    data = bytes(range(256)) * (40 * 1024 + 3)  # ~10 MiB, not a multiple of any buffer
    path = tmp_path / "file.bin"
    path.write_bytes(data)
    assert "http.response.pathsend" in scope_of(asgi, request("GET", "/scope"))["extensions"]
    with asgi.raw() as c:
        c.send(request("GET", f"/pathsend?file={path}") + request("GET", "/path"))
        r = c.read_response()
        assert r.status == 200
        assert r.header("content-length") == str(len(data))
        assert r.body == data
        assert c.read_response().body == b"GET /path "  # framing intact after the file


@pytest.mark.ringloop_only("uvicorn does not implement http.response.pathsend")
def test_pathsend_empty_file_and_head(asgi, tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    r = exchange(asgi, request("GET", f"/pathsend?file={path}"))
    assert (r.status, r.header("content-length"), r.body) == (200, "0", b"")
    big = tmp_path / "big"
    big.write_bytes(b"z" * 100000)
    with asgi.raw() as c:
        c.send(request("HEAD", f"/pathsend?file={big}") + request("GET", "/path"))
        head = c.read_response(head=True)
        assert head.header("content-length") == "100000"
        assert c.read_response().body == b"GET /path "


# -- back-pressure ---------------------------------------------------------------------------------


def test_large_response_to_a_slow_reader_keeps_memory_bounded(asgi):
    size = 512 * MiB
    before = asgi.rss()
    with asgi.raw(timeout=30) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.send(request("GET", f"/download?size={size}"))
        head = c.read_head()
        assert head.header("content-length") == str(size)
        got = len(c.buf)
        c.buf = b""
        peak = 0
        # Read slowly for a while: the application must be held back, not buffered.
        for _ in range(30):
            time.sleep(0.03)
            data = c.sock.recv(16 * 1024)
            got += len(data)
            peak = max(peak, asgi.rss() - before)
        assert peak < 100 * MiB, f"server grew {peak / MiB:.0f} MiB for a slow reader"
        # Then fast: every byte arrives.
        c.sock.settimeout(30)
        while got < size:
            data = c.sock.recv(1 << 20)
            assert data, f"connection closed after {got} of {size} bytes"
            got += len(data)
        assert got == size
