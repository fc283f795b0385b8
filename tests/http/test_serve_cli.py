"""`ringloop serve`'s command line: flags into `Config`, one-line errors with the documented
exit statuses, `--help`, `--version`, `--env-file` and the environment variables uvicorn
honours, the console script.

Parsing is tested in this process (`main(argv)`); what needs a server runs one.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ringloop.server import Config, cli
from serve_helpers import HERE, PYTHON, free_port, get

pytestmark = pytest.mark.timeout(60)

REPO = HERE.parent.parent
GROUPS = (
    "app",
    "socket",
    "HTTP",
    "limits and timeouts",
    "TLS",
    "logging",
    "watch and metrics",
    "workers",
    "development",
    "WebSocket",
    "static files (served before the application)",
)


def parse(*argv: str) -> Config:
    args = cli.build_parser().parse_args(["serve", "serve_apps:app", *argv])
    return cli.config_from_args(args)


def run_cli(*argv: str, env: dict | None = None, cwd: Path = HERE, timeout: float = 30):
    return subprocess.run(
        [PYTHON, "-m", "ringloop", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


# -- flags into Config ----------------------------------------------------------------------------


def test_defaults_are_configs_and_uvicorns(monkeypatch):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    config = parse()
    assert config == Config(app="serve_apps:app")
    # uvicorn's defaults, where uvicorn has the setting.
    assert (config.host, config.port, config.backlog) == ("127.0.0.1", 8000, 2048)
    assert (config.timeout_keep_alive, config.lifespan, config.interface) == (5, "auto", "auto")
    assert (config.proxy_headers, config.server_header, config.date_header) == (True,) * 3
    assert (config.ws_max_size, config.ws_ping_interval, config.reload_delay) == (
        16 * 1024 * 1024,
        20.0,
        0.25,
    )


def test_every_flag_reaches_config(monkeypatch):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    config = parse(
        *("--host", "::1", "--port", "0", "--backlog", "7"),
        *("--interface", "asgi", "--factory", "--lifespan", "on", "--root-path", "/api"),
        *("--app-dir", "/srv", "--workers", "3", "--loop-backend", "epoll"),
        *("--wsgi-threads", "4", "--no-proxy-headers", "--forwarded-allow-ips", "10.0.0.0/8,*"),
        *("--limit-concurrency", "11", "--limit-max-requests", "12"),
        *("--limit-max-requests-jitter", "13", "--limit-max-rss", "300"),
        *("--limit-request-line", "100", "--limit-request-headers", "20"),
        *("--limit-request-header-size", "2000", "--limit-request-body", "3000"),
        *("--timeout-keep-alive", "1.5", "--timeout-request-head", "2"),
        *("--timeout-request-body", "3", "--timeout-graceful-shutdown", "4"),
        *("--timeout-worker-healthcheck", "6"),
        *("--ssl-cert-reqs", "required", "--ssl-ciphers", "ECDHE"),
        *("--no-server-header", "--no-date-header"),
        *("--header", "x-a: 1", "--header", "x-b:two:parts"),
        *("--log-level", "debug", "--no-access-log", "--access-log-format", "%(status_code)d"),
        *("--use-colors", "--reload", "--reload-dir", "a", "--reload-dir", "b"),
        *("--reload-include", "*.toml", "--reload-exclude", "tmp*", "--reload-delay", "0.5"),
        *("--ws", "off", "--ws-max-size", "99", "--ws-ping-interval", "7"),
        *("--ws-ping-timeout", "8", "--ws-per-message-deflate", "false"),
        *("--watch-threshold", "0.05", "--metrics-port", "9100", "--metrics-host", "0.0.0.0"),
    )
    expected = {
        "host": "::1",
        "port": 0,
        "backlog": 7,
        "interface": "asgi",
        "factory": True,
        "lifespan": "on",
        "root_path": "/api",
        "app_dir": "/srv",
        "workers": 3,
        "loop_backend": "epoll",
        "wsgi_threads": 4,
        "proxy_headers": False,
        "forwarded_allow_ips": "10.0.0.0/8,*",
        "limit_concurrency": 11,
        "limit_max_requests": 12,
        "limit_max_requests_jitter": 13,
        "limit_max_rss": 300,
        "limit_request_line": 100,
        "limit_request_headers": 20,
        "limit_request_header_size": 2000,
        "limit_request_body": 3000,
        "timeout_keep_alive": 1.5,
        "timeout_request_head": 2.0,
        "timeout_request_body": 3.0,
        "timeout_graceful_shutdown": 4.0,
        "timeout_worker_healthcheck": 6.0,
        "ssl_cert_reqs": 2,
        "ssl_ciphers": "ECDHE",
        "server_header": False,
        "date_header": False,
        "headers": [("x-a", "1"), ("x-b", "two:parts")],
        "log_level": "debug",
        "access_log": False,
        "access_log_format": "%(status_code)d",
        "use_colors": True,
        "reload": True,
        "reload_dirs": ["a", "b"],
        "reload_includes": ["*.toml"],
        "reload_excludes": ["tmp*"],
        "reload_delay": 0.5,
        "ws": "off",
        "ws_max_size": 99,
        "ws_ping_interval": 7.0,
        "ws_ping_timeout": 8.0,
        "ws_per_message_deflate": False,
        "watch_threshold": 0.05,
        "metrics_port": 9100,
        "metrics_host": "0.0.0.0",
    }
    assert {name: getattr(config, name) for name in expected} == expected


def test_watch_threshold_alone_is_the_documented_default():
    assert parse("--watch-threshold").watch_threshold == cli.WATCH_THRESHOLD == 0.05
    assert parse().watch_threshold is None  # off unless asked for


def test_web_concurrency_stands_in_for_workers(monkeypatch):
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    assert parse().workers == 3
    assert parse("--workers", "2").workers == 2  # the flag wins


# -- errors: one line, the right exit status ------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--port", "http"], "--port: expected an integer, got 'http'"),
        (["--port", "70000"], "--port: 70000 is not a TCP port (0-65535)"),
        (["--workers", "0"], "--workers: must be > 0, got 0"),
        (["--interface", "cgi"], "--interface: invalid choice: 'cgi'"),
        (["--timeout-keep-alive", "soon"], "--timeout-keep-alive: expected a number of seconds"),
        (["--header", "no-colon"], "--header: expected NAME:VALUE, got 'no-colon'"),
        (["--ws-per-message-deflate", "maybe"], "--ws-per-message-deflate: expected true or"),
        (["--limit-request-headers", "1000"], "--limit-request-headers: at most 256"),
        (["--uds", "/tmp/x.sock", "--fd", "3"], "--uds and --fd: give one of them"),
        (["--ssl-keyfile", "k.pem"], "--ssl-keyfile and --ssl-certfile: TLS needs both"),
        (["--forwarded-allow-ips", "10.0.0.0/33"], "--forwarded-allow-ips: '10.0.0.0/33'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--env-file", "/nonexistent/.env"], "--env-file: /nonexistent/.env: no such file"),
        (["--watch-threshold", "-1"], "--watch-threshold: must be >= 0, got -1"),
        (["--watch-threshold", "0"], "--watch-threshold: must be > 0 seconds, got 0.0"),
        (["--watch-threshold", "soon"], "--watch-threshold: expected a number of seconds"),
        (["--metrics-port", "abc"], "--metrics-port: expected an integer, got 'abc'"),
        (["--metrics-port", "70000"], "--metrics-port: 70000 is not a TCP port (0-65535)"),
        (
            ["--metrics-port", "65535", "--workers", "2"],
            "--metrics-port: 65535 + 2 workers runs past 65535",
        ),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(argv, line, capsys):
    try:
        status = cli.main(["serve", "serve_apps:app", *argv])
    except SystemExit as exc:  # argparse's own checks exit; Config's return
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"ringloop serve: error: {line}"), err
    assert "Traceback" not in err


def test_bad_flag_from_the_shell_has_no_traceback():
    done = run_cli("serve", "serve_apps:app", "--port", "-1")
    assert done.returncode == 2
    assert done.stderr == "ringloop serve: error: --port: -1 is not a TCP port (0-65535)\n"
    assert done.stdout == ""


def test_tls_files_that_do_not_load_are_a_flag_error(tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("not a key")
    done = run_cli("serve", "serve_apps:app", "--ssl-keyfile", str(key), "--ssl-certfile", str(key))
    assert done.returncode == 2
    # One line naming the flag, the file and the problem (src/tls/keys.rs).
    assert done.stderr.startswith(f"ringloop serve: error: --ssl-certfile {key}: no certificate")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ("no_such_module_here:app", 'Could not import module "no_such_module_here".'),
        ("serve_apps:no_such_app", 'Attribute "no_such_app" not found in module "serve_apps".'),
        ("serve_apps", 'must be in format "<module>:<attribute>"'),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_app_that_cannot_be_imported_is_one_line_and_exit_1(app, message, workers):
    done = run_cli("serve", app, "--port", str(free_port()), "--workers", workers)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    if workers == "1":
        assert done.stderr.count("\n") == 1, done.stderr


def test_ws_on_for_an_app_without_websocket_is_exit_1_in_one_line():
    done = run_cli("serve", "serve_apps:wsgi_pid", "--port", str(free_port()), "--ws", "on")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "--ws on: a wsgi application has no WebSocket side" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_lifespan_startup_failure_exits_3(workers):
    done = run_cli(
        "serve", "serve_apps:failing_startup", "--port", str(free_port()), "--workers", workers
    )
    assert done.returncode == 3, done.stderr
    assert "the database is not there" in done.stderr
    assert "Traceback" not in done.stderr


def test_busy_port_is_exit_1_in_one_line():
    with __import__("socket").socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            done = run_cli("serve", "serve_apps:app", "--port", str(port), "--workers", workers)
            assert done.returncode == 1, done.stderr
            assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
            assert "Traceback" not in done.stderr


# -- help, version, entry points ------------------------------------------------------------------


def test_help_lists_every_group_and_flag():
    done = run_cli("serve", "--help")
    assert done.returncode == 0
    text = done.stdout
    for group in GROUPS:
        assert f"\n{group}:\n" in text, group
    parser = cli.build_parser()._subparsers._group_actions[0].choices["serve"]
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in text, flag
    # Each group holds what its name says.
    sections = {}
    for group, following in zip(GROUPS, (*GROUPS[1:], None), strict=True):
        start = text.index(f"\n{group}:\n")
        sections[group] = text[start : text.index(f"\n{following}:\n") if following else None]
    for group, flag in [
        ("app", "--factory"),
        ("socket", "--uds"),
        ("HTTP", "--proxy-headers"),
        ("limits and timeouts", "--limit-max-rss"),
        ("TLS", "--ssl-keyfile"),
        ("logging", "--access-log-format"),
        ("watch and metrics", "--metrics-host"),
        ("workers", "--workers"),
        ("development", "--reload-dir"),
        ("WebSocket", "--ws-max-size"),
    ]:
        assert f"\n  {flag}" in sections[group], (group, flag)


def test_version():
    from ringloop import __version__

    for argv in (["--version"], ["serve", "--version"]):
        done = run_cli(*argv)
        assert done.returncode == 0
        assert done.stdout.startswith(f"ringloop {__version__} with CPython"), done.stdout


def test_console_script_is_declared_and_resolves():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["ringloop"].partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is cli.main
    # Once the package is (re)installed the script exists beside the interpreter.
    script = Path(sys.executable).parent / "ringloop"
    if script.exists():
        done = subprocess.run([str(script), "--version"], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.startswith("ringloop ")


def test_no_command_prints_help_and_exits_2():
    done = run_cli()
    assert done.returncode == 2
    assert "serve" in done.stderr


# -- environment ----------------------------------------------------------------------------------


def test_env_file_is_loaded_before_the_app_and_sets_web_concurrency(serve, tmp_path):
    env_file = tmp_path / "test.env"
    env_file.write_text("GREETING=hello from the env file\nWEB_CONCURRENCY=2\nSET_OUTSIDE=file\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "WEB_CONCURRENCY"}
    env["SET_OUTSIDE"] = "environment"
    server = serve("serve_apps:app", "--port", str(port), "--env-file", str(env_file), env=env)
    server.wait_serving(2)
    assert len(server.children()) == 2  # WEB_CONCURRENCY=2 from the file: a supervisor
    assert get(port, "/env?name=GREETING") == (200, "hello from the env file")
    # Variables already in the environment win over the file, as with uvicorn.
    assert get(port, "/env?name=SET_OUTSIDE") == (200, "environment")


def test_header_flag_is_sent_with_every_response(serve):
    port = free_port()
    server = serve("serve_apps:app", "--port", str(port), "--header", "x-deployment: blue")
    server.wait_serving(1)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        assert response.getheader("x-deployment") == "blue"
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("allowed", "client"),
    [
        (None, "203.0.113.7"),
        ("192.0.2.1", "127.0.0.1"),
        ("*", "203.0.113.7"),
    ],
)
def test_forwarded_allow_ips_from_the_environment(serve, allowed, client):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "FORWARDED_ALLOW_IPS"}
    if allowed is not None:
        env["FORWARDED_ALLOW_IPS"] = allowed
    server = serve("serve_apps:app", "--port", str(port), env=env)
    server.wait_serving(1)
    # Trusted by default (127.0.0.1, as uvicorn), not when the variable names someone else.
    status, body = get(port, "/client", headers={"X-Forwarded-For": "203.0.113.7"})
    assert (status, body) == (200, client)
