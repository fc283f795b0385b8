//! Tests of the core through `Conn`, as a driver uses it: against h2's own client joined to it
//! by in-memory buffers (a real peer: `Peer`), and against hand-made frames where a test needs
//! bytes no well-behaved client sends (`Raw`).
//!
//! The client's futures are polled with a no-op waker: `Peer::pump` moves bytes both ways and
//! polls the client's connection until neither side has anything more to say, so no test
//! depends on timing.

mod attacks;
mod errors;
mod flow;
mod hpack;
mod requests;
mod shutdown;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderMap, Request};

use super::io::{Io, Pipe};
use super::testing::*;
use super::*;

/// Poll `f` once.
pub fn ready<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    match Pin::new(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

pub fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// Our server and h2's client, joined.
pub struct Peer {
    pub server: Conn,
    pipe: Pipe,
    pub client: h2::client::SendRequest<Bytes>,
    conn: h2::client::Connection<Io, Bytes>,
}

impl Peer {
    pub fn new() -> Peer {
        Peer::with(&Settings::default(), h2::client::Builder::new())
    }

    pub fn with(settings: &Settings, client: h2::client::Builder) -> Peer {
        let (mut pipe, io) = Pipe::new(usize::MAX);
        let mut hs = Box::pin(client.handshake::<Io, Bytes>(io));
        let mut server = Conn::new(settings);
        for _ in 0..100 {
            if let Poll::Ready(r) = hs.as_mut().poll(&mut cx()) {
                let (client, conn) = r.expect("client handshake");
                let mut p = Peer { server, pipe, client, conn };
                assert_eq!(p.pump(), []);
                return p;
            }
            let mut up = Vec::new();
            pipe.take_output(&mut up);
            server.feed(&up);
            if let Some(ev) = server.poll() {
                panic!("event during the handshake: {ev:?}");
            }
            let mut down = Vec::new();
            server.take_output(&mut down);
            pipe.feed(&down);
        }
        panic!("no handshake");
    }

    /// Move bytes both ways until neither side has more to say; the server's events.
    pub fn pump(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            let _ = Pin::new(&mut self.conn).poll(&mut cx());
            let mut up = Vec::new();
            self.pipe.take_output(&mut up);
            self.server.feed(&up);
            while let Some(ev) = self.server.poll() {
                events.push(ev);
            }
            let mut down = Vec::new();
            self.server.take_output(&mut down);
            self.pipe.feed(&down);
            if up.is_empty() && down.is_empty() && !self.server.needs_poll() {
                return events;
            }
        }
    }

    /// Move what the client has to say into the server, without polling the server.
    pub fn pump_client(&mut self) {
        let _ = Pin::new(&mut self.conn).poll(&mut cx());
        let mut up = Vec::new();
        self.pipe.take_output(&mut up);
        self.server.feed(&up);
    }

    /// Send a request (`end`: without a body); its response future and body sender.
    pub fn request(&mut self, req: Request<()>, end: bool) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        self.client.send_request(req, end).expect("send_request")
    }

    pub fn get(&mut self, path: &str) -> h2::client::ResponseFuture {
        let req = Request::get(format!("https://a.test{path}")).body(()).unwrap();
        self.request(req, true).0
    }
}

/// A response, read to its end through the client (pumping as it goes).
pub struct Got {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<HeaderMap>,
}

impl Peer {
    /// Wait for `resp` and read its body and trailers, releasing credit as the body comes.
    pub fn read(&mut self, resp: &mut h2::client::ResponseFuture) -> Got {
        let mut r = None;
        for _ in 0..100 {
            if let Some(x) = ready(resp) {
                r = Some(x.expect("a response"));
                break;
            }
            self.pump();
        }
        let (parts, mut body) = r.expect("a response came").into_parts();
        let mut got = Got { status: parts.status.as_u16(), headers: parts.headers, body: Vec::new(), trailers: None };
        for _ in 0..10_000 {
            match body.poll_data(&mut cx()) {
                Poll::Ready(Some(Ok(d))) => {
                    let _ = body.flow_control().release_capacity(d.len());
                    got.body.extend_from_slice(&d);
                    continue;
                }
                Poll::Ready(Some(Err(e))) => panic!("body: {e}"),
                Poll::Ready(None) => {
                    for _ in 0..100 {
                        match body.poll_trailers(&mut cx()) {
                            Poll::Ready(t) => {
                                got.trailers = t.expect("trailers");
                                return got;
                            }
                            Poll::Pending => {
                                self.pump();
                            }
                        }
                    }
                    panic!("no trailers nor end");
                }
                Poll::Pending => {
                    self.pump();
                }
            }
        }
        panic!("the body never ended");
    }
}

/// Our server fed hand-made frames.
pub struct Raw {
    pub c: Conn,
    pub out: Vec<u8>,
}

impl Raw {
    /// A server that read the client's preface, SETTINGS and the ACK of its own.
    pub fn new(settings: &Settings) -> Raw {
        let mut r = Raw { c: Conn::new(settings), out: Vec::new() };
        assert_eq!(r.send(&client_start()), []);
        r
    }

    /// Feed `bytes`, poll every event, take the output (kept in `out`).
    pub fn send(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.c.feed(bytes);
        self.run()
    }

    pub fn run(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            while let Some(ev) = self.c.poll() {
                events.push(ev);
            }
            self.c.take_output(&mut self.out);
            if !self.c.needs_poll() {
                return events;
            }
        }
    }

    /// The frames written so far.
    pub fn frames(&self) -> Vec<Frame> {
        frames(&self.out)
    }

    pub fn rst(&self, id: u32) -> Option<Reason> {
        self.frames().iter().find(|f| f.ty == RST_STREAM && f.id == id).and_then(|f| f.code()).map(Reason::from)
    }

    pub fn goaway(&self) -> Option<(u32, Reason)> {
        self.frames().iter().rfind(|f| f.ty == GOAWAY).map(|f| (f.last_id().unwrap(), Reason::from(f.code().unwrap())))
    }

    /// Answer stream `id` with 200 and `body`, whole.
    pub fn answer(&mut self, id: u32, body: &[u8]) {
        self.c.respond(id, 200, [], body.is_empty()).expect("respond");
        if !body.is_empty() {
            assert_eq!(self.c.send_data(id, body, true), Ok(body.len()));
        }
    }
}

/// The body bytes of `events`' `Data` for stream `id`, and whether one had `end`.
pub fn body_of(events: &[Event], id: u32) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    let mut ended = false;
    for e in events {
        if let Event::Data { id: i, data, end } = e {
            if *i == id {
                assert!(!ended, "data after end");
                body.extend_from_slice(data);
                ended |= *end;
            }
        }
    }
    (body, ended)
}
