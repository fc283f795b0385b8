"""The stress scenarios' other ends (``read_order_stress``): the senders, and the endpoints
(TCP, Unix, TLS over a throwaway CA) the readers and senders meet at.

A sender writes a scenario's bytes in its drawn sizes, then ends the stream as the scenario
says (EOF and wait for the reader's reply, a close, or an abort); it waits for ``go`` first, so
a crowd's senders start together.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import ssl

GO_TIMEOUT = 90.0

# -- TLS ----------------------------------------------------------------------------------------


_TLS: tuple[ssl.SSLContext, ssl.SSLContext] | None = None


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for a throwaway CA made by ``trustme``."""
    global _TLS
    if _TLS is None:
        import trustme

        ca = trustme.CA()
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(server)
        client = ssl.create_default_context()
        ca.configure_trust(client)
        _TLS = (server, client)
    return _TLS


# -- the sending side ---------------------------------------------------------------------------


def abort_at(rng: random.Random, sizes: list[int], ending: str) -> int:
    """How many writes happen before an abort (``len(sizes)``: no abort)."""
    return rng.randrange(len(sizes) + 1) if ending == "abort" else len(sizes)


def writes(data: bytes, sizes: list[int], abort_after: int):
    """The scenario's writes of ``data``, in order, up to the abort (if any)."""
    pos = 0
    for n in sizes[:abort_after]:
        yield data[pos : pos + n]
        pos += n


def thread_send(sock, data: bytes, sizes, ending: str, abort_after: int, out: dict, go):
    """Blocking sender: ``sendall`` each write, then end the stream as the scenario says."""
    go.wait(GO_TIMEOUT)
    try:
        for chunk in writes(data, sizes, abort_after):
            sock.sendall(chunk)
        if ending == "abort":
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            sock.close()
            return
        if ending == "eof":
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
            out["reply"] = reply
        elif isinstance(sock, ssl.SSLSocket):
            sock.unwrap()
    except OSError as e:
        out["error"] = repr(e)
    finally:
        sock.close()


async def loop_send(reader, writer, data: bytes, sizes, ending: str, abort_after: int, out, go):
    while not go.is_set():
        await asyncio.sleep(0.001)
    try:
        for chunk in writes(data, sizes, abort_after):
            writer.write(chunk)
            await writer.drain()
        if ending == "abort":
            writer.transport.abort()
            return
        if ending == "eof":
            writer.write_eof()
            out["reply"] = await reader.read()
        writer.close()
        await writer.wait_closed()
    except (ConnectionError, ssl.SSLError) as e:
        out["error"] = repr(e)
        writer.transport.abort()


class Endpoint:
    """Addresses and sockets of one scenario's family."""

    def __init__(self, family: str, tmpdir: str) -> None:
        self.family, self.tmpdir, self.n = family, tmpdir, 0
        self.tls = tls_contexts() if family == "tls" else None

    def address(self):
        if self.family == "unix":
            self.n += 1
            return os.path.join(self.tmpdir, f"s{self.n}")
        return ("127.0.0.1", 0)

    @property
    def af(self) -> int:
        return socket.AF_UNIX if self.family == "unix" else socket.AF_INET

    def server_ssl(self):
        return self.tls[0] if self.tls else None

    def client_ssl(self):
        return self.tls[1] if self.tls else None

    def hostname(self):
        return "localhost" if self.tls else None

    def plain_connect(self, addr) -> socket.socket:
        sock = socket.socket(self.af, socket.SOCK_STREAM)
        sock.connect(addr)
        if self.tls:
            sock = self.tls[1].wrap_socket(sock, server_hostname="localhost")
        return sock

    def plain_listen(self) -> socket.socket:
        sock = socket.socket(self.af, socket.SOCK_STREAM)
        sock.bind(self.address())
        sock.listen(128)
        return sock

    def plain_accept(self, lsock: socket.socket) -> socket.socket:
        sock, _ = lsock.accept()
        if self.tls:
            sock = self.tls[0].wrap_socket(sock, server_side=True)
        return sock
