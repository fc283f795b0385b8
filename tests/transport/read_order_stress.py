"""Seeded differential stress of the stream read path: every byte compared with what was sent.

A scenario is drawn from a seed (``Scenario.draw``): the family (TCP, Unix, TLS), which side
reads (server or client), how it reads (a ``Protocol``, a ``BufferedProtocol`` with random
buffer sizes, or an ``asyncio`` stream with a small ``limit`` and random ``read(n)`` /
``readexactly`` / ``readuntil``), who sends (a plain socket in a thread, or a transport of the
same loop), how many connections run at once, the write sizes (1 B to 4 MiB), how the stream
ends (EOF and a reply on the half-closed connection, a close, or an abort mid-stream) and how
the reader pauses: after a random share of its reads it calls ``pause_reading()`` and resumes
from ``call_soon``, ``call_later(0)``, a short timer, a task, another connection's callback,
another thread (``call_soon_threadsafe``), the same callback, or pauses twice and resumes twice.
A share of the seeds draws a **crowd** instead: 64 connections sending at once (they start
together, once all are made) to a reader that blocks 1-3 ms after every read, so io_uring's
provided-buffer ring runs dry and recvs are read straight from their sockets. The senders and
the endpoints are in ``stress_ends``.

The verdict never depends on timing: the reader must receive exactly what was sent, in order,
then the end of the stream (after an abort, a prefix of it), and nothing after the end. The
same seed runs on every loop kind; stock asyncio is the control.

This is the test that would have caught ringloop's io_uring reordering (a resume re-queued
held reads behind completions already queued): run on the build before the fix it fails on
io_uring within the seeds ``make test`` runs. Like that bug, many faults of this kind only
show while the machine is busy, so the test keeps both cores loaded (``busy_cores``).

``python tests/transport/read_order_stress.py --seeds 2000`` is the long run (``make stress``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from stress_ends import Endpoint, abort_at, loop_send, thread_send

KINDS = ("asyncio", "ringloop-io_uring", "ringloop-epoll")
RESUMES = ("self", "soon", "later0", "timer", "task", "other", "thread", "double")
READERS = ("protocol", "buffered", "stream")
# Per-connection sizes, small to large; several connections share a budget.
TOTALS = (1, 100, 5_000, 70_000, 300_000, 1_000_000, 4_000_000)
BUDGET = 6_000_000
# A crowd: many connections sending at once to a reader that blocks, so io_uring's buffer ring
# runs dry and starved recvs are read straight from their sockets (see eventloop/router.rs).
CROWD = 64
MAX_WRITE = 4 * 1024 * 1024
SCENARIO_TIMEOUT = 90.0


@dataclass
class Scenario:
    seed: int
    family: str
    reader: str
    reader_side: str
    sender: str
    totals: list[int]
    ending: str
    pause_p: float
    resumes: tuple[str, ...]
    stream_limit: int
    buffer_sizes: tuple[int, ...]
    block_ms: float = 0.0

    @classmethod
    def draw(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        family = rng.choices(("tcp", "unix", "tls"), (5, 3, 2))[0]
        conns = rng.choice((1, 1, 2, 3, 6))
        totals = []
        for _ in range(conns):
            size = rng.choice(TOTALS)
            totals.append(max(1, min(size, BUDGET // conns)))
        # TLS has no half-close in asyncio: its "eof" is a close_notify.
        endings = ("eof", "eof", "close", "abort") if family != "tls" else ("close", "abort")
        small = max(totals) <= 100_000
        sc = cls(
            seed=seed,
            family=family,
            reader=rng.choice(READERS),
            reader_side=rng.choice(("server", "client")),
            sender=rng.choice(("thread", "loop")),
            totals=totals,
            ending=rng.choice(endings),
            pause_p=rng.choice((0.0, 0.2, 0.6, 1.0)),
            resumes=tuple(rng.sample(RESUMES, rng.randint(1, len(RESUMES)))),
            stream_limit=rng.choice((1, 100, 4096, 65536)),
            buffer_sizes=(1, 7, 100, 4096, 65536) if small else (100, 4096, 65536, 262144),
        )
        # Drawn last, so the seeds drawn before the crowd existed keep their scenarios.
        if rng.random() < 0.15:
            sc.totals = [BUDGET // CROWD] * CROWD
            sc.block_ms = rng.choice((1.0, 3.0))
            sc.buffer_sizes = (100, 4096, 65536, 262144)
        return sc

    def __str__(self) -> str:
        return (
            f"seed={self.seed} {self.family} {self.reader}@{self.reader_side} "
            f"sender={self.sender} conns={len(self.totals)} totals={self.totals} "
            f"ending={self.ending} pause_p={self.pause_p} resumes={','.join(self.resumes)} "
            f"limit={self.stream_limit} block_ms={self.block_ms}"
        )


def payload(seed: int, conn: int, n: int) -> bytes:
    return random.Random(f"{seed}/{conn}").randbytes(n)


def write_sizes(rng: random.Random, total: int) -> list[int]:
    """Log-uniform sizes from 1 B to 4 MiB adding up to ``total``."""
    sizes = []
    left = total
    while left:
        n = min(left, int(2 ** rng.uniform(0, 22)) or 1, MAX_WRITE)
        sizes.append(n)
        left -= n
    return sizes


# -- the reading side ---------------------------------------------------------------------------


@dataclass
class Received:
    """What one connection's reader saw, in order."""

    data: bytearray = field(default_factory=bytearray)
    eof: bool = False
    after_end: list[str] = field(default_factory=list)
    lost: BaseException | None | str = "not yet"
    error: str | None = None

    def add(self, chunk) -> None:
        if self.eof:
            self.after_end.append(f"{len(chunk)} bytes after EOF")
        self.data += chunk


