//! What an HTTP/2 request costs the server's protocol core, two ways (issue 22: "the `h2`
//! crate driven by the loop through in-memory buffers and a waker we own, or a core of our own
//! over an HPACK crate — measure, choose, and say why").
//!
//! 1. **Record**: an `h2` client and an `h2` server joined by in-memory buffers, REQUESTS
//!    GETs with IN_FLIGHT open at a time (h2load's `-m`), one connection. What the client
//!    writes is kept chunk by chunk (one chunk per client flush: ~IN_FLIGHT requests, and the
//!    WINDOW_UPDATEs it sends as responses arrive).
//! 2. **Replay to the `h2` server**: a fresh `h2::server::Connection` over an in-memory
//!    transport is fed the chunks one at a time; after each, it accepts the new streams and
//!    answers each with a 200, two headers and a 13-byte body, and its output is taken. This
//!    is the work a sans-I/O wrapper around `h2` does per request, without the application.
//! 3. **Replay to the least an own core could do**: frame headers, HPACK decoding into an
//!    owned header list (`loona-hpack`), the response's HPACK encoding and its two frames. No
//!    stream states, no flow-control accounting beyond a counter, no error paths: a lower
//!    bound, not a design.
//!
//! Each replay is timed (µs per request); under `valgrind --tool=callgrind
//! --toggle-collect='h2_core::replay_h2'` (or `replay_min`) it is counted in instructions.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes waiting to be read.
#[derive(Default)]
struct Buf {
    data: VecDeque<u8>,
}

/// One end of an in-memory connection: reads from `inbox`, writes to `outbox`.
struct End {
    inbox: Rc<RefCell<Buf>>,
    outbox: Rc<RefCell<Vec<u8>>>,
}

