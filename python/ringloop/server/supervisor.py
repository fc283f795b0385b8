"""`--workers N`: a supervisor process that forks N workers and keeps N serving.

Each worker is a forked child that runs `server.run(config, sockets, worker=i)` on a loop of
its own, made after the fork (the supervisor never makes a loop: a loop does not survive a
fork, see the README). Where workers listen:

* TCP: one `SO_REUSEPORT` listener per worker *slot* (`bind_socket(config, reuse_port=True)`),
  bound by the supervisor and inherited by the slot's worker, so the kernel spreads new
  connections over the slots. The supervisor keeps its copy of each: when a slot's worker
  is replaced (SIGHUP, `--limit-max-rss`) the new one inherits the same listener and accepts
  from it before the old one closes its copy, and a worker that exits (`--limit-max-requests`,
  a crash) leaves the connections queued on its listener to its successor. Were each worker
  to bind its own listener, closing it would reset every connection in its accept queue (the
  kernel migrates them to the rest of the group only with `net.ipv4.tcp_migrate_req=1`,
  which is off by default): measured here, a wrk run with a new connection per request lost
  5 to 14 connections across two SIGHUP rolling restarts that way, and none with slots. The
  price: while a slot has no worker (a crashed worker waiting out its back-off), the
  connections the kernel hashes to it wait in its queue;
* `--uds`, `--fd`: the supervisor binds (or takes) the one listener and every worker inherits
  it.

What the supervisor does, in one thread, with a selector over the wake-up fd of its signal
handlers and one `control` channel per worker (no asyncio here):

* a worker that dies is restarted, at once after a long healthy run, else with an
  exponential back-off (`BACKOFF_FIRST` doubling up to `BACKOFF_MAX`), and said so in the log;
* a worker that stops by itself (it served `--limit-max-requests`, see
  `Server._max_requests_reached`) says so (`control.STOPPING`) and is replaced at once, while
  it finishes its connections (one that exits 0 without saying so, the same at its exit);
* `--limit-max-rss`: a worker whose VmRSS (`/proc/PID/status`) passes the limit is replaced:
  a new worker starts first, and the old one is told to stop once the new one accepts;
* `--timeout-worker-healthcheck`: a worker whose loop does not answer a ping in time is
  killed (SIGKILL) and restarted;
* SIGHUP replaces the workers one by one the same way (start the new one, wait for its
  READY, then SIGTERM the old one), so every slot always has a worker accepting, and the
  code is imported afresh (the supervisor never imports the application);
* SIGTERM or SIGINT: every worker gets SIGTERM (it stops accepting, finishes the requests in
  flight up to `--timeout-graceful-shutdown`, closes idle keep-alive connections and runs
  lifespan shutdown), the supervisor closes its copies of the listeners (so they close with
  the workers' and new connections are refused), and exits 0 once the workers are all gone;
  a second signal forwards SIGINT, which makes the workers close what is still in flight;
* SIGTTIN / SIGTTOU: one worker more / one fewer (as uvicorn and gunicorn);
* if no worker has ever started and one fails to (the application does not import: 1, its
  lifespan startup failed: 3), everything stops and that is the exit status.

Workers run in process groups of their own, so a Ctrl+C at a terminal reaches only the
supervisor, which then stops them once (a signal reaching both would count as the workers'
second, impatient one).

`--reload` is not a supervisor of forks: `entry` hands it to `reloader`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import selectors
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import NoReturn

from . import control, logs
from .config import Config, ConfigError
from .listen import bind_socket
from .logs import logger
from .server import run

# Restart back-off after a crash (seconds): a worker that served at least STABLE_AFTER
# before it died is restarted at once; crashes in a row wait BACKOFF_FIRST, then twice as
# long each time, up to BACKOFF_MAX.
STABLE_AFTER = 10.0
BACKOFF_FIRST = 0.25
BACKOFF_MAX = 16.0
# How often the supervisor looks at its workers (pings, memory, deadlines), in seconds.
TICK = 0.25
PING_EVERY = 1.0
# A worker told to stop gets --timeout-graceful-shutdown, then this much more to run its
# lifespan shutdown, before SIGKILL. Without the timeout it is waited for, as the worker
# waits for its requests.
STOP_GRACE = 5.0
MIB = 1024 * 1024


@dataclass(eq=False)
class Worker:
    """One worker process, as the supervisor sees it."""

    index: int
    pid: int
    channel: socket.socket
    started_at: float
    ready_at: float | None = None
    stop_sent_at: float | None = None  # set once told to stop: it no longer counts as serving
    killed: bool = False
    ping_sent_at: float | None = None
    last_pong: float = 0.0
    replaces: Worker | None = None  # the worker this one takes over from once it is ready

    @property
    def serving(self) -> bool:
        return self.stop_sent_at is None


def describe_status(status: int) -> str:
    """`exit 1` or `killed by SIGKILL`, from a waitpid status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def rss_bytes(pid: int) -> int | None:
    """The resident memory of `pid` (VmRSS), or None once it has gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        return None
    return None


class Supervisor:
    """The parent of `--workers N` (see the module docs)."""

    SIGNALS = (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGCHLD,
        signal.SIGTTIN,
        signal.SIGTTOU,
    )

    def __init__(self, config: Config) -> None:
        self.config = config
        self.target = config.workers
        self.workers: dict[int, Worker] = {}  # by pid
        self.shared: socket.socket | None = None  # --uds / --fd: every worker's listener
        self.slots: dict[int, socket.socket] = {}  # TCP: each index's SO_REUSEPORT listener
        self.uds_created = False
        self.next_start: dict[int, float] = {}  # by index: when it may be started again
        self.failures: dict[int, int] = {}  # by index: crashes in a row
        self.replace_queue: deque[int] = deque()
        self.replacing: Worker | None = None  # a new worker booting to take over an old one
        self.shutting_down = False
        self.signalled_again = False
        self.ever_ready = False
        self.exit_status = 0
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._saved_handlers: dict[int, object] = {}
        self._last_tick = 0.0

    # -- the main loop -------------------------------------------------------------------------

    def run(self) -> int:
        logs.configure(self.config.log_level, self.config.use_colors)
        try:
            self._listen()
        except (ConfigError, OSError) as exc:
            logger.error("%s", exc)
            self._close_listeners()
            return 1
        logger.info("Started parent process [%d]", os.getpid())
        self._install_signals()
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._on_wakeup)
        try:
            while True:
                self._reap()
                if self.shutting_down and not self.workers:
                    break
                now = time.monotonic()
                if not self.shutting_down:
                    self._reconcile(now)
                if now - self._last_tick >= TICK:
                    self._last_tick = now
                    self._tick(now)
                for key, _ in self.selector.select(self._timeout(now)):
                    key.data()
        finally:
            self._restore_signals()
            self._close_listeners()
            self.selector.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
        logger.info("Stopping parent process [%d]", os.getpid())
        return self.exit_status

    def _timeout(self, now: float) -> float:
        timeout = TICK
        if not self.shutting_down:
            for index in range(self.target):
                due = self.next_start.get(index, 0.0)
                if due > now and not self._serving(index):
                    timeout = min(timeout, due - now)
        return max(timeout, 0.0)

    # -- listeners -----------------------------------------------------------------------------

    def _listen(self) -> None:
        c = self.config
        if c.fd is not None or c.uds:
            self.uds_created = bool(c.uds)
            self.shared = bind_socket(c)
            return
        # The first slot checks the address for everyone and turns --port 0 into one port.
        first = bind_socket(c, reuse_port=True)
        self.slots[0] = first
        port = first.getsockname()[1]
        if port != c.port:
            self.config = dataclasses.replace(c, port=port)
        for index in range(1, self.target):
            self._listener(index)

    def _listener(self, index: int) -> socket.socket:
        """The listener a worker of `index` serves (bound on first use: SIGTTIN)."""
        if self.shared is not None:
            return self.shared
        sock = self.slots.get(index)
        if sock is None:
            sock = self.slots[index] = bind_socket(self.config, reuse_port=True)
        return sock

    def _close_slot(self, index: int) -> None:
        sock = self.slots.pop(index, None)
        if sock is not None:
            sock.close()

    def _close_listeners(self) -> None:
        for index in list(self.slots):
            self._close_slot(index)
        if self.shared is not None:
            self.shared.close()
            self.shared = None
        if self.uds_created and self.config.uds:
            with contextlib.suppress(OSError):
                os.unlink(self.config.uds)
            self.uds_created = False

    # -- signals -------------------------------------------------------------------------------

    def _install_signals(self) -> None:
        # The handlers do nothing: the C-level handler writes the signal's number to the
        # wake-up fd, which the selector reads. So a signal never runs code in the middle of
        # the supervisor's bookkeeping.
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            self._saved_handlers[sig] = signal.signal(sig, _ignore)

    def _restore_signals(self) -> None:
        for sig, handler in self._saved_handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._saved_handlers.clear()
        signal.set_wakeup_fd(-1)

    def _on_wakeup(self) -> None:
        try:
            data = os.read(self.wake_r, 512)
        except BlockingIOError:
            return
        for sig in data:
            self._on_signal(sig)

    def _on_signal(self, sig: int) -> None:
        if sig == signal.SIGCHLD:
            return  # the main loop reaps on every turn
        name = signal.Signals(sig).name
        if sig in (signal.SIGTERM, signal.SIGINT):
            if not self.shutting_down:
                logger.info("Received %s: stopping %d workers.", name, len(self.workers))
                self.shutdown()
            elif not self.signalled_again:
                self.signalled_again = True
                logger.info("Received %s again: closing the requests in flight.", name)
                for w in self.workers.values():
                    _kill(w.pid, signal.SIGINT)
        elif self.shutting_down:
            return
        elif sig == signal.SIGHUP:
            logger.info("Received SIGHUP: replacing the %d workers one by one.", self.target)
            for index in range(self.target):
                if index not in self.replace_queue:
                    self.replace_queue.append(index)
        elif sig == signal.SIGTTIN:
            self.target += 1
            logger.info("Received SIGTTIN: %d workers.", self.target)
        elif sig == signal.SIGTTOU and self.target > 1:
            self.target -= 1
            logger.info("Received SIGTTOU: %d workers.", self.target)

    def shutdown(self) -> None:
        """Tell every worker to stop; the main loop ends once they are gone."""
        self.shutting_down = True
        self.replace_queue.clear()
        for w in self.workers.values():
            self._stop(w)
        # Our copies go now, so each listener closes with its worker's and new connections
        # are refused rather than queued where nobody will accept them. (The Unix socket's
        # path stays until the end: it is unlinked once.)
        for index in list(self.slots):
            self._close_slot(index)

    # -- workers -------------------------------------------------------------------------------

    def _serving(self, index: int) -> list[Worker]:
        return [w for w in self.workers.values() if w.index == index and w.serving]

    def _reconcile(self, now: float) -> None:
        """Start what is missing, stop what is too many, go on with a replacement."""
        for index in range(self.target):
            if not self._serving(index) and now >= self.next_start.get(index, 0.0):
                self._try_spawn(index)
        for w in list(self.workers.values()):
            if w.index >= self.target and w.serving:
                logger.info("Stopping worker [%d]: fewer workers asked for.", w.pid)
                self._stop(w)
        for index in [i for i in self.slots if i >= self.target]:
            self._close_slot(index)
        while self.replacing is None and self.replace_queue:
            index = self.replace_queue[0]
            old = [w for w in self._serving(index) if w.ready_at is not None]
            if index >= self.target or not old:
                self.replace_queue.popleft()  # gone or still booting: nothing to replace
                continue
            if now < self.next_start.get(index, 0.0):
                break  # its last replacement failed: wait out the back-off
            self.replace_queue.popleft()
            new = self._try_spawn(index)
            if new is not None:
                new.replaces = old[0]
                self.replacing = new

    def _try_spawn(self, index: int) -> Worker | None:
        try:
            return self._spawn(index)
        except (ConfigError, OSError) as exc:
            # No listener for a new slot, or no fork (EAGAIN, ENOMEM): try again later.
            delay = self._backoff(index)
            logger.error("Cannot start a worker: %s; next try in %gs.", exc, delay)
            self.next_start[index] = time.monotonic() + delay
            return None

    def _spawn(self, index: int) -> Worker:
        listener = self._listener(index)
        ours, theirs = socket.socketpair()
        # Buffered output would be written twice, once by each process.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, measured by the tests from outside
            ours.close()
            self._worker_main(index, theirs, listener)
        theirs.close()
        now = time.monotonic()
        worker = Worker(index=index, pid=pid, channel=ours, started_at=now)
        ours.setblocking(False)
        self.workers[pid] = worker
        self.selector.register(ours, selectors.EVENT_READ, lambda: self._on_message(worker))
        self.next_start[index] = now
        return worker

    def _worker_main(self, index: int, channel: socket.socket, listener: socket.socket) -> NoReturn:
        """The child's side of `_spawn`: let go of everything of the supervisor's, then run
        one worker on a fresh loop."""
        status = 1
        try:
            # Out of the terminal's process group: Ctrl+C is the supervisor's to relay.
            os.setpgid(0, 0)
            signal.set_wakeup_fd(-1)
            for sig in self.SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for other in self.workers.values():
                other.channel.close()
            # Another slot's listener held here would keep that slot open (and its queue
            # filling) after its own worker is gone.
            for sock in self.slots.values():
                if sock is not listener:
                    sock.close()
            logger.info("Started server process [%d]", os.getpid())
            status = run(
                self.config,
                [listener],
                worker=index,
                on_started=control.worker_hook(channel),
                on_stopping=control.stopping_hook(channel),
            )
            logger.info("Finished server process [%d]", os.getpid())
        except ConfigError as exc:
            logger.error("%s", exc)
        except KeyboardInterrupt:
            status = 0  # told to stop quickly before the server took over SIGINT
        except BaseException:
            logger.exception("Worker %d failed", index)
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(status)

    def _on_message(self, worker: Worker) -> None:
        try:
            data = worker.channel.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            # It is exiting; waitpid tells how. Reading on would spin on the EOF.
            self.selector.unregister(worker.channel)
            return
        now = time.monotonic()
        if control.PONG in data:
            worker.ping_sent_at = None
            worker.last_pong = now
        if control.READY in data and worker.ready_at is None:
            worker.ready_at = worker.last_pong = now
            self.ever_ready = True
            old = worker.replaces
            if old is not None:
                worker.replaces = None
                if self.replacing is worker:
                    self.replacing = None
                if old.pid in self.workers and old.serving:
                    logger.info("Worker [%d] is ready: stopping worker [%d].", worker.pid, old.pid)
                    self._stop(old)
            if self.shutting_down:
                self._stop(worker)
        if control.STOPPING in data and worker.serving:
            # It served --limit-max-requests and drains now: its successor starts at once on
            # the same listener, so nothing waits in the queue for the old one to exit.
            worker.stop_sent_at = now
            logger.info(
                "Worker [%d] stopped by itself (--limit-max-requests): starting a new one.",
                worker.pid,
            )
            self.failures[worker.index] = 0
            self.next_start[worker.index] = now

    def _stop(self, worker: Worker) -> None:
        if worker.stop_sent_at is None:
            worker.stop_sent_at = time.monotonic()
            _kill(worker.pid, signal.SIGTERM)

    def _tick(self, now: float) -> None:
        """Health checks, memory, and deadlines of workers told to stop."""
        limit = self.config.limit_max_rss
        healthcheck = self.config.timeout_worker_healthcheck
        graceful = self.config.timeout_graceful_shutdown
        for w in list(self.workers.values()):
            if not w.serving:
                if graceful is not None and not w.killed:
                    if now - w.stop_sent_at > graceful + STOP_GRACE:
                        logger.warning("Worker [%d] did not stop in time: killing it.", w.pid)
                        w.killed = True
                        _kill(w.pid, signal.SIGKILL)
                continue
            if w.ready_at is None:
                continue  # booting: an application may take its time to start
            if healthcheck:
                if w.ping_sent_at is not None:
                    if now - w.ping_sent_at > healthcheck:
                        logger.error(
                            "Worker [%d] did not answer the health check within %gs: killing it.",
                            w.pid,
                            healthcheck,
                        )
                        w.killed = True
                        _kill(w.pid, signal.SIGKILL)
                        continue
                elif now - w.last_pong >= PING_EVERY:
                    with contextlib.suppress(OSError):
                        w.channel.send(control.PING)
                        w.ping_sent_at = now
            if limit is not None and not self._being_replaced(w):
                rss = rss_bytes(w.pid)
                if rss is not None and rss > limit * MIB:
                    logger.warning(
                        "Worker [%d] uses %d MiB, over --limit-max-rss %d MiB: replacing it.",
                        w.pid,
                        rss // MIB,
                        limit,
                    )
                    self.replace_queue.append(w.index)

    def _being_replaced(self, worker: Worker) -> bool:
        if worker.index in self.replace_queue:
            return True
        return self.replacing is not None and self.replacing.replaces is worker

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is not None:
                self._exited(worker, status)

    def _exited(self, w: Worker, status: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(w.channel)
        w.channel.close()
        now = time.monotonic()
        how = describe_status(status)
        code = os.waitstatus_to_exitcode(status)
        if self.replacing is w:
            self.replacing = None
        if not w.serving or self.shutting_down:
            if code == 0 or w.killed:
                logger.info("Worker [%d] stopped (%s).", w.pid, how)
            else:
                logger.warning("Worker [%d] stopped (%s).", w.pid, how)
            return
        index = w.index
        if w.ready_at is None and not self.ever_ready and code > 0:
            # The first workers cannot start (the application does not import, its
            # lifespan startup failed): restarting would fail the same way.
            logger.error("Worker [%d] failed to start (%s): stopping.", w.pid, how)
            self.exit_status = code if code in (1, 3) else 1
            self.shutdown()
            return
        if w.replaces is not None:
            # A replacement that died booting: the old worker serves on.
            self.replace_queue.clear()
            delay = self._backoff(index)
            logger.error(
                "Worker [%d], replacing worker [%d], failed to start (%s): keeping the old "
                "one; next try in %gs.",
                w.pid,
                w.replaces.pid,
                how,
                delay,
            )
            self.next_start[index] = now + delay
            return
        if code == 0 and w.ready_at is not None:
            logger.info(
                "Worker [%d] stopped by itself (--limit-max-requests): starting a new one.",
                w.pid,
            )
            self.failures[index] = 0
            self.next_start[index] = now
            return
        if w.ready_at is not None and now - w.ready_at >= STABLE_AFTER:
            self.failures[index] = 0
            delay = 0.0
        else:
            delay = self._backoff(index)
        logger.warning("Worker [%d] died (%s): restarting it in %gs.", w.pid, how, delay)
        self.next_start[index] = now + delay

    def _backoff(self, index: int) -> float:
        failures = self.failures.get(index, 0) + 1
        self.failures[index] = failures
        return min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX)


def _ignore(_sig: int, _frame: object) -> None:
    """A Python-level handler that does nothing: the wake-up fd carries the signal."""


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