class Pauser:
    """Pauses a transport after a random share of reads and resumes it in a random way."""

    def __init__(self, sc: Scenario, rng: random.Random, shared: Shared) -> None:
        self.sc = sc
        self.rng = rng
        self.shared = shared

    def maybe_pause(self, transport) -> None:
        self.shared.run_others(self.rng)
        maybe_block(self.sc, self.rng)
        if not self.sc.pause_p or self.rng.random() >= self.sc.pause_p:
            return
        if transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        how = self.rng.choice(self.sc.resumes)
        transport.pause_reading()
        resume = transport.resume_reading
        if how == "self":
            resume()
        elif how == "soon":
            loop.call_soon(resume)
        elif how == "later0":
            loop.call_later(0, resume)
        elif how == "timer":
            loop.call_later(self.rng.uniform(0, 0.002), resume)
        elif how == "task":
            loop.create_task(_resume_after(resume, self.rng.randint(0, 3)))
        elif how == "other":
            # Another connection's next callback resumes it; a timer makes sure it happens
            # even when no other connection reads any more (resuming twice is a no-op).
            self.shared.others.append(resume)
            loop.call_later(0.003, resume)
        elif how == "thread":
            self.shared.resume_from_thread(loop, resume)
        elif how == "double":
            transport.pause_reading()
            loop.call_soon(resume)
            loop.call_soon(resume)


def maybe_block(sc: Scenario, rng: random.Random) -> None:
    """Block the loop after every read of a crowd, as a handler that blocks would."""
    if sc.block_ms:
        time.sleep(sc.block_ms / 1000)


async def _resume_after(resume, n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)
    resume()


class Shared:
    """What the connections of one scenario share: resumes handed to other connections, and
    one thread that resumes through ``call_soon_threadsafe``."""

    def __init__(self) -> None:
        self.others: list = []
        self._jobs: list = []
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False

    def run_others(self, rng: random.Random) -> None:
        if self.others and rng.random() < 0.5:
            self.others.pop(rng.randrange(len(self.others)))()

    def resume_from_thread(self, loop, resume) -> None:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
            self._jobs.append((loop, resume))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stop:
                    self._cv.wait()
                if self._stop and not self._jobs:
                    return
                loop, resume = self._jobs.pop(0)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(resume)

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(5)


class ReadProto(asyncio.Protocol):
    def __init__(self, rec: Received, pauser: Pauser, reply: bool) -> None:
        self.rec, self.pauser, self.reply = rec, pauser, reply
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.rec.add(data)
        self.pauser.maybe_pause(self.transport)

    def eof_received(self):
        self.rec.eof = True
        if self.reply:
            # A write on the half-closed connection: the sender waits for it.
            self.transport.write(str(len(self.rec.data)).encode())
            self.transport.close()
            return True
        return None

    def connection_lost(self, exc) -> None:
        self.rec.lost = exc
        if not self.done.done():
            self.done.set_result(None)


