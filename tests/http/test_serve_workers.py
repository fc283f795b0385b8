"""`ringloop serve --workers N`: the supervisor and its workers, as real processes on
loopback, under real clients (http.client, raw sockets, wrk).

The load tests count precisely. `serve_apps.app` counts the requests it started and
finished in every worker (written at each worker's lifespan shutdown, replaced workers
included), and wrk stops sending a little before its run ends, so nothing is in flight when
it stops counting. "No started request lost" is then an equality: what the workers started
== what they finished == the responses wrk received. wrk's socket errors are requests the
server never started:

* wrk never counts a refused connection as a connect error: its plain-HTTP connect always
  "succeeds" (non-blocking), and the ECONNREFUSED comes out of the first read or write. So
  "no connection refused" across SIGHUP is checked by a prober of our own that connects in
  a loop, and after SIGTERM wrk's read and write errors are mostly refused reconnects;
* across SIGHUP and recycling, wrk sees no error at all, looping keep-alive requests or
  with a new connection per request: a stopping worker answers each connection's next
  request with `connection: close`, closes an idle one only once it has been idle for
  `--timeout-drain-idle` (the tests give 10 s, so no scheduling stall of a loaded machine
  can make wrk late for it), and serves the connections its io_uring accept had already
  taken off the listener it hands over (see `Server._shutdown`), including those accepted
  just before its listener closed and set up just after (asyncio's `Server._attach` would
  refuse them: see `_counted_accept` in python/ringloop/_streams.py).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import ringloop
import serve_apps
from serve_helpers import (
    HOST,
    alive,
    app_counts,
    finish_wrk,
    free_port,
    get,
    pids_answering,
    start_wrk,
    wait_until,
    wrk_report,
)

pytestmark = pytest.mark.timeout(60)

CONNECTIONS = 32
# A wrk run that only a test's SIGINT ends (seconds; pytest's timeout ends the test first).
WRK_FOREVER = 300


def wait_for_load(counts: Path, pids) -> int:
    """Wait until one of `pids` has started `serve_apps.UNDER_LOAD` requests (it says so with
    a `<pid>.busy` file in `counts`): the load is flowing through the workers. Counted in
    requests, not CPU time, so a faster machine does not need a longer wait."""
    return wait_until(
        lambda: next((p for p in pids if (counts / f"{p}.busy").exists()), None),
        30,
        "the load to reach the workers",
    )


def client_connections(port: int) -> int:
    """TCP connections to `port` on 127.0.0.1 that a client still holds open: established,
    or closed by the server and not yet read to their end by the client (CLOSE_WAIT).
    When it is 0 after the server exited, the client has read every response it was sent
    (data comes before the FIN)."""
    open_states = {"01", "08"}  # TCP_ESTABLISHED, TCP_CLOSE_WAIT
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if int(remote.rpartition(":")[2], 16) == port and state in open_states:
            n += 1
    return n


class ConnectProber:
    """Connects to `port` in a loop on a thread of its own, counting refusals."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connected = self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                socket.create_connection((HOST, self.port), timeout=5).close()
                self.connected += 1
            except ConnectionRefusedError:
                self.refused += 1

    def __enter__(self) -> ConnectProber:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def wrk_runs():
    """wrk processes started by a test; killed at teardown if still running."""
    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def counting_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    where = tmp_path / "counts"
    where.mkdir()
    return {**os.environ, "SERVE_TEST_COUNTS": str(where)}, where


# -- serving ----------------------------------------------------------------------------------------


def test_two_workers_both_answer_and_stop_on_sigterm(serve, tmp_path):
    port = free_port()
    env, counts = counting_env(tmp_path)
    server = serve("serve_apps:app", "--port", str(port), "--workers", "2", env=env)
    workers = set(server.wait_serving(2))
    assert workers == server.children()
    assert pids_answering(port, 2) == workers
    log = server.log()
    assert f"Started parent process [{server.pid}]" in log
    for pid in workers:
        assert f"Started server process [{pid}]" in log
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert f"Stopping parent process [{server.pid}]" in server.log()
    assert set(app_counts(counts)) == workers  # each ran its lifespan shutdown
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, port), timeout=2).close()


