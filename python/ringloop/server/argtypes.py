"""The value types of `ringloop serve`'s flags: argparse calls them with the flag's text and
turns their `ArgumentTypeError` into one line, `--flag: message` (see `cli`)."""

from __future__ import annotations

import argparse


def integer(minimum: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def duration(text: str) -> int:
    """Whole seconds: `3600`, or with a unit as granian takes them (`90s`, `30m`, `12h`, `1d`)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        value = int(number, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds or a duration such as 30m, 12h, 1d; got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value * unit


def boolean(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name.strip(), value.strip()


def cert_reqs(text: str) -> int:
    # uvicorn takes the number (ssl.CERT_NONE=0, CERT_OPTIONAL=1, CERT_REQUIRED=2); the names
    # are accepted too because nobody remembers the numbers.
    names = {"none": 0, "optional": 1, "required": 2}
    value = names.get(text.lower().removeprefix("cert_"))
    if value is None:
        try:
            value = int(text)
        except ValueError:
            value = -1
    if value not in (0, 1, 2):
        raise argparse.ArgumentTypeError(
            f"expected 0 (none), 1 (optional) or 2 (required), got {text!r}"
        )
    return value