class ReadBuffered(asyncio.BufferedProtocol):
    def __init__(self, rec: Received, pauser: Pauser, reply: bool, sizes, rng) -> None:
        self.rec, self.pauser, self.reply, self.sizes, self.rng = rec, pauser, reply, sizes, rng
        self.buf = bytearray()
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int):
        # A memoryview: asyncio's TLS layer fills the buffer through slices of it.
        self.buf = memoryview(bytearray(self.rng.choice(self.sizes)))
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.rec.add(self.buf[:nbytes])
        self.pauser.maybe_pause(self.transport)

    eof_received = ReadProto.eof_received
    connection_lost = ReadProto.connection_lost


async def read_stream(
    reader, writer, rec: Received, rng: random.Random, reply: bool, sc: Scenario
) -> None:
    """Random reads until EOF, the way applications mix them."""
    limit = reader._limit
    try:
        while True:
            op = rng.choice(("read", "read", "readexactly", "readuntil"))
            if op == "read":
                chunk = await reader.read(rng.choice((1, 100, 4096, 65536, 1 << 20, -1)))
                if not chunk:
                    break
                rec.add(chunk)
            elif op == "readexactly":
                try:
                    rec.add(await reader.readexactly(rng.choice((1, 10, 1000, 70_000))))
                except asyncio.IncompleteReadError as e:
                    rec.add(e.partial)
                    break
            else:
                try:
                    rec.add(await reader.readuntil(bytes([rng.randrange(256)])))
                except asyncio.LimitOverrunError as e:
                    rec.add(await reader.readexactly(max(1, min(e.consumed, limit))))
                except asyncio.IncompleteReadError as e:
                    rec.add(e.partial)
                    break
            maybe_block(sc, rng)
            if rng.random() < 0.2:
                await asyncio.sleep(0)
        rec.eof = True
        if reply:
            writer.write(str(len(rec.data)).encode())
            await writer.drain()
    except (ConnectionError, ssl.SSLError) as e:
        rec.lost = e
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    if rec.lost == "not yet":
        rec.lost = None


# -- one scenario -------------------------------------------------------------------------------


