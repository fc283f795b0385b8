"""The applications the HTTP suite (``http_suite.py``) serves, one module per interface.

Each server runs with this directory on ``sys.path`` and imports a module from it by its
top-level name (``app_asgi:hello``), so the names all start with ``app_``: none may shadow a
package a server imports (an ``aiohttp.py`` here would). Every module offers the same
responses under the same names where its interface allows:

  hello    ``Hello, world!`` as text/plain (the plaintext and pipelined scenarios)
  big      64 KiB of ``x`` as application/octet-stream
  upload   reads the whole request body, answers its length in bytes as text/plain
  json     ``{"message": "Hello, world!"}`` (``app_fastapi`` only)

Every response carries a Content-Length, so no server falls back to chunked encoding and
all of them send the same bytes. Modules that start their own server (``app_aiohttp``,
``app_socketify``, ``app_cymongoose``) are run as scripts; each one's
docstring gives its arguments (``http_peers.py`` builds the command lines).
"""
