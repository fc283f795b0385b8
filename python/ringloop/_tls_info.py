"""`transport.get_extra_info("ssl_object")` of a native TLS transport (rustls, in Rust).

`extra_info` answers the TLS keys of `get_extra_info` for both native TLS transports
(`StreamTransport` and the natively accepted `_core.NativeTransport`).

asyncio's TLS transports hand out an `ssl.SSLObject`; ringloop's session is rustls's, so this
is the read-only part of `SSLObject`'s interface that servers and applications ask a live
connection about: `version()`, `cipher()`, `selected_alpn_protocol()`, `getpeercert()`,
`compression()`, `server_side`, `server_hostname`. Every value is read from the session
(`StreamIO.tls_info`) when asked, so it is right before and after the handshake alike.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any


class TlsObject:
    """The session's details, as `ssl.SSLObject` names them (see the module docs)."""

    server_side = True
    # The stdlib's server-side SSLObject has no server_hostname; the SNI name asked for is
    # `sni_name` here (mod_ssl's SSL_TLS_SNI).
    server_hostname = None

    def __init__(self, io: Any) -> None:
        self._io = io

    def _info(self) -> tuple:
        return self._io.tls_info() or (None, None, None, [], None)

    def version(self) -> str | None:
        """ "TLSv1.3" or "TLSv1.2" (None before the handshake decided)."""
        return self._info()[0]

    def cipher(self) -> tuple[str, str, int] | None:
        """`(OpenSSL name, protocol version, secret bits)`, as `SSLObject.cipher()`."""
        version, cipher = self._info()[:2]
        if cipher is None:
            return None
        return (cipher[0], version, cipher[1])

    def selected_alpn_protocol(self) -> str | None:
        return self._info()[2]

    def compression(self) -> None:
        return None

    @property
    def sni_name(self) -> str | None:
        return self._info()[4]

    def getpeercert(self, binary_form: bool = False) -> dict | bytes | None:
        """The client's certificate (verified: rustls ends a handshake whose certificate does
        not verify): DER with `binary_form`, else the stdlib's dict of it; None without one."""
        chain = self._info()[3]
        if not chain:
            return None
        if binary_form:
            return chain[0]
        return decode_cert(chain[0])

    def __repr__(self) -> str:
        return f"<ringloop TlsObject {self.version()} {self.cipher()}>"


# The `get_extra_info` keys asyncio's TLS transports answer from their `SSLObject`.
KEYS = ("ssl_object", "peercert", "cipher", "compression")


def extra_info(io: Any, name: str) -> Any:
    """`get_extra_info(name)` for one of `KEYS` on a TLS session (None: not known, so the
    caller's default)."""
    obj = TlsObject(io)
    if name == "ssl_object":
        return obj
    if name == "peercert":
        return obj.getpeercert()
    if name == "cipher":
        return obj.cipher()
    return obj.compression()


def decode_cert(der: bytes) -> dict:
    """The dict `SSLSocket.getpeercert()` gives, made by the stdlib's own decoder (which reads
    a PEM file: there is no public in-memory form)."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(ssl.DER_cert_to_PEM_cert(der))
        return ssl._ssl._test_decode_cert(path)  # noqa: SLF001 (the stdlib's only decoder)
    finally:
        os.unlink(path)
