"""cymongoose (Mongoose, in C, under a Cython wrapper): ``python app_cymongoose.py native
RESPONSE PORT`` answers from a Mongoose event handler (its own API); ``python
app_cymongoose.py asgi|wsgi MODULE:APP PORT`` serves an app of this directory through
``cymongoose.asgi``/``cymongoose.wsgi`` with their default settings."""

import importlib
import sys

HELLO = b"Hello, world!"
BIG = b"x" * 65536
TEXT = {"Content-Type": "text/plain"}
OCTETS = {"Content-Type": "application/octet-stream"}


def native(response, url):
    from cymongoose import MG_EV_HTTP_MSG, Manager

    if response == "hello":

        def handler(conn, event, data):
            if event == MG_EV_HTTP_MSG:
                conn.reply(200, HELLO, TEXT)

    elif response == "big":

        def handler(conn, event, data):
            if event == MG_EV_HTTP_MSG:
                conn.reply(200, BIG, OCTETS)

    else:

        def handler(conn, event, data):
            if event == MG_EV_HTTP_MSG:
                conn.reply(200, str(len(data.body_bytes)).encode(), TEXT)

    manager = Manager(handler)
    manager.listen(url)
    manager.run()


if __name__ == "__main__":
    interface, what, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    url = f"http://127.0.0.1:{port}"
    if interface == "native":
        native(what, url)
    else:
        module, _, name = what.partition(":")
        app = getattr(importlib.import_module(module), name)
        serve = importlib.import_module(f"cymongoose.{interface}").serve
        serve(app, url)
