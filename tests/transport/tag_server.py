"""A plain-socket "tag" server, run as a separate process by the fd-reuse test.

Usage: ``python tag_server.py tcp`` or ``python tag_server.py unix PATH``. It prints its
address (``host port`` or the path) on one line, then serves until stdin closes. Each
connection sends one tag byte and then receives that byte repeated, as fast as the kernel
takes it, until the connection breaks.

It is a separate process on purpose: its sockets must not come out of the test process's fd
table, or closing them would free fd numbers at random moments and the test could not tell
whether the loop reused an fd it had just released.
"""

from __future__ import annotations

import socket
import sys
import threading


def stream(conn: socket.socket) -> None:
    with conn:
        try:
            tag = conn.recv(1)
            block = tag * 65536
            while tag:
                conn.sendall(block)
        except OSError:  # the client went away: reset or broken pipe
            pass


def accept_loop(lsock: socket.socket) -> None:
    while True:
        conn, _ = lsock.accept()
        threading.Thread(target=stream, args=(conn,), daemon=True).start()


def main() -> None:
    if sys.argv[1] == "tcp":
        lsock = socket.create_server(("127.0.0.1", 0), backlog=128)
        host, port = lsock.getsockname()
        print(host, port, flush=True)
    else:
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(sys.argv[2])
        lsock.listen(128)
        print(sys.argv[2], flush=True)
    threading.Thread(target=accept_loop, args=(lsock,), daemon=True).start()
    sys.stdin.read()  # the test closes our stdin when it is done


if __name__ == "__main__":
    main()
