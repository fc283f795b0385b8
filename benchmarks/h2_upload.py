"""A large upload beside small streams on one HTTP/2 connection (issue 22): do they stall?

One h2c connection to ``ringloop serve --http 2`` (the HTTP suite's ``app_asgi:upload``: a
GET answers ``0`` at once, a POST's body is read whole and its length answered). On it, a
client built on python-hyper's ``h2`` sends waves of ``--in-flight`` small GETs (100 by
default) at once, the next wave ``--interval`` ms after the last one's answers are all in,
and measures each stream from the write of its HEADERS to its END_STREAM. (Waves, not a
constant 100 in flight: a Python client kept busy by 100 open streams is the bottleneck and
its own queue the latency; between waves it is idle and free to push the upload.) Two
phases, each in a fresh server process:

- ``idle``: only the small streams, ``--waves`` waves (200);
- ``upload``: the same waves while one more stream uploads ``--upload-mib`` MiB (64), sent
  as fast as the server's flow-control windows allow; the waves go on until the upload's
  answer is in (at least ``--waves`` of them).

The figure is the small streams' p99 with the upload over their idle p99 (issue 22's target:
within 2×), and how long the upload took. The server runs with
``--http2-max-concurrent-streams`` raised to in-flight + 1 so the upload fits beside them.
The server is pinned to CPU 0, this client to CPU 1; the client is Python, so its own time
per stream is in every latency, in both phases alike.

    python benchmarks/h2_upload.py [--in-flight 100] [--waves 200] [--upload-mib 64]

Writes ``results/h2_upload.json``.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.exceptions  # noqa: E402
import h2.settings  # noqa: E402
import h2_peers  # noqa: E402
import harness  # noqa: E402
import http_peers  # noqa: E402

RESULTS = harness.BENCH_DIR / "results" / "h2_upload.json"
SERVER_CPU, CLIENT_CPU = 0, 1
CHUNK = 16_384


class Client:
    """h2's client connection over a non-blocking socket, driven by ``run``."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.conn = h2.connection.H2Connection(cfg)
        self.conn.initiate_connection()
        # Our receive windows as large as they go: the small answers must never wait on us.
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        self.conn.increment_flow_control_window(2**31 - 1 - 65_535)
        self.out = bytearray()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.started: dict[int, float] = {}
        self.latencies: list[float] = []
        self.upload_sid: int | None = None
        self.upload_left = 0
        self.upload_answer: bytes = b""
        self.upload_done_at: float | None = None

    def _get(self) -> None:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            sid,
            [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "127.0.0.1")],
            end_stream=True,
        )
        self.started[sid] = time.perf_counter()

    def _start_upload(self, size: int) -> None:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":path", "/upload"),
                (":scheme", "http"),
                (":authority", "127.0.0.1"),
                ("content-length", str(size)),
            ],
        )
        self.upload_sid, self.upload_left = sid, size

    def _pump_upload(self) -> None:
        """As much of the upload as the windows allow, at most 1 MiB per turn (the small
        streams' frames go out between turns)."""
        sid = self.upload_sid
        if sid is None or self.upload_left == 0:
            return
        budget = 1 << 20
        payload = b"x" * CHUNK
        while budget > 0 and self.upload_left > 0:
            n = min(self.conn.local_flow_control_window(sid), CHUNK, self.upload_left)
            if n <= 0:
                return
            self.upload_left -= n
            self.conn.send_data(sid, payload[:n], end_stream=self.upload_left == 0)
            budget -= n

    def _flush(self) -> None:
        self.out += self.conn.data_to_send()
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                break
            del self.out[:sent]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)
        self.sel.modify(self.sock, want)

    def _read(self) -> None:
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        if not data:
            raise ConnectionError("the server closed the connection")
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if ev.stream_id == self.upload_sid:
                    self.upload_answer += ev.data
            elif isinstance(ev, h2.events.StreamEnded):
                if ev.stream_id == self.upload_sid:
                    self.upload_done_at = time.perf_counter()
                elif (t0 := self.started.pop(ev.stream_id, None)) is not None:
                    self.latencies.append(time.perf_counter() - t0)
            elif isinstance(ev, h2.events.StreamReset):
                raise ConnectionError(f"stream {ev.stream_id} reset: {ev.error_code!r}")
            elif isinstance(ev, h2.events.ConnectionTerminated):
                raise ConnectionError(f"GOAWAY: {ev.error_code!r}")

    def run(self, wave: int, waves: int, interval: float, upload: int) -> dict[str, Any]:
        """Waves of ``wave`` small GETs, one every ``interval`` s once the last is answered;
        ``waves`` of them, and with ``upload`` bytes going up beside them, as many as it
        takes the upload to finish."""
        t0 = time.perf_counter()
        if upload:
            self._start_upload(upload)
        sent = 0
        next_wave = t0
        while True:
            now = time.perf_counter()
            upload_over = not upload or self.upload_done_at is not None
            if not self.started:
                if upload_over and sent >= waves:
                    break
                if now >= next_wave:
                    for _ in range(wave):
                        self._get()
                    sent += 1
                    next_wave = now + interval
            self._pump_upload()
            self._flush()
            wait = 30.0 if self.started else max(0.0, next_wave - time.perf_counter())
            for _key, mask in self.sel.select(timeout=wait):
                if mask & selectors.EVENT_READ:
                    self._read()
        took = time.perf_counter() - t0
        self.sock.close()
        lat = sorted(self.latencies)
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6  # noqa: E731
        out = {
            "small_streams": len(lat),
            "seconds": took,
            "p50_us": pick(0.5),
            "p99_us": pick(0.99),
            "max_us": lat[-1] * 1e6,
        }
        if upload:
            assert self.upload_done_at is not None
            out["upload_seconds"] = self.upload_done_at - t0
            out["upload_answer"] = self.upload_answer.decode()
            out["upload_mib_s"] = upload / 2**20 / out["upload_seconds"]
        return out