def test_sigterm_lets_a_started_request_finish(serve, tmp_path):
    port = free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--workers", "2", "--timeout-keep-alive", "30"),
        *("--timeout-drain-idle", "0"),
    )
    server.wait_serving(2)
    # An idle keep-alive connection is closed at once (no drain grace), not waited for.
    idle = socket.create_connection((HOST, port), timeout=10)
    idle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200")
    mark, release = tmp_path / "in-the-app", tmp_path / "release"
    result = {}

    def slow() -> None:
        result["response"] = get(port, f"/sleep?until={release}&mark={mark}", timeout=20)

    client = threading.Thread(target=slow)
    client.start()
    try:
        wait_until(mark.exists, 10, "the slow request to reach the application")
        server.send(signal.SIGTERM)
        # Closed while the slow request is still in flight: the application holds it until
        # `release` exists, which happens only after the close was seen.
        assert idle.recv(4096) == b""
        assert "response" not in result
    finally:
        release.touch()
        client.join(20)
        idle.close()
    status, body = result["response"]
    assert status == 200 and int(body) in server.serving_pids()
    assert server.wait_exit() == 0


def test_a_connection_used_within_the_drain_grace_gets_its_next_request_answered(serve):
    """SIGTERM with a keep-alive connection just used: instead of a close that would race
    with the client's next request, that request is answered, with `connection: close`, and
    then the connection closes; one idle for longer than the grace is closed at once."""
    port = free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--timeout-keep-alive", "60", "--timeout-drain-idle", "30"),
    )
    server.wait_serving(1)
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    conn = socket.create_connection((HOST, port), timeout=20)
    conn.sendall(request)
    assert conn.recv(4096).startswith(b"HTTP/1.1 200")
    server.send(signal.SIGTERM)
    wait_until(lambda: "Shutting down" in server.log(), 10, "the server to begin its shutdown")
    conn.sendall(request)
    reply = b""
    while chunk := conn.recv(4096):
        reply += chunk
    head = reply.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 200") and b"connection: close" in head, reply
    conn.close()
    assert server.wait_exit() == 0


def test_kill_9_of_a_worker_under_load(serve):
    port = free_port()
    server = serve("serve_apps:app", "--port", str(port), "--workers", "2", "--no-access-log")
    first = set(server.wait_serving(2))
    results: list[tuple[float, int | None]] = []  # (when, pid) or (when, None) on an error
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                status, body = get(port, timeout=10)
                results.append((time.monotonic(), int(body) if status == 200 else None))
            except OSError:
                results.append((time.monotonic(), None))

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: {p for _, p in results} >= first, 10, "both workers under load")
        victim, survivor = sorted(first)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: {p for _, p in results} - first - {None}, 15, "a restarted worker answering"
        )
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    after = [p for when, p in results if when > killed_at]
    assert after.count(survivor) > 0  # the other worker kept serving
    # Only the requests in flight on the killed worker fail: at most one per client thread.
    failures = [p for p in after if p is None]
    assert len(failures) <= len(threads), failures
    assert f"Worker [{victim}] died (killed by SIGKILL): restarting it in" in server.log()
    wait_until(lambda: len(server.children()) == 2, 10, "two workers again")
    assert victim not in server.children()


# -- across restarts, under wrk -------------------------------------------------------------------


LOAD_CONNECTIONS = 64
# Longer than any stall of a loaded machine between two of wrk's requests (see the docs).
DRAIN = ("--timeout-drain-idle", "10")
# wrk counts a response slower than this (its default: 2 s) as a timeout error: on a loaded
# two-core machine a fork and an import next to 64 busy connections can take longer, and a
# slow answer is not a lost one (the counts below say whether any was lost).
SLOW = 20


def skip_without(backend: str) -> None:
    if backend == "io_uring" and not ringloop.io_uring_available()[0]:
        pytest.skip("the kernel refuses io_uring")


