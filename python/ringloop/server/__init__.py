"""ringloop's HTTP server: HTTP/1.1 on the loop's own thread for ASGI, WSGI and native
handlers. `ringloop serve module:app` (see `cli`) or `ringloop.serve(app, **settings)`.

The protocol and the request cycle are native (`src/http/`); this package holds the
configuration (`config`), one worker's lifecycle (`server`), lifespan, the ASGI and WSGI glue,
the native handler API, the command line (`cli`), the supervisor of `--workers`
(`supervisor`, `control`), the reloader of `--reload` (`reloader`), the gunicorn worker class
(`gunicorn`) and logs; `listen` binds the sockets and `entry` decides
whether to run one worker or supervise several.

`GunicornWorker` is exported lazily: `gunicorn -k ringloop.server.GunicornWorker` finds it
here, and nothing imports gunicorn until it is asked for.
"""

from typing import Any

from .config import Config, ConfigError
from .entry import serve
from .server import Server, run

__all__ = ["Config", "ConfigError", "GunicornWorker", "Server", "run", "serve"]


def __getattr__(name: str) -> Any:
    if name == "GunicornWorker":
        from .gunicorn import GunicornWorker

        return GunicornWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
