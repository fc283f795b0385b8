"""socketify's own API (``socketify.App``, uWebSockets underneath): ``python app_socketify.py
RESPONSE PORT PATH``. One route at the scenario's path. (Its ASGI and WSGI rows run the
apps of ``app_asgi``/``app_wsgi`` through ``python -m socketify`` instead.)"""

import sys

from socketify import App, AppListenOptions

HELLO = b"Hello, world!"
BIG = b"x" * 65536


def hello(res, req):
    res.write_header("Content-Type", "text/plain")
    res.end(HELLO)


def big(res, req):
    res.write_header("Content-Type", "application/octet-stream")
    res.end(BIG)


async def upload(res, req):
    # As socketify's upload example does it: await the whole body, answer with cork_end.
    data = await res.get_data()
    res.cork_end(str(len(data.getvalue())).encode())


if __name__ == "__main__":
    response, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    handler = {"hello": hello, "big": big, "upload": upload}[response]
    app = App()
    app.any(path, handler)
    app.listen(AppListenOptions(port=port, host="127.0.0.1"), None)
    app.run()