def two_workers_under_wrk(serve, tmp_path, wrk_runs, backend, *flags: str, close: bool = False):
    """Two counting workers with `flags` on `backend`, and wrk's 64 connections on them:
    (server, counts, the workers' pids, wrk, port)."""
    skip_without(backend)
    port = free_port()
    env, counts = counting_env(tmp_path)
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--workers", "2", "--no-access-log", *DRAIN, *flags),
        *("--loop-backend", backend),
        env=env,
    )
    pids = set(server.wait_serving(2))
    wrk = start_wrk(
        f"http://{HOST}:{port}/",
        tmp_path,
        connections=LOAD_CONNECTIONS,
        # Runs until finish_wrk stops it (an event, not a clock): 300 s is a hang guard.
        duration=300,
        stop_after=None,
        close=close,
        timeout=SLOW,
    )
    wrk_runs.append(wrk)
    return server, counts, pids, wrk, port


@pytest.mark.parametrize("backend", ["epoll", "io_uring"])
@pytest.mark.parametrize("mode", ["keep-alive", "close"])
def test_sighup_rolling_restart_under_wrk_fails_no_request(
    serve, tmp_path, wrk_runs, mode, backend
):
    server, counts, old, wrk, port = two_workers_under_wrk(
        serve, tmp_path, wrk_runs, backend, close=mode == "close"
    )
    wait_for_load(counts, old)
    with ConnectProber(port) as prober:
        server.send(signal.SIGHUP)
        wait_until(lambda: not any(alive(p) for p in old), 30, "the old workers to be replaced")
    assert prober.connected > 0 and prober.refused == 0, vars(prober)
    new = server.children()
    assert len(new) == 2 and not new & old
    report = finish_wrk(wrk, tmp_path)
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    served = app_counts(counts)
    assert set(served) == old | new
    started_n = sum(c["started"] for c in served.values())
    finished_n = sum(c["finished"] for c in served.values())
    summary = f"{report['text']}\nworkers: {served}"
    assert started_n == finished_n == report["requests"], summary
    assert all(served[p]["finished"] > 0 for p in new), summary  # the new ones took over
    assert all(served[p]["finished"] > 0 for p in old), summary
    assert report["non_2xx"] == 0, summary
    assert report["connect"] == report["read"] == report["write"] == report["timeout"] == 0, summary


def test_sigterm_under_wrk_loses_no_started_request(serve, tmp_path, wrk_runs):
    """SIGTERM while wrk keeps every connection busy with a 50 ms request: every request a
    worker started is answered and counted by wrk. Each step waits for an event, none for a
    time: the load is flowing (a worker started UNDER_LOAD requests), the server exited, wrk
    read everything the server sent (no connection of its left open); wrk's own run is far
    longer than all that, and is then stopped with SIGINT (it reports what it counted)."""
    port = free_port()
    env, counts = counting_env(tmp_path)
    server = serve(
        "serve_apps:app", "--port", str(port), "--workers", "2", "--no-access-log", env=env
    )
    workers = set(server.wait_serving(2))
    # Requests that take 50 ms: at the signal, about CONNECTIONS of them are in the app.
    wrk = start_wrk(
        f"http://{HOST}:{port}/sleep?s=0.05",
        tmp_path,
        connections=CONNECTIONS,
        duration=WRK_FOREVER,
        stop_after=WRK_FOREVER,
        close=False,
    )
    wrk_runs.append(wrk)
    wait_for_load(counts, workers)
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert wrk.poll() is None, "wrk ended before the server stopped"
    wait_until(lambda: client_connections(port) == 0, 20, "wrk to read every response")
    wrk.send_signal(signal.SIGINT)
    report = wrk_report(wrk)
    served = app_counts(counts)
    assert set(served) == workers
    summary = f"{report['text']}\nworkers: {served}"
    started_n = sum(c["started"] for c in served.values())
    finished_n = sum(c["finished"] for c in served.values())
    assert started_n >= serve_apps.UNDER_LOAD, summary
    assert started_n == finished_n == report["requests"], summary
    assert report["timeout"] == 0 and report["non_2xx"] == 0, summary
    # wrk went on past the shutdown, refused (reported as read and write errors).
    assert report["read"] + report["write"] > 0, summary


# -- recycling ------------------------------------------------------------------------------------


RECYCLED = "stopped by itself (--limit-max-requests): starting a new one"


