"""TLS in Rust (`src/tls/`, `src/transport/stream/tls.rs`) under `ringloop serve`, with real
clients on 127.0.0.1: curl, `openssl s_client`, httpx, `websockets` (wss:// is in
test_server_websocket.py), and raw sockets for bad input. Certificates are made here by
trustme (a CA, the server's, a client's) and by the openssl CLI (the key forms).

What is checked against uvicorn (stdlib `ssl`) as the reference: a request over TLS behaves as
over cleartext, `scheme` is "https". ringloop only: the ASGI `tls` extension (uvicorn has
none), the flags uvicorn lacks (`--ssl-crl`, `--ssl-protocol-min`), and the debug log lines.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys

import pytest
from harness_basics import wait_until
from srv_harness import HOST, RINGLOOP_KINDS, UVICORN_KINDS, Kind, check_kind
from tls_pki import issue_pki

trustme = pytest.importorskip("trustme")
httpx = pytest.importorskip("httpx")

KINDS = [Kind(k) for k in (*RINGLOOP_KINDS, UVICORN_KINDS[0])]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, the server's certificate for 127.0.0.1 and a client certificate, as files."""
    d = tmp_path_factory.mktemp("pki")
    return issue_pki(d, "127.0.0.1", "localhost")


def tls_settings(files, **more):
    return {"ssl_keyfile": str(files["key"]), "ssl_certfile": str(files["cert"]), **more}


def client_ctx(ca) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_https_requests_like_cleartext(kind, pool, pki):
    """Keep-alive requests, a body each way that spans many records, `scheme` https."""
    check_kind(kind)
    ca, files = pki
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **tls_settings(files))
    with httpx.Client(verify=client_ctx(ca), base_url=f"https://127.0.0.1:{srv.port}") as c:
        for _ in range(3):
            scope = c.post("/scope", content=b"hello").json()
            assert scope["scheme"] == "https"
            assert scope["body"] == {"bytes": "hello"}
        big = bytes(range(256)) * 4096  # 1 MiB: records split anywhere in the reads
        r = c.post("/echo", content=big)
        assert r.status_code == 200 and r.content == big


@pytest.mark.parametrize("kind", [Kind(k) for k in RINGLOOP_KINDS], ids=str)
def test_asgi_tls_extension(kind, pool, pki):
    check_kind(kind)
    ca, files = pki
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **tls_settings(files))
    with httpx.Client(verify=client_ctx(ca)) as c:
        tls = c.get(f"https://127.0.0.1:{srv.port}/scope").json()["tls"]
    assert tls["server_cert"] == files["cert"].read_text()
    assert tls["client_cert_chain"] == []
    assert tls["client_cert_name"] is None and tls["client_cert_error"] is None
    assert tls["tls_version"] == 0x0304
    assert tls["cipher_suite"] in (0x1301, 0x1302, 0x1303)


@pytest.mark.parametrize("kind", [Kind(k) for k in RINGLOOP_KINDS], ids=str)
def test_wsgi_https_environ(kind, pool, pki):
    check_kind(kind)
    ca, files = pki
    srv = pool.get(kind, "srv_wsgi_app:app", "wsgi", **tls_settings(files))
    with httpx.Client(verify=client_ctx(ca)) as c:
        env = c.get(f"https://127.0.0.1:{srv.port}/environ").json()
    assert env["wsgi.url_scheme"] == "https" and env["HTTPS"] == "on"


def test_curl(pool, pki):
    kind = Kind(RINGLOOP_KINDS[0])
    check_kind(kind)
    ca, files = pki
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **tls_settings(files))
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--cacert",
            str(files["ca"]),
            "-w",
            "\\n%{http_version} %{ssl_verify_result}",
            f"https://127.0.0.1:{srv.port}/scope",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    body, _, tail = out.rpartition("\n")
    assert json.loads(body)["scheme"] == "https"
    # curl offers ALPN h2 first, and the server now speaks HTTP/2 (test_server_http2.py).
    assert tail == "2 0"


def s_client(port: int, *args: str, data: bytes = b"", timeout: float = 30) -> str:
    cmd = [
        "openssl",
        "s_client",
        "-connect",
        f"127.0.0.1:{port}",
        "-servername",
        "localhost",
        *args,
    ]
    return subprocess.run(cmd, input=data, capture_output=True, timeout=timeout).stdout.decode(
        "latin-1"
    )


