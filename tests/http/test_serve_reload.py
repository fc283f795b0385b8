"""`ringloop serve --reload`: the server restarts, in a fresh interpreter, when a watched file
changes; which files count; a broken change does not end the reloader."""

from __future__ import annotations

import signal

import pytest
from serve_helpers import alive, free_port, get, wait_until

pytestmark = pytest.mark.timeout(60)

APP = """\
VERSION = {version!r}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({{"type": "http.response.start", "status": 200, "headers": []}})
    await send({{"type": "http.response.body", "body": VERSION.encode()}})
"""


def served_version(port: int) -> str | None:
    status, body = get(port, timeout=5)
    return body if status == 200 else None


def test_reload_serves_the_new_code(serve, tmp_path):
    source = tmp_path / "reload_app.py"
    source.write_text(APP.format(version="one"))
    port = free_port()
    server = serve(
        *("reload_app:app", "--port", str(port), "--reload", "--reload-delay", "0.05"),
        *("--reload-include", "*.toml", "--reload-exclude", "ignored_*"),
        cwd=tmp_path,
    )
    [first] = server.wait_serving(1)
    assert served_version(port) == "one"
    assert f"Will watch for changes in these directories: ['{tmp_path}']" in server.log()

    # A change to the application, with changes that do not count next to it: only the
    # application's file is named, and the new code is served by a new interpreter.
    (tmp_path / "notes.txt").write_text("not watched")
    (tmp_path / ".hidden.py").write_text("excluded by default")
    (tmp_path / "ignored_helper.py").write_text("excluded by --reload-exclude")
    source.write_text(APP.format(version="two"))
    wait_until(lambda: served_version(port) == "two", 20, "the new code to be served")
    line = server.wait_log(r"WatchFiles detected changes in (.*)\. Reloading\.\.\.")
    assert line.group(1) == "'reload_app.py'"
    second = server.serving_pids()[-1]
    assert second != first and not alive(first)

    # A broken change: the server fails to import it and the reloader waits for the next.
    source.write_text("VERSION = (\n")
    wait_until(lambda: "SyntaxError" in server.log(), 20, "the syntax error to be reported")
    assert server.proc.poll() is None
    source.write_text(APP.format(version="three"))
    wait_until(lambda: served_version(port) == "three", 20, "the fixed code to be served")
    third = server.serving_pids()[-1]

    # --reload-include: a change to a matching file alone restarts the server.
    (tmp_path / "settings.toml").write_text("x = 1")
    wait_until(lambda: server.serving_pids()[-1] != third, 20, "a restart for settings.toml")
    assert "WatchFiles detected changes in 'settings.toml'. Reloading..." in server.log()
    assert served_version(port) == "three"

    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert "Stopping reloader process" in server.log()
    # multiprocessing's resource tracker (spawn) follows its parent out.
    wait_until(lambda: not server.tree(), 10, "every process of the reloader to exit")
