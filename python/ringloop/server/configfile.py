"""`ringloop serve --config ringloop.toml`, and `RINGLOOP_*` environment variables: settings
from outside the command line, under the long flags' own names.

Where a setting comes from, the last that gives it winning:

    Config's default  <  the --config file  <  RINGLOOP_<NAME>  <  the flag itself

A file's keys are the long flags without their dashes (`port = 8001`,
`timeout-keep-alive = 10`, `access-log = false`, `header = ["x-team: web"]`, and `app`
for the positional APP); `RINGLOOP_` + the flag upper-cased with `_` for `-` names the same
setting in the environment (`RINGLOOP_TIMEOUT_KEEP_ALIVE=10`, `RINGLOOP_ACCESS_LOG=false`). A
file value has the TOML type the flag's value has (an integer, a number of seconds, a string,
true/false, an array for a flag that repeats); an environment value is read as the flag's text
would be (an array's items comma-separated, `RINGLOOP_HEADER`'s one per line). Variables whose
name is no flag's (`RINGLOOP_BACKEND`, the loop's own) are left alone.

Every mistake is one line that names the key and where it came from:
`ringloop.toml: timeout-keep-alive: expected a number of seconds, got 'ten'`,
`ringloop.toml: unknown key 'prot' (did you mean 'port'?)`.
The values are then checked once more, with the flags', by `Config`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import tomllib
from collections.abc import Mapping
from typing import Any

from . import argtypes
from .config import UVICORN_HTTP, Config, ConfigError, load_env_file

ENV_PREFIX = "RINGLOOP_"
_FIELDS = {f.name for f in dataclasses.fields(Config)}
# Flags that are no setting: what to run is `serve`'s, uvicorn's ignored choices, this one.
NOT_SETTINGS = frozenset({"help", "version", "loop", "http", "config"})


def keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """`serve`'s settings by key (the long flag without its dashes; `app` for APP)."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse exposes no public list
        if not action.option_strings:
            if action.dest == "app":
                found["app"] = action
            continue
        long = next((o for o in action.option_strings if o.startswith("--")), None)
        if long is None:
            continue
        key = long[2:]
        if key not in NOT_SETTINGS:
            found[key] = action
    return found