impl AsyncRead for End {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut b = self.inbox.borrow_mut();
        if b.data.is_empty() {
            return Poll::Pending;
        }
        let n = buf.remaining().min(b.data.len());
        let (a, c) = b.data.as_slices();
        let from_a = n.min(a.len());
        buf.put_slice(&a[..from_a]);
        if n > from_a {
            buf.put_slice(&c[..n - from_a]);
        }
        b.data.drain(..n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for End {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.outbox.borrow_mut().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Poll once with a waker that does nothing: the caller polls again after feeding bytes.
fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(f).poll(&mut cx)
}

/// An `h2` server over an in-memory transport, answering every request at once.
struct Server {
    inbox: Rc<RefCell<Buf>>,
    outbox: Rc<RefCell<Vec<u8>>>,
    hs: Option<h2::server::Handshake<End, Bytes>>,
    conn: Option<h2::server::Connection<End, Bytes>>,
    served: usize,
    body: Bytes,
}

impl Server {
    fn new() -> Server {
        let inbox = Rc::new(RefCell::new(Buf::default()));
        let outbox = Rc::new(RefCell::new(Vec::new()));
        let end = End {
            inbox: inbox.clone(),
            outbox: outbox.clone(),
        };
        let hs = h2::server::Builder::new()
            .max_concurrent_streams(100)
            .handshake(end);
        Server {
            inbox,
            outbox,
            hs: Some(hs),
            conn: None,
            served: 0,
            body: Bytes::from_static(b"Hello, world!"),
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.inbox.borrow_mut().data.extend(bytes);
        self.drive();
    }

    fn drive(&mut self) {
        if let Some(hs) = self.hs.as_mut() {
            match poll(hs) {
                Poll::Ready(Ok(c)) => {
                    self.conn = Some(c);
                    self.hs = None;
                }
                Poll::Ready(Err(e)) => panic!("handshake: {e}"),
                Poll::Pending => return,
            }
        }
        let conn = self.conn.as_mut().unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            match conn.poll_accept(&mut cx) {
                Poll::Ready(Some(Ok((_req, mut respond)))) => {
                    let resp = http::Response::builder()
                        .status(200)
                        .header("content-type", "text/plain")
                        .header("content-length", "13")
                        .body(())
                        .unwrap();
                    let mut send = respond.send_response(resp, false).unwrap();
                    send.send_data(self.body.clone(), true).unwrap();
                    self.served += 1;
                }
                Poll::Ready(Some(Err(e))) => panic!("accept: {e}"),
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        // Flush what the responses queued.
        let _ = conn.poll_closed(&mut cx);
    }

    /// How many bytes the server wrote since the last call; the buffer keeps its capacity
    /// (as the transport's write buffer would), so the replay pays no regrowth.
    fn discard_out(&mut self) -> usize {
        let mut out = self.outbox.borrow_mut();
        let n = out.len();
        out.clear();
        n
    }

    fn take_out(&mut self) -> Vec<u8> {
        std::mem::take(&mut *self.outbox.borrow_mut())
    }
}

/// Phase 1: an h2 client against a server, N requests, M in flight; the client's bytes by flush.
fn record(n: usize, m: usize) -> Vec<Vec<u8>> {
    let mut server = Server::new();
    let c_in = Rc::new(RefCell::new(Buf::default()));
    let c_out = Rc::new(RefCell::new(Vec::new()));
    let end = End {
        inbox: c_in.clone(),
        outbox: c_out.clone(),
    };
    let mut hs = Box::pin(h2::client::Builder::new().handshake::<End, Bytes>(end));
    let mut cx = Context::from_waker(Waker::noop());
    let (mut send, mut conn) = loop {
        if let Poll::Ready(r) = hs.as_mut().poll(&mut cx) {
            break r.unwrap();
        }
    };
    let mut chunks = Vec::new();
    let mut in_flight: Vec<h2::client::ResponseFuture> = Vec::new();
    let mut bodies: Vec<h2::RecvStream> = Vec::new();
    let (mut sent, mut done) = (0, 0);
    while done < n {
        while sent < n && in_flight.len() + bodies.len() < m {
            if send.poll_ready(&mut cx).is_pending() {
                break;
            }
            let req = http::Request::builder()
                .uri("http://127.0.0.1:8000/")
                .header("user-agent", "h2load nghttp2/1.64.0")
                .body(())
                .unwrap();
            let (fut, _) = send.send_request(req, true).unwrap();
            in_flight.push(fut);
            sent += 1;
        }
        let _ = Pin::new(&mut conn).poll(&mut cx);
        let out = std::mem::take(&mut *c_out.borrow_mut());
        if !out.is_empty() {
            chunks.push(out.clone());
            server.feed(&out);
        } else {
            server.drive();
        }
        let back = server.take_out();
        c_in.borrow_mut().data.extend(back);
        let _ = Pin::new(&mut conn).poll(&mut cx);
        let mut i = 0;
        while i < in_flight.len() {
            match Pin::new(&mut in_flight[i]).poll(&mut cx) {
                Poll::Ready(Ok(resp)) => {
                    bodies.push(resp.into_body());
                    drop(in_flight.swap_remove(i));
                }
                Poll::Ready(Err(e)) => panic!("response: {e}"),
                Poll::Pending => i += 1,
            }
        }
        let mut j = 0;
        while j < bodies.len() {
            let b = &mut bodies[j];
            let mut finished = false;
            loop {
                match b.poll_data(&mut cx) {
                    Poll::Ready(Some(Ok(d))) => {
                        let _ = b.flow_control().release_capacity(d.len());
                    }
                    Poll::Ready(Some(Err(e))) => panic!("body: {e}"),
                    Poll::Ready(None) => {
                        finished = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if finished {
                drop(bodies.swap_remove(j));
                done += 1;
            } else {
                j += 1;
            }
        }
    }
    // What the client sent after its last request (window updates), too.
    let _ = Pin::new(&mut conn).poll(&mut cx);
    let out = std::mem::take(&mut *c_out.borrow_mut());
    if !out.is_empty() {
        chunks.push(out);
    }
    assert_eq!(server.served, n);
    chunks
}

/// Phase 2: the chunks to a fresh `h2` server; (requests answered, bytes written).
#[inline(never)]
fn replay_h2(chunks: &[Vec<u8>]) -> (usize, usize) {
    let mut s = Server::new();
    let mut out_bytes = 0usize;
    for c in chunks {
        s.feed(c);
        out_bytes += s.discard_out();
    }
    (s.served, out_bytes)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: usize| {
        args.get(i)
            .map(|s| s.parse().expect("a number"))
            .unwrap_or(default)
    };
    let (n, m, reps) = (arg(1, 100_000), arg(2, 10), arg(3, 5));
    let chunks = record(n, m);
    let total: usize = chunks.iter().map(|c| c.len()).sum();
    println!(
        "{n} requests, {m} in flight: {} client chunks, {:.1} bytes per request",
        chunks.len(),
        total as f64 / n as f64
    );
    for _ in 0..reps {
        let t = Instant::now();
        let (served, out) = replay_h2(&chunks);
        let h2_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        assert_eq!(served, n);
        let t = Instant::now();
        let (served_min, out_min) = replay_min(&chunks);
        let min_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        assert_eq!(served_min, n);
        println!(
            "h2 crate {h2_us:.3} us/request ({:.1} bytes out)   least own core {min_us:.3} us/request ({:.1} bytes out)",
            out as f64 / n as f64,
            out_min as f64 / n as f64
        );
    }
}

/// The least an own core could do for the same bytes: frame headers, HPACK decode into an
/// owned head, the response's HPACK encode and its two frames. No stream states, no flow
/// control bookkeeping beyond a counter, no error paths: a lower bound, not a design.
#[inline(never)]
fn replay_min(chunks: &[Vec<u8>]) -> (usize, usize) {
    let mut dec = loona_hpack::Decoder::new();
    let mut enc = loona_hpack::Encoder::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
    let (mut served, mut out_bytes, mut preface) = (0usize, 0usize, false);
    let mut window: i64 = 65_535;
    let mut block = Vec::with_capacity(64);
    for c in chunks {
        pending.extend_from_slice(c);
        let mut at = 0;
        if !preface {
            at = 24;
            preface = true;
        }
        while pending.len() - at >= 9 {
            let h = &pending[at..at + 9];
            let len = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
            if pending.len() - at - 9 < len {
                break;
            }
            let (ty, flags) = (h[3], h[4]);
            let sid = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            let payload = &pending[at + 9..at + 9 + len];
            match ty {
                0x4 if flags & 1 == 0 => out.extend_from_slice(&[0, 0, 0, 4, 1, 0, 0, 0, 0]),
                0x8 => {
                    let inc = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff;
                    if sid == 0 {
                        window += inc as i64;
                    }
                }
                0x1 => {
                    let mut head: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(8);
                    dec.decode_with_cb(payload, |n, v| head.push((n.into_owned(), v.into_owned())))
                        .unwrap();
                    std::hint::black_box(&head);
                    block.clear();
                    enc.encode_into(
                        [
                            (&b":status"[..], &b"200"[..]),
                            (b"content-type", b"text/plain"),
                            (b"content-length", b"13"),
                        ],
                        &mut block,
                    )
                    .unwrap();
                    let l = block.len();
                    out.extend_from_slice(&[(l >> 16) as u8, (l >> 8) as u8, l as u8, 1, 4]);
                    out.extend_from_slice(&sid.to_be_bytes());
                    out.extend_from_slice(&block);
                    out.extend_from_slice(&[0, 0, 13, 0, 1]);
                    out.extend_from_slice(&sid.to_be_bytes());
                    out.extend_from_slice(b"Hello, world!");
                    window -= 13;
                    served += 1;
                }
                _ => {}
            }
            at += 9 + len;
        }
        pending.drain(..at);
        out_bytes += out.len();
        out.clear();
    }
    std::hint::black_box(window);
    (served, out_bytes)
}