def test_openssl_alpn_and_resumption(pool, pki, tmp_path):
    kind = Kind(RINGLOOP_KINDS[0])
    check_kind(kind)
    ca, files = pki
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **tls_settings(files))
    req = b"GET /scope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    sess = tmp_path / "sess.pem"
    for version in ("-tls1_3", "-tls1_2"):
        first = s_client(
            srv.port,
            version,
            # http/1.1 alone: a client that offers h2 gets it (test_server_http2.py), and
            # this request is HTTP/1.1.
            "-alpn",
            "http/1.1",
            "-CAfile",
            str(files["ca"]),
            "-sess_out",
            str(sess),
            "-ign_eof",
            data=req,
        )
        assert "ALPN protocol: http/1.1" in first
        assert "Verify return code: 0 (ok)" in first
        assert '"scheme": "https"' in first or '"scheme":"https"' in first
        again = s_client(
            srv.port,
            version,
            "-CAfile",
            str(files["ca"]),
            "-sess_in",
            str(sess),
            "-ign_eof",
            data=req,
        )
        assert "Reused," in again, again[-2000:]


def test_mutual_tls(pool, pki):
    kind = Kind(RINGLOOP_KINDS[0])
    check_kind(kind)
    ca, files = pki
    settings = tls_settings(files, ssl_ca_certs=str(files["ca"]), ssl_cert_reqs=2)
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **settings)
    url = f"https://127.0.0.1:{srv.port}/scope"
    ctx = client_ctx(ca)
    with pytest.raises(httpx.HTTPError):  # no client certificate: the handshake fails
        with httpx.Client(verify=ctx) as c:
            c.get(url)
    ctx.load_cert_chain(str(files["client"]))
    with httpx.Client(verify=ctx) as c:
        tls = c.get(url).json()["tls"]
    # What the client sent, its own certificate first.
    text = files["client"].read_text()
    sent = [
        ssl.PEM_cert_to_DER_cert(f"-----BEGIN CERTIFICATE-----{b}")
        for b in text.split("-----BEGIN CERTIFICATE-----")[1:]
    ]
    got = [ssl.PEM_cert_to_DER_cert(pem) for pem in tls["client_cert_chain"]]
    # OpenSSL's client adds the CA from its trust store after its own certificate.
    assert got[0] == sent[0] and len(got) <= 2
    assert tls["client_cert_chain"][0].startswith("-----BEGIN CERTIFICATE-----\n")
    assert "CN=client one" in tls["client_cert_name"]
    # Optional: both work.
    settings = tls_settings(files, ssl_ca_certs=str(files["ca"]), ssl_cert_reqs=1)
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **settings)
    with httpx.Client(verify=client_ctx(ca)) as c:
        assert c.get(f"https://127.0.0.1:{srv.port}/scope").json()["tls"]["client_cert_chain"] == []
    with httpx.Client(verify=ctx) as c:
        assert c.get(f"https://127.0.0.1:{srv.port}/scope").json()["tls"]["client_cert_chain"]


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize("kind", [Kind(k) for k in RINGLOOP_KINDS], ids=str)
def test_bad_input_ends_only_that_connection(kind, pool, pki):
    """Plain HTTP to the TLS port, garbage for a ClientHello: an alert (a TLS record of type
    21) or a close, logged at debug; a connection open beside them keeps working."""
    check_kind(kind)
    ca, files = pki
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", log_level="debug", **tls_settings(files))
    ctx = client_ctx(ca)
    with httpx.Client(verify=ctx, base_url=f"https://127.0.0.1:{srv.port}") as good:
        assert good.get("/scope").status_code == 200
        for junk in (
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            b"\x16\x03\x01\x00\x05hello",
            b"\x00" * 64,
        ):
            with socket.create_connection((HOST, srv.port), timeout=30) as s:
                s.sendall(junk)
                reply = _read_all(s)
            assert reply == b"" or reply[0] == 21, reply[:16]
            assert good.get("/scope").status_code == 200
    wait_until(lambda: "TLS error" in srv.log(), 30, "the debug line")


