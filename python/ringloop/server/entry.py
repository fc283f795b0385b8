"""Run or supervise: the one place that decides how `ringloop serve` runs a configuration.

One worker in this process (`server.run`), a supervisor of `--workers N` (`supervisor`), or
the reloader of `--reload` (`reloader`). The command line (`cli`) and `ringloop.serve()` both
come through here; nothing below imports this module, so the supervisor and the reloader
reach the worker's `run` without a circle.
"""

from __future__ import annotations

from typing import Any

from .config import Config, load_env_file
from .server import run


def run_config(config: Config) -> int:
    """Serve `config` until it is told to stop; the exit status."""
    if config.reload:
        from .reloader import Reloader

        return Reloader(config).run()
    if config.workers > 1:
        from .supervisor import Supervisor

        return Supervisor(config).run()
    return run(config)


def serve(app: Any, **settings: Any) -> int:
    """`ringloop.serve(app, host=..., port=...)`: run `app` (an object or `"module:attr"`) with
    the given settings (`Config`'s names) in this process until SIGINT/SIGTERM."""
    config = Config(app=app, **settings)
    if config.env_file:
        # Before the application is imported, as `ringloop serve --env-file` does.
        load_env_file(config.env_file)
    return run_config(config)
