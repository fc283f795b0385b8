"""What a TLS session tells the application, and session tickets across workers, with real
clients on 127.0.0.1 (the stdlib's `ssl`, httpx, `websockets`).

* WSGI: mod_ssl's environ keys (`HTTPS`, `SSL_PROTOCOL`, `SSL_CIPHER`, `SSL_CLIENT_*`), each
  checked against what the client's own `ssl` socket says it negotiated;
* ASGI: the `tls` extension on WebSocket scopes as on HTTP ones;
* `--workers 2`: a session ticket one worker issued resumes a session on the other (the
  workers share the ticket keys, `src/tls/tickets.rs`).
"""

from __future__ import annotations

import json
import socket
import ssl

import pytest
from srv_harness import HOST, RINGLOOP_KINDS, Kind, check_kind
from tls_pki import issue_pki

trustme = pytest.importorskip("trustme")

RINGLOOP = [Kind(k) for k in RINGLOOP_KINDS]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    return issue_pki(d, HOST)[1]


def tls(files, **more):
    return {"ssl_keyfile": str(files["key"]), "ssl_certfile": str(files["cert"]), **more}


def ctx_for(files, *, client_cert=False, tls12=False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(files["ca"]))
    if client_cert:
        ctx.load_cert_chain(str(files["client"]))
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class Seen:
    """The client's view of a connection: `cipher()`, `version()`, `session`, `session_reused`."""

    def __init__(self, s: ssl.SSLSocket) -> None:
        self._cipher, self._version = s.cipher(), s.version()
        self.session, self.session_reused = s.session, s.session_reused

    def cipher(self):
        return self._cipher

    def version(self):
        return self._version


def get(port: int, ctx: ssl.SSLContext, path: str, session=None) -> tuple[dict, Seen]:
    """GET `path` on a new connection (offering `session`); the JSON body and the client's
    view of the connection. The body is read to the end (`Connection: close`)."""
    s = ctx.wrap_socket(
        socket.create_connection((HOST, port), timeout=10), server_hostname=HOST, session=session
    )
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            break
        if not chunk:
            break
        data += chunk
    seen = Seen(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return json.loads(body), seen


@pytest.mark.parametrize("kind", RINGLOOP, ids=str)
@pytest.mark.parametrize("tls12", [False, True], ids=["tls1.3", "tls1.2"])
def test_wsgi_ssl_environ_matches_the_client(kind, tls12, pool, pki):
    check_kind(kind)
    srv = pool.get(kind, "srv_wsgi_app:app", "wsgi", **tls(pki))
    env, seen = get(srv.port, ctx_for(pki, tls12=tls12), "/environ")
    assert env["wsgi.url_scheme"] == "https" and env["HTTPS"] == "on"
    assert env["SSL_PROTOCOL"] == seen.version() == ("TLSv1.2" if tls12 else "TLSv1.3")
    name, _version, bits = seen.cipher()
    assert env["SSL_CIPHER"] == name
    # The server's preference decides, and it is AES-128-GCM (src/tls/config.rs,
    # prefer_aes128), though OpenSSL's client lists AES-256 first.
    assert "AES128-GCM" in name or name == "TLS_AES_128_GCM_SHA256", name
    assert env["SSL_CIPHER_USEKEYSIZE"] == str(bits)
    assert "SSL_TLS_SNI" not in env  # a client never sends an IP address as SNI
    assert env["SSL_CLIENT_VERIFY"] == "NONE"
    assert "SSL_CLIENT_CERT" not in env


def test_wsgi_client_certificate_environ(pool, pki):
    kind = RINGLOOP[0]
    check_kind(kind)
    settings = tls(pki, ssl_ca_certs=str(pki["ca"]), ssl_cert_reqs=1)
    srv = pool.get(kind, "srv_wsgi_app:app", "wsgi", **settings)
    env, seen = get(srv.port, ctx_for(pki, client_cert=True), "/environ")
    assert env["SSL_CLIENT_VERIFY"] == "SUCCESS"
    own = pki["client"].read_text().split("-----BEGIN CERTIFICATE-----")[1]
    assert ssl.PEM_cert_to_DER_cert(env["SSL_CLIENT_CERT"]) == ssl.PEM_cert_to_DER_cert(
        "-----BEGIN CERTIFICATE-----" + own
    )
    assert "CN=client one" in env["SSL_CLIENT_S_DN"]
    # Optional: a client without one is served, and says NONE.
    env, seen = get(srv.port, ctx_for(pki), "/environ")
    assert env["SSL_CLIENT_VERIFY"] == "NONE" and "SSL_CLIENT_CERT" not in env


@pytest.mark.parametrize("kind", RINGLOOP, ids=str)
def test_websocket_scope_has_the_tls_extension(kind, pool, pki):
    from websockets.sync.client import connect

    check_kind(kind)
    srv = pool.get(kind, "srv_ws_app:app", "asgi", **tls(pki))
    with connect(f"wss://{HOST}:{srv.port}/scope", ssl=ctx_for(pki)) as ws:
        scope = json.loads(ws.recv(timeout=10))
    assert scope["scheme"] == "wss"
    ext = scope["extensions"]
    assert "websocket.http.response" in ext
    assert ext["tls"]["tls_version"] == 0x0304
    assert ext["tls"]["server_cert"] == pki["cert"].read_text()
    assert ext["tls"]["client_cert_chain"] == []


def test_a_ticket_from_one_worker_resumes_on_the_other(start_server, pki):
    """`--workers 2`: the first connection's ticket is offered on new connections until one
    lands on the other worker (the kernel spreads connections over the workers by their
    port pair: each new connection is another draw); that one must resume."""
    kind = RINGLOOP[0]
    check_kind(kind)
    srv = start_server(kind, "srv_asgi_app:app", "asgi", workers=2, **tls(pki))
    ctx = ctx_for(pki)
    first, seen = get(srv.port, ctx, "/stats")
    session = seen.session
    assert session is not None and session.has_ticket
    for _ in range(400):  # 2**-400 that every one lands on the first worker
        stats, conn = get(srv.port, ctx, "/stats", session=session)
        if stats["pid"] == first["pid"]:
            continue
        assert conn.session_reused, "the other worker did not resume the first worker's session"
        break
    else:
        pytest.fail("400 connections all landed on one worker")