def read_file(path: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The settings (by `Config` name) a TOML file gives; `ConfigError` names the first
    problem."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"--config: {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"--config: {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    known = keys(parser)
    settings: dict[str, Any] = {}
    for key, value in data.items():
        action = known.get(key)
        if action is None:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")
        try:
            settings[action.dest] = _from_toml(action, value)
        except _Bad as exc:
            raise ConfigError(f"{path}: {key}: {exc}") from None
    return settings


def read_env(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings (by `Config` name) `RINGLOOP_*` variables give."""
    settings: dict[str, Any] = {}
    for key, action in keys(parser).items():
        name = ENV_PREFIX + key.upper().replace("-", "_")
        text = environ.get(name)
        if text is None:
            continue
        try:
            settings[action.dest] = _from_text(action, text)
        except _Bad as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return settings


def given_on_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The `Config` names of the flags `argv` (the words after `serve`) really gives: parsed
    once more with every default suppressed, so a flag left at its default is absent."""
    saved = [(a, a.default) for a in parser._actions]  # noqa: SLF001
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        given, _ = parser.parse_known_args(argv)
    finally:
        for action, default in saved:
            action.default = default
    return set(vars(given))


def layer(args: argparse.Namespace, words: list[str]) -> dict[str, str]:
    """Fill `args` from `--config` and `RINGLOOP_*` where the command line gave no flag (see
    `configfile`), loading `--env-file` (a flag's or the file's) before the environment is
    read. Returns where each setting taken came from, as an error about it should say."""
    serve = args._serve_parser
    given = given_on_command_line(serve, words)
    from_file = read_file(args.config, serve) if args.config else {}
    env_file = args.env_file if "env_file" in given else from_file.get("env_file")
    if env_file:
        load_env_file(env_file)
    from_env = read_env(serve, os.environ)
    names = {a.dest: key for key, a in keys(serve).items()}
    origins = {}
    for source, settings in ((None, from_file), (ENV_PREFIX, from_env)):
        for name, value in settings.items():
            if name in given:
                continue
            setattr(args, name, value)
            key = names[name]
            origins[name] = (
                f"{args.config}: {key}"
                if source is None
                else source + key.upper().replace("-", "_")
            )
    return origins


# -- from arguments to a Config ---------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> Config:
    """The `Config` a parsed `serve` command line asks for (after `--env-file` is loaded)."""
    settings = {k: v for k, v in vars(args).items() if k in _FIELDS}
    for name in (
        "headers",
        "reload_dirs",
        "reload_includes",
        "reload_excludes",
        "static_path_route",
        "static_path_mount",
        "static_path_expires",
        "ssl_crl",
    ):
        if settings.get(name) is None:
            settings[name] = []
    if settings.get("workers") is None:
        env = os.environ.get("WEB_CONCURRENCY")
        try:
            settings["workers"] = int(env) if env else 1
        except ValueError:
            raise ConfigError(f"WEB_CONCURRENCY: expected an integer, got {env!r}") from None
    if settings.get("http") is None or settings["http"] in UVICORN_HTTP:
        settings["http"] = "auto"
    # --forwarded-allow-ips None means $FORWARDED_ALLOW_IPS at run time (Config reads it).
    return Config(**settings)


def layered_config(args: argparse.Namespace, words: list[str]) -> Config:
    """The `Config` of a parsed `serve` command line (`words`: what followed `serve`) with
    `--config` and `RINGLOOP_*` beneath its flags."""
    origins = layer(args, words)
    if args.app is None:
        raise ConfigError("APP: give the application, as module:attribute (or app in --config)")
    try:
        return config_from_args(args)
    except ConfigError as exc:
        # Config names the flag (`--workers: ...`); a value from the file or the environment
        # is named where it was written.
        flag, sep, rest = str(exc).partition(": ")
        name = flag.removeprefix("--").replace("-", "_")
        if sep and flag.startswith("--") and name in origins:
            raise ConfigError(f"{origins[name]}: {rest}") from None
        raise


# -- one value ----------------------------------------------------------------------------------


class _Bad(Exception):
    """A value of the wrong type (the message says what was expected)."""


def _is_flag(action: argparse.Action) -> bool:
    return action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction)


def _repeats(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction)  # noqa: SLF001


def _from_toml(action: argparse.Action, value: Any) -> Any:
    if _repeats(action):
        if not isinstance(value, list):
            raise _Bad(f"expected an array, got {value!r}")
        return [_scalar_from_toml(action, item) for item in value]
    return _scalar_from_toml(action, value)


def _scalar_from_toml(action: argparse.Action, value: Any) -> Any:
    kind = getattr(action.type, "__name__", None)
    if _is_flag(action) or action.type is argtypes.boolean:
        if not isinstance(value, bool):
            raise _Bad(f"expected true or false, got {value!r}")
        return value
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"expected an integer, got {value!r}")
        return _convert(action, str(value))
    if action.type is argtypes.seconds:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"expected a number of seconds, got {value!r}")
        return _convert(action, str(value))
    if action.type is argtypes.cert_reqs and isinstance(value, int) and not isinstance(value, bool):
        return _convert(action, str(value))
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {value!r}")
    return _convert(action, value)


def _from_text(action: argparse.Action, text: str) -> Any:
    if _repeats(action):
        sep = "\n" if action.dest == "headers" else ","
        return [_convert(action, item.strip()) for item in text.split(sep) if item.strip()]
    if _is_flag(action):
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise _Bad(f"expected true or false, got {text!r}")
    return _convert(action, text)


def _convert(action: argparse.Action, text: str) -> Any:
    """`text` through the flag's own type and choices, as argparse would take it."""
    value: Any = text
    if action.type is not None:
        try:
            value = action.type(text)
        except argparse.ArgumentTypeError as exc:
            raise _Bad(str(exc)) from None
    if action.choices is not None and value not in action.choices:
        raise _Bad(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    return value