async def run_scenario(sc: Scenario) -> list[str]:
    """Run one scenario on the running loop; returns what went wrong (empty: all intact)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(f"run/{sc.seed}")
    shared = Shared()
    ep = Endpoint(sc.family, tempfile.mkdtemp(prefix="rl-st-", dir="/tmp"))
    conns = []
    for i, total in enumerate(sc.totals):
        sizes = write_sizes(rng, total)
        conns.append(
            {
                "i": i,
                "data": payload(sc.seed, i, total),
                "sizes": sizes,
                "abort_after": abort_at(rng, sizes, sc.ending),
                "rec": Received(),
                "out": {},
                "rng": random.Random(f"conn/{sc.seed}/{i}"),
            }
        )
    reply = sc.ending == "eof"
    # A crowd's senders start together, once every connection is made.
    go = threading.Event()
    if not sc.block_ms:
        go.set()
    tasks: list = []
    threads: list[threading.Thread] = []
    cleanup: list = []

    def make_reader_protocol(c):
        pauser = Pauser(sc, c["rng"], shared)
        if sc.reader == "buffered":
            return ReadBuffered(c["rec"], pauser, reply, sc.buffer_sizes, c["rng"])
        return ReadProto(c["rec"], pauser, reply)

    try:
        if sc.reader_side == "server":
            pending = list(conns)
            if sc.reader == "stream":

                async def handler(r, w):
                    c = pending.pop(0)
                    await read_stream(r, w, c["rec"], c["rng"], reply, sc)
                    c["done"].set_result(None)

                for c in conns:
                    c["done"] = loop.create_future()
                start = asyncio.start_server if sc.family != "unix" else asyncio.start_unix_server
                addr_kw = {"limit": sc.stream_limit, "ssl": ep.server_ssl()}
                if sc.family == "unix":
                    server = await start(handler, ep.address(), **addr_kw)
                else:
                    server = await start(handler, "127.0.0.1", 0, **addr_kw)
            else:

                def factory():
                    c = pending.pop(0)
                    p = make_reader_protocol(c)
                    c["done"] = p.done
                    return p

                if sc.family == "unix":
                    server = await loop.create_unix_server(factory, ep.address())
                else:
                    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=ep.server_ssl())
            cleanup.append(server)
            addr = server.sockets[0].getsockname()
            # Connections are accepted in connect order, so one connects at a time.
            for c in conns:
                if sc.sender == "thread":
                    sock = await loop.run_in_executor(None, ep.plain_connect, addr)
                    args = (sock, c["data"], c["sizes"], sc.ending, c["abort_after"], c["out"], go)
                    threads.append(threading.Thread(target=thread_send, args=args, daemon=True))
                    threads[-1].start()
                else:
                    if sc.family == "unix":
                        r, w = await asyncio.open_unix_connection(addr)
                    else:
                        r, w = await asyncio.open_connection(
                            *addr, ssl=ep.client_ssl(), server_hostname=ep.hostname()
                        )
                    args = (r, w, c["data"], c["sizes"], sc.ending, c["abort_after"], c["out"], go)
                    tasks.append(loop.create_task(loop_send(*args)))
                # The next one connects once this one reached its reader (a TLS handshake
                # may finish out of connect order).
                while len(pending) > len(conns) - c["i"] - 1:
                    await asyncio.sleep(0.001)
            waits = [c["done"] for c in conns]
            go.set()
        else:
            if sc.sender == "thread":
                lsock = ep.plain_listen()
                cleanup.append(lsock)
                addr = lsock.getsockname()

                def accept_all():
                    # One acceptor, so connection i is the i-th accepted (we connect in order).
                    for c in conns:
                        sock = ep.plain_accept(lsock)
                        args = (
                            sock,
                            c["data"],
                            c["sizes"],
                            sc.ending,
                            c["abort_after"],
                            c["out"],
                            go,
                        )
                        t = threading.Thread(target=thread_send, args=args, daemon=True)
                        threads.append(t)  # before it starts: the join below must see it
                        t.start()

                threads.append(threading.Thread(target=accept_all, daemon=True))
                threads[-1].start()
            else:
                queue = list(conns)

                async def send_handler(r, w):
                    c = queue.pop(0)
                    # Waited for below with the other senders: the reply to an EOF arrives
                    # after the reader is done, and the check must not run before it.
                    tasks.append(asyncio.current_task())
                    await loop_send(
                        r, w, c["data"], c["sizes"], sc.ending, c["abort_after"], c["out"], go
                    )

                if sc.family == "unix":
                    server = await asyncio.start_unix_server(send_handler, ep.address())
                else:
                    server = await asyncio.start_server(
                        send_handler, "127.0.0.1", 0, ssl=ep.server_ssl()
                    )
                cleanup.append(server)
                addr = server.sockets[0].getsockname()
            kw = {}
            if sc.family == "tls":
                kw = {"ssl": ep.client_ssl(), "server_hostname": "localhost"}

            async def connect_reader(c):
                """Connect connection ``c``'s reader; returns what to wait for."""
                if sc.reader == "stream":
                    if sc.family == "unix":
                        r, w = await asyncio.open_unix_connection(addr, limit=sc.stream_limit)
                    else:
                        r, w = await asyncio.open_connection(*addr, limit=sc.stream_limit, **kw)
                    tasks.append(loop.create_task(read_stream(r, w, c["rec"], c["rng"], reply, sc)))
                    return tasks[-1]
                factory = lambda: make_reader_protocol(c)  # noqa: E731
                if sc.family == "unix":
                    _, p = await loop.create_unix_connection(factory, addr)
                else:
                    _, p = await loop.create_connection(factory, *addr, **kw)
                return p.done

            waits = []
            for c in conns:
                try:
                    waits.append(await connect_reader(c))
                except ConnectionError as e:
                    if sc.ending != "abort":
                        raise
                    c["rec"].lost = e  # reset before the connection was made: nothing read
                if sc.sender == "loop":
                    # As above: the next one connects once this one reached its sender.
                    for _ in range(5000):
                        if len(queue) <= len(conns) - c["i"] - 1:
                            break
                        await asyncio.sleep(0.001)
            go.set()
        await asyncio.wait_for(asyncio.gather(*waits), SCENARIO_TIMEOUT)
        if tasks:
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        # The acceptor (first, when there is one) appends the senders it starts: join in order.
        i = 0
        while i < len(threads):
            await loop.run_in_executor(None, threads[i].join, 10)
            i += 1
    finally:
        go.set()
        for t in tasks:
            t.cancel()
        for obj in cleanup:
            obj.close()
            if isinstance(obj, asyncio.AbstractServer):
                await obj.wait_closed()
        shared.close()
        for name in os.listdir(ep.tmpdir):
            os.unlink(os.path.join(ep.tmpdir, name))
        os.rmdir(ep.tmpdir)
    return [p for c in conns for p in check(sc, c)]


