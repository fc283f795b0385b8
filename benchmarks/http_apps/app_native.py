"""ringloop's native handler API (``ringloop.server.native``): a plain synchronous function
per request, called from the protocol with no task and no scope dict. With a build that lacks
the API, importing this module fails and the suite records the ringloop-native row as a
crash with that error."""

from ringloop.server.native import Response, native_handler

HELLO = b"Hello, world!"
BIG = b"x" * 65536
TEXT_HEADERS = [(b"content-type", b"text/plain")]
BIG_HEADERS = [(b"content-type", b"application/octet-stream")]


@native_handler
def hello(request):
    # A Response per request, as an application builds one; the constant parts are shared,
    # as in every other app of the suite.
    return Response(200, TEXT_HEADERS, HELLO)


@native_handler
def big(request):
    return Response(200, BIG_HEADERS, BIG)


@native_handler
def upload(request):
    # A synchronous handler is called once the whole body has arrived, as request.body.
    return Response(200, TEXT_HEADERS, str(len(request.body)).encode())