@pytest.mark.parametrize("backend", ["epoll", "io_uring"])
def test_limit_max_requests_recycles_workers(serve, backend):
    """A worker that served its requests stops itself and the supervisor starts another on
    the same listener, so a client never finds the port closed, and no request is lost: on
    io_uring the connections the stopping worker's multishot accept took before its cancel
    reached the kernel are served by it (see `_on_accepted` in python/ringloop/_streams.py)."""
    skip_without(backend)
    port = free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--workers", "2", "--limit-max-requests", "5"),
        *("--loop-backend", backend),
    )
    first = set(server.wait_serving(2))
    answered, resets = [], []
    for _ in range(40):
        try:
            status, body = get(port)
        except ConnectionResetError as exc:  # http.client's RemoteDisconnected is one
            resets.append(exc)
            continue
        assert status == 200
        answered.append(int(body))
    # A worker stops accepting once it has served its 5, but a connection the kernel had
    # already given it (the next one of this client, sent the moment the 5th answer came, may
    # reach the still-armed accept before the stop does) is served, not reset (as uvicorn
    # serves what it accepted before its limit): so 5, or 6 with this one-at-a-time client.
    counts = {pid: answered.count(pid) for pid in set(answered)}
    assert all(n <= 6 for n in counts.values()), counts
    assert len(counts) >= len(answered) // 6, counts
    # Every worker that served its 5 stops, and the supervisor says so once it reaped it
    # (which may come a moment after the last answer).
    full = sum(1 for n in counts.values() if n >= 5)
    assert full >= 5
    recycled = wait_until(
        lambda: (n := server.log().count(RECYCLED)) >= full and n, 10, f"{full} recycled workers"
    )
    assert recycled and resets == []
    wait_until(lambda: len(server.children()) == 2, 10, "two workers")
    assert not server.children() & first


def replaced_under_wrk(serve, tmp_path, wrk_runs, backend, *flags: str) -> str:
    """Two workers run with `flags` under 64 keep-alive connections until both first
    workers are gone; asserts that wrk saw no error and no request was lost; the log."""
    server, counts, first, wrk, _ = two_workers_under_wrk(
        serve, tmp_path, wrk_runs, backend, *flags
    )
    wait_until(lambda: not any(alive(p) for p in first), 30, "both first workers replaced")
    report = finish_wrk(wrk, tmp_path)
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    served = app_counts(counts)
    summary = f"{report['text']}\nworkers: {served}"
    assert sum(c["finished"] for c in served.values()) == report["requests"], summary
    assert report["timeout"] == report["non_2xx"] == 0, summary
    assert report["connect"] == report["read"] == report["write"] == 0, summary
    return server.log()


@pytest.mark.parametrize("backend", ["epoll", "io_uring"])
def test_limit_max_requests_under_wrk_fails_no_request(serve, tmp_path, wrk_runs, backend):
    """Recycling under 64 keep-alive connections: each worker that reaches its limit tells
    the supervisor, which starts its successor at once, and drains; wrk sees no error."""
    log = replaced_under_wrk(serve, tmp_path, wrk_runs, backend, "--limit-max-requests", "3000")
    assert log.count(RECYCLED) >= 2


def test_limit_max_rss_replaces_a_worker(serve):
    port = free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--workers", "2", "--limit-max-rss", "60"),
    )
    server.wait_serving(2)
    status, body = get(port, "/grow?mib=80")
    assert status == 200
    grown = int(body)
    server.wait_log(rf"Worker \[{grown}\] uses \d+ MiB, over --limit-max-rss 60 MiB")
    wait_until(lambda: not alive(grown), 15, "the grown worker to be replaced")
    # Its replacement was ready before it was told to stop.
    match = server.wait_log(rf"Worker \[(\d+)\] is ready: stopping worker \[{grown}\]")
    assert int(match.group(1)) in server.children()
    wait_until(lambda: len(server.children()) == 2, 10, "two workers")
    assert pids_answering(port, 2) == server.children()


@pytest.mark.parametrize("backend", ["epoll", "io_uring"])
def test_limit_max_rss_under_wrk_fails_no_request(serve, tmp_path, wrk_runs, backend):
    """A limit every worker is over: each is replaced as soon as it is ready, one after the
    other, under 64 keep-alive connections; wrk sees no error."""
    log = replaced_under_wrk(serve, tmp_path, wrk_runs, backend, "--limit-max-rss", "1")
    assert log.count("over --limit-max-rss 1 MiB: replacing it") >= 2