def phase(args: argparse.Namespace, upload: int, work: Path) -> dict[str, Any]:
    cmd = http_peers._ringloop("asgi")("upload", http_peers.free_port(), work)
    port = int(cmd[cmd.index("--port") + 1])
    cmd += ["--http", "2", "--http2-max-concurrent-streams", str(args.in_flight + 1)]
    env = http_peers.server_env(http_peers.APPS_DIR)
    server = h2_peers.H2Server(harness.pinned(cmd, SERVER_CPU), port, env, tls=False)
    try:
        server.wait_ready(timeout=60)
        window = harness.CpuWindow(server.pid, tree=True)
        res = Client(port).run(args.in_flight, args.waves, args.interval / 1000, upload)
        window.close()
        res["server_cpu_s"] = window.server_seconds
        if upload and res["upload_answer"] != str(upload):
            raise RuntimeError(f"the app saw {res['upload_answer']} bytes, not {upload}")
        return res
    finally:
        server.stop()
        server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--in-flight", type=int, default=100, help="small streams per wave")
    p.add_argument("--waves", type=int, default=200, help="waves per phase, least")
    p.add_argument("--interval", type=float, default=10.0, help="ms from a wave's end to the next")
    p.add_argument("--upload-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5, help="idle/upload pairs; the median kept")
    p.add_argument("--name", default=RESULTS.name, help="the JSON's file name in results/")
    args = p.parse_args(argv)
    harness.pin_to_cpu(CLIENT_CPU)
    runs: dict[str, list[dict[str, Any]]] = {"idle": [], "upload": []}
    with tempfile.TemporaryDirectory(prefix="ringloop-h2-upload-") as tmp:
        for r in range(args.rounds):
            for name, size in (("idle", 0), ("upload", args.upload_mib << 20)):
                res = phase(args, size, Path(tmp))
                runs[name].append(res)
                extra = (
                    f", upload {res['upload_seconds']:.2f} s ({res['upload_mib_s']:.0f} MiB/s)"
                    if size
                    else ""
                )
                print(
                    f"  round {r + 1} {name:6} {res['small_streams']} small streams: p50 "
                    f"{res['p50_us'] / 1000:.2f} ms, p99 {res['p99_us'] / 1000:.2f} ms, max "
                    f"{res['max_us'] / 1000:.2f} ms{extra}",
                    flush=True,
                )
    med = {k: sorted(v, key=lambda x: x["p99_us"])[len(v) // 2] for k, v in runs.items() if v}
    ratio = med["upload"]["p99_us"] / med["idle"]["p99_us"]
    # Each round's pair (idle, then upload, minutes apart at most): how much the ratio moves.
    pairs = [u["p99_us"] / i["p99_us"] for i, u in zip(runs["idle"], runs["upload"], strict=True)]
    verdict = "met" if ratio <= 2.0 else "not met"
    print(
        f"small streams' p99: idle {med['idle']['p99_us'] / 1000:.2f} ms, beside the "
        f"{args.upload_mib} MiB upload {med['upload']['p99_us'] / 1000:.2f} ms = {ratio:.2f}× "
        f"(target ≤ 2×: {verdict}); round by round " + ", ".join(f"{r:.2f}×" for r in pairs)
    )
    (RESULTS.parent / args.name).write_text(
        json.dumps(
            {
                "machine": harness.machine_info(),
                "settings": vars(args),
                "median": med,
                "p99_ratio": ratio,
                "pair_ratios": pairs,
                "runs": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