@pytest.mark.parametrize("kind", [Kind(k) for k in RINGLOOP_KINDS], ids=str)
def test_handshake_timeout(kind, pool, pki):
    """A TLS slowloris (half a ClientHello, then nothing) is cut at --timeout-request-head."""
    check_kind(kind)
    ca, files = pki
    settings = tls_settings(files, timeout_request_head=1, log_level="debug")
    srv = pool.get(kind, "srv_asgi_app:app", "asgi", **settings)
    with socket.create_connection((HOST, srv.port), timeout=30) as s:
        s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        assert _read_all(s) == b""  # closed by the server, well before the socket timeout
    wait_until(lambda: "TLS handshake timed out" in srv.log(), 30, "the debug line")
    with httpx.Client(verify=client_ctx(ca)) as c:
        assert c.get(f"https://127.0.0.1:{srv.port}/scope").status_code == 200


# -- start-up errors: one line naming the file and the problem ----------------------------------


def _serve_error(*flags: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ringloop", "serve", "srv_asgi_app:app", "--port", "0", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """One RSA and one ECDSA key in every form, with self-signed certificates."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    d = tmp_path_factory.mktemp("keys")
    out = {}
    for alg, gen in (
        ("rsa", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]),
        ("ec", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]),
    ):
        pk8 = d / f"{alg}.pk8.pem"
        _openssl("genpkey", *gen, "-out", str(pk8))
        cert = d / f"{alg}.crt"
        _openssl(
            "req",
            "-x509",
            "-key",
            str(pk8),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-days",
            "2",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        )
        trad = d / f"{alg}.trad.pem"  # PKCS#1 for RSA, SEC1 for EC
        _openssl(
            alg, "-in", str(pk8), "-out", str(trad), *(["-traditional"] if alg == "rsa" else [])
        )
        enc = d / f"{alg}.enc.pem"
        _openssl(
            "pkcs8",
            "-topk8",
            "-v2",
            "aes-256-cbc",
            "-in",
            str(pk8),
            "-out",
            str(enc),
            "-passout",
            "pass:s3cret",
        )
        out[alg] = {"pk8": pk8, "trad": trad, "enc": enc, "cert": cert}
    return out


@pytest.mark.parametrize("alg", ["rsa", "ec"])
@pytest.mark.parametrize("form", ["pk8", "trad", "enc"])
def test_key_forms(alg, form, keys, start_server):
    kind = Kind(RINGLOOP_KINDS[1])
    k = keys[alg]
    head = k["trad"].read_text().splitlines()[0]
    assert (
        head
        == ("-----BEGIN RSA PRIVATE KEY-----" if alg == "rsa" else "-----BEGIN EC PRIVATE KEY-----")
        or form != "trad"
    )
    settings = {"ssl_keyfile": str(k[form]), "ssl_certfile": str(k["cert"])}
    if form == "enc":
        settings["ssl_keyfile_password"] = "s3cret"
    srv = start_server(kind, "srv_asgi_app:app", "asgi", **settings)
    ctx = ssl.create_default_context(cafile=str(k["cert"]))
    with httpx.Client(verify=ctx) as c:
        assert c.get(f"https://127.0.0.1:{srv.port}/scope").json()["scheme"] == "https"


def test_unusable_keys_and_certs_are_one_line(keys, tmp_path):
    rsa, ec = keys["rsa"], keys["ec"]
    missing = tmp_path / "missing.pem"
    cases = [
        ((str(missing), str(rsa["cert"])), f"--ssl-keyfile {missing}: cannot read"),
        ((str(rsa["cert"]), str(rsa["cert"])), "no private key in it"),
        ((str(rsa["pk8"]), str(rsa["pk8"])), "no certificate in it"),
        ((str(ec["pk8"]), str(rsa["cert"])), "the key does not match the certificate"),
        ((str(rsa["enc"]), str(rsa["cert"])), "encrypted and no --ssl-keyfile-password"),
    ]
    for (key, cert), want in cases:
        line = _serve_error("--ssl-keyfile", key, "--ssl-certfile", cert)
        assert line.startswith("ringloop serve: error: --ssl-") and want in line, line
    line = _serve_error(
        "--ssl-keyfile",
        str(rsa["enc"]),
        "--ssl-certfile",
        str(rsa["cert"]),
        "--ssl-keyfile-password",
        "wrong",
    )
    assert f"{rsa['enc']}: cannot decrypt the key: wrong --ssl-keyfile-password" in line
    line = _serve_error(
        "--ssl-keyfile",
        str(rsa["pk8"]),
        "--ssl-certfile",
        str(rsa["cert"]),
        "--ssl-ciphers",
        "RC4-MD5",
    )
    assert 'unknown cipher "RC4-MD5"' in line