def test_a_blocked_worker_fails_the_health_check(serve):
    port = free_port()
    server = serve(
        "serve_apps:app",
        *("--port", str(port), "--workers", "2", "--timeout-worker-healthcheck", "1"),
    )
    workers = set(server.wait_serving(2))
    blocked: dict[str, object] = {}

    def block() -> None:
        try:
            blocked["response"] = get(port, "/block?s=10", timeout=15)
        except OSError as exc:
            blocked["error"] = exc

    client = threading.Thread(target=block, daemon=True)
    client.start()
    match = server.wait_log(r"Worker \[(\d+)\] did not answer the health check within 1s")
    victim = int(match.group(1))
    assert victim in workers
    client.join(15)
    assert "error" in blocked  # its connection died with it
    wait_until(lambda: not alive(victim), 10, "the blocked worker to be killed")
    wait_until(lambda: len(server.children()) == 2, 10, "a replacement")


def test_sigttin_and_sigttou_change_the_number_of_workers(serve):
    port = free_port()
    server = serve("serve_apps:app", "--port", str(port), "--workers", "2")
    server.wait_serving(2)
    server.send(signal.SIGTTIN)
    server.wait_log("Received SIGTTIN: 3 workers.")
    server.wait_serving(3)
    assert len(pids_answering(port, 3)) == 3
    server.send(signal.SIGTTOU)
    server.wait_log("Received SIGTTOU: 2 workers.")
    wait_until(lambda: len(server.children()) == 2, 10, "two workers")


# -- other listeners ------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_uds(serve, tmp_path, workers):
    path = str(tmp_path / "server.sock")
    server = serve("serve_apps:app", "--uds", path, "--workers", str(workers))
    pids = set(server.wait_serving(workers))
    for _ in range(10):
        status, body = get(uds=path)
        assert status == 200 and int(body) in pids
    assert f"unix socket {path}" in server.log()
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    # Whoever bound it (the supervisor, or the one server process) removes it.
    assert not os.path.exists(path)


def serve_fd(serve, workers: int, *args: str):
    """A server on a listening socket this process made and handed down (`--fd`)."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(100)
        fd = listener.fileno()
        server = serve(
            "serve_apps:app", "--fd", str(fd), "--workers", str(workers), *args, pass_fds=[fd]
        )
        # Ours closes here: only the server's inherited copies listen on.
        return server, listener.getsockname()[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_fd_of_an_inherited_socket(serve, workers):
    server, port = serve_fd(serve, workers)
    pids = set(server.wait_serving(workers))
    for _ in range(10):
        status, body = get(port)
        assert status == 200 and int(body) in pids
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0


@pytest.mark.parametrize(
    "backend",
    ["epoll", "io_uring"],
)
def test_a_shared_listener_spreads_connections_over_the_workers(serve, tmp_path, wrk_runs, backend):
    """--fd/--uds: all workers accept from the one inherited listener (no SO_REUSEPORT for
    an inherited socket or a Unix one). Under load each must get some of the connections."""
    if backend == "io_uring" and not ringloop.io_uring_available()[0]:
        pytest.skip("the kernel refuses io_uring")
    env, counts = counting_env(tmp_path)
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(100)
        fd = listener.fileno()
        server = serve(
            "serve_apps:app",
            *("--fd", str(fd), "--workers", "2", "--no-access-log", "--loop-backend", backend),
            pass_fds=[fd],
            env=env,
        )
        port = listener.getsockname()[1]
    workers = set(server.wait_serving(2))
    wrk = start_wrk(
        f"http://{HOST}:{port}/",
        tmp_path,
        connections=8,
        duration=2,
        stop_after=2,
        close=True,
    )
    wrk_runs.append(wrk)
    report = wrk_report(wrk)
    server.send(signal.SIGTERM)
    assert server.wait_exit() == 0
    served = {pid: c["finished"] for pid, c in app_counts(counts).items()}
    assert set(served) == workers
    assert min(served.values()) > 0, f"{served}\n{report['text']}"
