"""`gunicorn -k ringloop.server.GunicornWorker`: gunicorn's settings reach `Config`, and a
real gunicorn serves with ringloop workers and stops them the way gunicorn documents (TERM
graceful, INT quick)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest
from serve_helpers import (
    PYTHON,
    app_counts,
    free_port,
    get,
    unavailable,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

try:
    import gunicorn.config
except ImportError:  # pragma: no cover - requirements-dev.txt has it
    gunicorn = None


@pytest.fixture
def gunicorn_argv(tmp_path):
    if gunicorn is None:
        unavailable("gunicorn is not installed (requirements-dev.txt)")

    def argv(port: int, *extra: str) -> list[str]:
        return [
            *(PYTHON, "-m", "gunicorn", "-k", "ringloop.server.GunicornWorker"),
            *("-b", f"127.0.0.1:{port}", *extra, "serve_apps:app"),
        ]

    return argv


def gunicorn_env(tmp_path):
    counts = tmp_path / "counts"
    counts.mkdir()
    # gunicorn 24+ opens a control socket under $XDG_RUNTIME_DIR (else in $HOME).
    env = {**os.environ, "SERVE_TEST_COUNTS": str(counts), "XDG_RUNTIME_DIR": str(tmp_path)}
    return env, counts


def test_ringloop_does_not_import_gunicorn():
    code = "import ringloop, ringloop.server, sys; print('gunicorn' in sys.modules)"
    done = __import__("subprocess").run([sys.executable, "-c", code], capture_output=True)
    assert done.stdout.strip() == b"False", done.stderr


def test_gunicorn_settings_map_onto_config(gunicorn_argv):
    from ringloop.server.gunicorn import config_from_gunicorn

    cfg = gunicorn.config.Config()
    for name, value in {
        "keepalive": 7,
        "graceful_timeout": 12,
        "backlog": 64,
        "limit_request_line": 0,
        "limit_request_fields": 1000,
        "limit_request_field_size": 32000,
        "forwarded_allow_ips": "10.0.0.1,10.0.0.2",
    }.items():
        cfg.set(name, value)
    config = config_from_gunicorn(cfg, max_requests=500, app="x:y")
    assert (config.timeout_keep_alive, config.timeout_graceful_shutdown) == (7.0, 12.0)
    assert (config.backlog, config.limit_max_requests) == (64, 500)
    assert config.limit_request_line == 1024 * 1024  # gunicorn's 0: unlimited
    assert config.limit_request_headers == 256  # ringloop's cap
    assert config.limit_request_header_size == 32000
    assert config.forwarded_allow_ips == "10.0.0.1,10.0.0.2"
    assert config_from_gunicorn(cfg, max_requests=sys.maxsize).limit_max_requests is None


def test_gunicorn_serves_and_stops_gracefully_on_term(serve, tmp_path, gunicorn_argv):
    port = free_port()
    env, counts = gunicorn_env(tmp_path)
    server = serve(argv=gunicorn_argv(port, "-w", "2", "--graceful-timeout", "10"), env=env)
    workers = set(server.wait_serving(2))
    assert workers == server.children()
    assert "Using worker: ringloop.server.GunicornWorker" in server.log()
    for _ in range(5):
        status, body = get(port)
        assert status == 200 and int(body) in workers
    mark = tmp_path / "in-the-app"
    result = {}

    def slow() -> None:
        result["response"] = get(port, f"/sleep?s=1&mark={mark}", timeout=20)

    client = threading.Thread(target=slow)
    client.start()
    try:
        wait_until(mark.exists, 10, "the slow request to reach the application")
        server.send(signal.SIGTERM)
    finally:
        client.join(20)
    assert result["response"][0] == 200  # started before TERM: finished
    assert server.wait_exit() == 0
    assert set(app_counts(counts)) == workers  # lifespan shutdown ran in each worker
    assert "Shutting down: Master" in server.log()


def test_gunicorn_int_is_quick(serve, tmp_path, gunicorn_argv):
    port = free_port()
    env, counts = gunicorn_env(tmp_path)
    server = serve(argv=gunicorn_argv(port, "-w", "1", "--graceful-timeout", "30"), env=env)
    [worker] = server.wait_serving(1)
    mark = tmp_path / "in-the-app"
    result = {}

    def slow() -> None:
        try:
            result["response"] = get(port, f"/sleep?s=20&mark={mark}", timeout=25)
        except OSError as exc:
            result["error"] = exc

    client = threading.Thread(target=slow)
    client.start()
    try:
        wait_until(mark.exists, 10, "the slow request to reach the application")
        server.send(signal.SIGINT)
        # Quick: the request in flight is closed, not waited for (20 s, graceful 30 s).
        assert server.wait_exit(timeout=10) == 0
    finally:
        client.join(25)
    assert "error" in result
    assert set(app_counts(counts)) == {worker}  # lifespan shutdown still ran
