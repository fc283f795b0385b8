"""WSGI applications: what ringloop, granian, socketify and cymongoose run in the WSGI rows."""

HELLO = b"Hello, world!"
BIG = b"x" * 65536
TEXT_HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(HELLO)))]
BIG_HEADERS = [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(BIG)))]


def hello(environ, start_response):
    start_response("200 OK", TEXT_HEADERS)
    return [HELLO]


def big(environ, start_response):
    start_response("200 OK", BIG_HEADERS)
    return [BIG]


def upload(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    stream = environ["wsgi.input"]
    chunks = []
    size = 0
    # In pieces (read() with no size need not stop at Content-Length, PEP 3333 says), then
    # the whole body as one bytes object, as every app of the suite ends up holding it.
    while size < length:
        chunk = stream.read(min(65536, length - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    body = str(len(b"".join(chunks))).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