def check(sc: Scenario, c: dict) -> list[str]:
    """What is wrong with connection ``c``'s reads (an empty list when nothing is)."""
    rec: Received = c["rec"]
    got, sent = bytes(rec.data), c["data"]
    where = f"conn {c['i']}"
    # An abort is a reset: whatever the reader had not read yet may be gone with it.
    aborted = sc.ending == "abort"
    problems = []
    if aborted:
        if not sent.startswith(got):
            problems.append(f"{where}: after an abort, not a prefix: {diff(got, sent)}")
    elif got != sent:
        problems.append(f"{where}: {diff(got, sent)}")
    elif sc.ending == "eof" and c["out"].get("reply") != str(len(sent)).encode():
        got_reply = c["out"].get("reply")
        why = c["out"].get("error", "no sender error")
        problems.append(f"{where}: reply on the half-closed connection {got_reply!r} ({why})")
    if not aborted and not rec.eof and rec.lost not in (None, "not yet"):
        problems.append(f"{where}: the stream ended with {rec.lost!r}, not EOF")
    problems.extend(f"{where}: {a}" for a in rec.after_end)
    return problems


def diff(got: bytes, sent: bytes) -> str:
    """Where ``got`` first differs from ``sent``, and where its bytes there came from."""
    n = min(len(got), len(sent))
    at = next((i for i in range(n) if got[i] != sent[i]), n)
    if at == n:
        return f"received {len(got)} of {len(sent)} bytes, all correct"
    probe = got[at : at + 32]
    src = sent.find(probe)
    came = f"from offset {src} (shift {src - at:+})" if src >= 0 else "from nowhere in the stream"
    return f"received {len(got)} of {len(sent)} bytes; first difference at {at}, bytes {came}"


# -- busy cores and the command line --------------------------------------------------------------


@contextlib.contextmanager
def busy_cores(n: int | None = None):
    """Keep every core busy with spinning processes while the block runs."""
    n = n or os.cpu_count() or 2
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def make_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "asyncio":
        return asyncio.SelectorEventLoop()
    import ringloop

    return ringloop.Loop(backend=kind.removeprefix("ringloop-"))


def main() -> int:
    ap = argparse.ArgumentParser(description="Long run of the read-order stress scenarios.")
    ap.add_argument("--seeds", type=int, default=2000, help="how many seeds (default 2000)")
    ap.add_argument("--first", type=int, default=0, help="the first seed")
    ap.add_argument("--kinds", default=",".join(KINDS), help="loop kinds, comma-separated")
    ap.add_argument("--idle", action="store_true", help="do not load the cores")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    failures = {k: [] for k in kinds}
    t0 = time.monotonic()
    with contextlib.nullcontext() if args.idle else busy_cores():
        for seed in range(args.first, args.first + args.seeds):
            sc = Scenario.draw(seed)
            for kind in kinds:
                loop = make_loop(kind)
                try:
                    problems = loop.run_until_complete(run_scenario(sc))
                except Exception as e:  # a hang or a crash is a failure of this scenario
                    problems = [f"{type(e).__name__}: {e}"]
                finally:
                    loop.close()
                if problems:
                    failures[kind].append(sc.seed)
                    print(f"FAIL {kind} {sc}\n  " + "\n  ".join(problems), flush=True)
            if (seed - args.first + 1) % 100 == 0:
                counts = ", ".join(f"{k}: {len(v)} failed" for k, v in failures.items())
                print(f"{seed - args.first + 1} seeds, {time.monotonic() - t0:.0f} s; {counts}")
    counts = ", ".join(f"{k}: {len(v)} of {args.seeds} failed" for k, v in failures.items())
    print(f"done in {time.monotonic() - t0:.0f} s; {counts}")
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
