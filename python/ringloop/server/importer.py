"""Finding the application: `module:attribute` imported (or called, with `--factory`), and
which interface it speaks.

Errors are one line each (`AppLoadError`), for the command line to print: a module that does
not import says why (the import error's own message), a missing attribute names the module's
attributes nearby.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any


class AppLoadError(Exception):
    """The application could not be loaded (the message says why)."""


def import_from_string(spec: Any) -> Any:
    if not isinstance(spec, str):
        return spec
    module_name, _, attrs = spec.partition(":")
    if not module_name or not attrs:
        raise AppLoadError(f'Import string "{spec}" must be in format "<module>:<attribute>".')
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise AppLoadError(f'Error loading "{spec}": {type(exc).__name__}: {exc}') from exc
        raise AppLoadError(f'Could not import module "{module_name}".') from exc
    except Exception as exc:
        raise AppLoadError(f'Error loading "{spec}": {type(exc).__name__}: {exc}') from exc
    obj: Any = module
    try:
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
    except AttributeError as exc:
        raise AppLoadError(f'Attribute "{attrs}" not found in module "{module_name}".') from exc
    return obj


def load(spec: Any, *, factory: bool = False, app_dir: str = ".") -> Any:
    """The application object `spec` names (a factory's result with `factory=True`)."""
    if app_dir:
        path = os.path.abspath(app_dir)
        if path not in sys.path:
            sys.path.insert(0, path)
    app = import_from_string(spec)
    if factory:
        if not callable(app):
            raise AppLoadError(f'"{spec}" is not callable, but --factory was given.')
        try:
            app = app()
        except TypeError as exc:
            raise AppLoadError(f'Error calling the factory "{spec}": {exc}') from exc
    return app


def native_kind(app: Any) -> str | None:
    """`native` or `native-async` for a handler marked by `ringloop.server.native_handler`."""
    return getattr(app, "__ringloop_interface__", None)


def detect_interface(app: Any) -> str:
    """`--interface auto`: a marked native handler, an ASGI 3 application (a coroutine
    function, or an object whose `__call__` is one), else WSGI when it takes two arguments."""
    kind = native_kind(app)
    if kind:
        return kind
    # An instance's `__call__` (a bound method) tells what calling the instance does.
    call = app if inspect.isroutine(app) or inspect.isclass(app) else type(app).__call__
    if inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(app):
        return "asgi"
    try:
        params = [
            p
            for p in inspect.signature(app).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return "asgi"
    if len(params) == 2:
        return "wsgi"
    return "asgi"
