"""`ringloop serve --config FILE` and `RINGLOOP_*` variables: the flags' names, the order of
precedence (default < file < environment < flag), and one clear line for each mistake.

Precedence is read off the `Config` the command line builds (`cli.layered_config`); the
errors come from the real command (`python -m ringloop serve`), exit status 2 and one line on
stderr, never a traceback; one server is started from a file alone and answers.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from ringloop.server import cli
from serve_helpers import HERE, free_port, get
from test_serve_cli import run_cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("RINGLOOP_") and name not in ("RINGLOOP_BACKEND", "RINGLOOP_REQUIRE"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    return monkeypatch


def layered(*words: str):
    argv = ["serve", *words]
    args = cli.build_parser().parse_args(argv)
    return cli.layered_config(args, list(words))


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ringloop.toml"
    path.write_text(text)
    return str(path)


def test_the_file_sets_what_the_flags_set(tmp_path, clean_env):
    path = write(
        tmp_path,
        'app = "serve_apps:app"\n'
        "port = 8123\n"
        "timeout-keep-alive = 7.5\n"
        "timeout-drain-idle = 3\n"
        "access-log = false\n"
        'header = ["x-team: web", "x-zone: a"]\n'
        'loop-backend = "epoll"\n'
        "watch-threshold = 0.2\n"
        "ssl-cert-reqs = 0\n",
    )
    config = layered("--config", path)
    assert config.app == "serve_apps:app"
    assert config.port == 8123
    assert config.timeout_keep_alive == 7.5
    assert config.timeout_drain_idle == 3.0
    assert config.access_log is False
    assert config.headers == [("x-team", "web"), ("x-zone", "a")]
    assert config.loop_backend == "epoll"
    assert config.watch_threshold == 0.2


def test_environment_over_file_and_flags_over_both(tmp_path, clean_env):
    path = write(tmp_path, 'app = "serve_apps:app"\nport = 8001\nbacklog = 10\nhost = "::1"\n')
    clean_env.setenv("RINGLOOP_PORT", "8002")
    clean_env.setenv("RINGLOOP_BACKLOG", "20")
    clean_env.setenv("RINGLOOP_ACCESS_LOG", "false")
    config = layered("--config", path, "--port", "8003")
    assert config.port == 8003  # flag > environment > file
    assert config.backlog == 20  # environment > file
    assert config.host == "::1"  # the file, nothing above it
    assert config.access_log is False
    # A flag given at its default value still wins (it was given).
    config = layered("--config", path, "--backlog", "2048")
    assert config.backlog == 2048
    # The positional APP over the file's app.
    assert layered("other:app", "--config", path).app == "other:app"


def test_the_environment_alone(clean_env):
    clean_env.setenv("RINGLOOP_WORKERS", "3")
    clean_env.setenv("RINGLOOP_HEADER", "x-a: 1\nx-b: 2, and more")
    clean_env.setenv("RINGLOOP_RELOAD_DIR", "src, lib")
    config = layered("serve_apps:app")
    assert config.workers == 3
    assert config.headers == [("x-a", "1"), ("x-b", "2, and more")]
    assert config.reload_dirs == ["src", "lib"]


def test_variables_that_name_no_flag_are_left_alone(clean_env):
    clean_env.setenv("RINGLOOP_THREAD_BOUND", "1")  # the loop's, not a flag
    assert layered("serve_apps:app").port == 8000


BAD_FILES = [
    ("prot = 8000\n", "ringloop.toml: unknown key 'prot' (did you mean 'port'?)"),
    ("port_number = 1\n", "ringloop.toml: unknown key 'port_number'"),
    ('port = "8000"\n', "ringloop.toml: port: expected an integer, got '8000'"),
    ("port = true\n", "ringloop.toml: port: expected an integer, got True"),
    ("workers = 0\n", "ringloop.toml: workers: must be > 0, got 0"),
    ('timeout-keep-alive = "5s"\n', "ringloop.toml: timeout-keep-alive: expected a number of"),
    ("timeout-keep-alive = -1\n", "ringloop.toml: timeout-keep-alive: must be >= 0, got -1"),
    ('access-log = "no"\n', "ringloop.toml: access-log: expected true or false, got 'no'"),
    ('header = "x-a: 1"\n', "ringloop.toml: header: expected an array, got 'x-a: 1'"),
    ('header = ["no colon"]\n', "ringloop.toml: header: expected NAME:VALUE, got 'no colon'"),
    ('interface = "cgi"\n', "ringloop.toml: interface: 'cgi' is not one of auto, asgi"),
    ("host = 127\n", "ringloop.toml: host: expected a string, got 127"),
    ("port = \n", "ringloop.toml: not valid TOML: "),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES, ids=[m for m, _ in BAD_FILES])
def test_a_bad_file_is_one_line_naming_the_key_and_the_file(tmp_path, text, message):
    write(tmp_path, 'app = "serve_apps:app"\n' + text)
    result = run_cli("serve", "--config", "ringloop.toml", cwd=tmp_path)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"ringloop serve: error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_bad_variable_is_one_line_naming_it(tmp_path):
    env = {**os.environ, "RINGLOOP_TIMEOUT_KEEP_ALIVE": "soon"}
    result = run_cli("serve", "serve_apps:app", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "ringloop serve: error: RINGLOOP_TIMEOUT_KEEP_ALIVE: expected a number of seconds, "
        "got 'soon'\n"
    )


def test_a_missing_file_and_a_missing_app(tmp_path):
    result = run_cli("serve", "--config", "nowhere.toml", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "ringloop serve: error: --config: nowhere.toml: no such file\n",
    )
    write(tmp_path, "port = 8000\n")
    result = run_cli("serve", "--config", "ringloop.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "error: APP: give the application" in result.stderr


def test_a_server_runs_from_the_file_alone(serve, tmp_path):
    port = free_port()
    config = tmp_path / "ringloop.toml"
    config.write_text(
        f'app = "serve_apps:app"\napp-dir = "{HERE}"\nport = {port}\n'
        'header = ["x-from: the-file"]\n'
    )
    server = serve("--config", str(config))
    server.wait_serving(1)
    status, body = get(port)
    assert status == 200 and int(body) == server.pid
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
