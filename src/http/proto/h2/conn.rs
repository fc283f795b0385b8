//! The HTTP/2 server connection as a state machine over h2: bytes in, events out; responses
//! in, bytes out. No I/O.
//!
//! ```text
//!   Handshaking ──preface + SETTINGS──▶ Open ──GOAWAY sent and streams done / error / EOF──▶ Closed
//! ```
//! `poll` drives h2 only as far as what it was given: the connection (reading every frame fed,
//! accepting new streams) when it was fed or its waker fired, then each stream whose waker
//! fired (see `wake.rs`); events wait in a queue and leave one per call. `take_output` drives
//! the connection with reads off, so that h2 encodes what the calls queued, and hands over the
//! bytes.
//!
//! Stream ids are the client's (odd, increasing, never reused on a connection), so an id names
//! one request for the connection's whole life.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use h2::server::{Connection, Handshake, SendResponse};
use h2::{Reason, RecvStream};
use http::{Request, Response, StatusCode};

use super::error::{ConnError, SendError};
use super::event::{Event, StreamId};
use super::fields::header_map;
use super::guard::{Guard, Violation};
use super::head::{Fields, Head, Method};
use super::io::{Io, Pipe};
use super::stream::Stream;
use super::wake::Woken;
use super::Settings;

enum State {
    Handshaking(Handshake<Io, Bytes>),
    Open(Connection<Io, Bytes>),
    Closed,
}

/// The most recycled heads a connection keeps.
const SPARE_HEADS: usize = 16;

/// The rounds of stream polls one `poll` makes before it returns (a stream woken while being
/// polled is polled again in the next round); what is left waits for the next call
/// (`needs_poll`).
const MAX_ROUNDS: usize = 8;

pub struct Conn {
    settings: Settings,
    state: State,
    pipe: Pipe,
    woken: Arc<Woken>,
    conn_waker: Waker,
    /// The connection must be polled: input was fed, output taken, or a call queued frames.
    dirty: bool,
    streams: HashMap<StreamId, Stream>,
    events: VecDeque<Event>,
    /// The woken stream ids of the current round (kept for its allocation).
    round: Vec<StreamId>,
    spare: Vec<Head>,
    /// See `Settings::max_early_resets`.
    early_resets: usize,
    shutdown_requested: bool,
    /// The frame rules h2 enforces with the wrong code (`guard.rs`), checked before h2 reads.
    guard: Guard,
    /// A frame broke one of them while h2 was still handshaking: the GOAWAY once it is open.
    violation: Option<Violation>,
    /// An end we chose (a limit of ours, `abort`): what `Closed` reports, as h2 calls a
    /// user-initiated GOAWAY a clean end.
    our_end: Option<ConnError>,
    /// The connection ended; `Closed` is delivered once the streams' `Reset`s are out.
    ending: Option<Option<ConnError>>,
    /// Our keep-alive PINGs (h2's user pings, taken when the handshake is done), and whether
    /// one is out without its ACK (`send_ping`).
    pings: Option<h2::PingPong>,
    ping_out: bool,
    /// Bytes fed so far (`received`: whether the peer said anything since a given time).
    received: u64,
    /// Stream polls made (the tests check that idle streams cost none).
    #[cfg(test)]
    pub(super) stream_polls: usize,
}

impl Conn {
    pub fn new(settings: &Settings) -> Conn {
        let (pipe, io) = Pipe::new(settings.max_pending_output);
        let woken = Woken::new();
        Conn {
            settings: settings.clone(),
            state: State::Handshaking(settings.builder().handshake(io)),
            pipe,
            conn_waker: woken.conn_waker(),
            woken,
            // h2 queues its SETTINGS at once: the first `take_output` has them.
            dirty: true,
            streams: HashMap::new(),
            events: VecDeque::new(),
            round: Vec::new(),
            spare: Vec::new(),
            early_resets: 0,
            shutdown_requested: false,
            guard: Guard::new(settings.max_empty_frames),
            violation: None,
            our_end: None,
            ending: None,
            pings: None,
            ping_out: false,
            received: 0,
            #[cfg(test)]
            stream_polls: 0,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    // --- input

    /// Append received bytes. Ignored once closed or after EOF, and from the first frame that
    /// breaks a rule of `guard.rs` on (the connection then ends with that rule's code; a flood
    /// of empty frames, `Settings::max_empty_frames`, is one of them).
    pub fn feed(&mut self, data: &[u8]) {
        if self.is_closed() || data.is_empty() || self.violation.is_some() {
            return;
        }
        self.received += data.len() as u64;
        match self.guard.scan(data) {
            Ok(()) => self.pipe.feed(data),
            Err((n, v)) => {
                self.pipe.feed(&data[..n]);
                self.violation = Some(v);
                if let State::Open(_) = self.state {
                    self.refuse(v);
                }
            }
        }
        self.dirty = true;
    }

    /// GOAWAY with the violated rule's code: the frames before it were h2's to read, the rest
    /// of the input is dropped.
    fn refuse(&mut self, v: Violation) {
        if let State::Open(c) = &mut self.state {
            c.abrupt_shutdown(v.reason);
            if self.our_end.is_none() {
                self.our_end = Some(ConnError::ours(v.reason, v.rule));
            }
        }
    }

    /// The peer will send nothing more.
    pub fn feed_eof(&mut self) {
        self.pipe.feed_eof();
        self.dirty = true;
    }

    /// Whether the driver should read the socket now: false once closed, after EOF, and while
    /// `Settings::max_buffered_input` bytes wait unread (the output is full: invariant 1).
    pub fn wants_read(&self) -> bool {
        !self.is_closed() && !self.pipe.eof() && self.pipe.unread() < self.settings.max_buffered_input
    }

    // --- events

    /// The next thing to act on, or `None` when nothing moved (feed more, act on a stream, or
    /// take the output).
    pub fn poll(&mut self) -> Option<Event> {
        for _ in 0..MAX_ROUNDS {
            if let Some(ev) = self.events.pop_front() {
                return Some(ev);
            }
            if self.woken.take_conn() || self.dirty {
                self.dirty = false;
                self.drive(true);
            }
            let mut round = std::mem::take(&mut self.round);
            self.woken.take_streams(&mut round);
            for &id in &round {
                self.poll_stream(id);
            }
            let polled = !round.is_empty();
            self.round = round;
            if polled || !self.events.is_empty() {
                continue;
            }
            if let Some(error) = self.ending.take() {
                for (id, s) in self.streams.drain() {
                    drop(s);
                    self.events.push_back(Event::Reset { id, reason: Reason::CANCEL });
                }
                self.events.push_back(Event::Closed { error });
                continue;
            }
            return None;
        }
        self.events.pop_front()
    }

    /// Whether `poll` has something to say (after `take_output`, which can open send
    /// capacity, or when a `poll` stopped at its bound).
    pub fn needs_poll(&self) -> bool {
        let connection = !self.is_closed() && (self.dirty || self.woken.any());
        !self.events.is_empty() || self.ending.is_some() || connection
    }

    /// Poll h2's connection: the handshake, then frames (if `read`) and new streams; on its
    /// end, record it.
    fn drive(&mut self, read: bool) {
        self.pipe.set_reading(read);
        let waker = self.conn_waker.clone();
        let mut cx = Context::from_waker(&waker);
        loop {
            match &mut self.state {
                State::Handshaking(hs) => match Pin::new(hs).poll(&mut cx) {
                    Poll::Ready(Ok(mut c)) => {
                        self.pings = c.ping_pong();
                        self.state = State::Open(c);
                        if let Some(v) = self.violation {
                            self.refuse(v);
                        } else if self.shutdown_requested {
                            self.graceful_shutdown();
                        }
                    }
                    Poll::Ready(Err(e)) => return self.end(Some(ConnError::from_h2(&e))),
                    Poll::Pending => return,
                },
                State::Open(c) => match c.poll_accept(&mut cx) {
                    Poll::Ready(Some(Ok((req, respond)))) => self.accept(req, respond),
                    Poll::Ready(Some(Err(e))) => return self.end(Some(ConnError::from_h2(&e))),
                    Poll::Ready(None) => return self.end(None),
                    Poll::Pending => break,
                },
                State::Closed => return,
            }
        }
        // The frames read may hold the ACK of our PING (h2 matched it to its payload).
        if self.ping_out {
            if let Some(p) = &mut self.pings {
                if p.poll_pong(&mut cx).is_ready() {
                    self.ping_out = false;
                }
            }
        }
    }

    fn end(&mut self, error: Option<ConnError>) {
        // Dropping h2's connection wakes every stream still held (they see the end).
        self.state = State::Closed;
        self.ending = Some(self.our_end.take().or(error));
    }

    fn accept(&mut self, req: Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        let id = respond.stream_id().as_u32();
        let (parts, body) = req.into_parts();
        let mut head = self.spare.pop().unwrap_or_default();
        if let Err(rule) = head.decode(&parts, body.is_end_stream()) {
            respond.send_reset(Reason::PROTOCOL_ERROR);
            self.recycle(head);
            self.events.push_back(Event::Refused { id, rule });
            self.count_early_reset();
            return;
        }
        // Its first poll registers the waker that tells of a reset.
        let waker = self.woken.stream_waker(id);
        waker.wake();
        self.streams.insert(id, Stream::new(head, body, respond, waker));
        self.events.push_back(Event::Request { id });
    }

    fn poll_stream(&mut self, id: StreamId) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        #[cfg(test)]
        {
            self.stream_polls += 1;
        }
        if let Err(reason) = s.poll(id, &mut self.events) {
            let early = s.respond.is_some();
            // A stream whose `Request` the caller has not seen yet ends unseen.
            if !self.forget(id, false) {
                self.events.push_back(Event::Reset { id, reason });
            }
            if early {
                self.count_early_reset();
            }
        }
    }

    /// A stream ended without its response: past `max_early_resets` (net of the responses
    /// that ended), GOAWAY ENHANCE_YOUR_CALM.
    fn count_early_reset(&mut self) {
        self.early_resets += 1;
        if self.early_resets > self.settings.max_early_resets && self.our_end.is_none() {
            if let State::Open(c) = &mut self.state {
                c.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                self.our_end =
                    Some(ConnError::ours(Reason::ENHANCE_YOUR_CALM, "too many streams reset before their response"));
                self.dirty = true;
            }
        }
    }

    /// Drop our side of a stream (h2 resets it if the request body is still coming: RST_STREAM
    /// NO_ERROR after a complete response, CANCEL otherwise), and its events not yet delivered:
    /// no event names a stream after it ended. `answered`: its response ended. Whether its
    /// `Request` was among the events dropped (the caller never saw the stream).
    fn forget(&mut self, id: StreamId, answered: bool) -> bool {
        if let Some(s) = self.streams.remove(&id) {
            let Stream { head, .. } = s;
            self.recycle(head);
        }
        if answered {
            self.early_resets = self.early_resets.saturating_sub(1);
        }
        self.dirty = true;
        let mut unseen = false;
        self.events.retain(|e| match *e {
            Event::Request { id: i } if i == id => {
                unseen = true;
                false
            }
            Event::Data { id: i, .. } | Event::Trailers { id: i } | Event::Writable { id: i } => i != id,
            _ => true,
        });
        unseen
    }

    fn recycle(&mut self, head: Head) {
        if self.spare.len() < SPARE_HEADS {
            self.spare.push(head);
        }
    }

    // --- the request

    /// A stream's request head, from `Request` until the stream ends.
    pub fn head(&self, id: StreamId) -> Option<&Head> {
        self.streams.get(&id).map(|s| &s.head)
    }

    /// A stream's request trailers, after `Trailers`.
    pub fn trailers(&self, id: StreamId) -> Option<&Fields> {
        self.streams.get(&id)?.trailers.as_ref()
    }

    /// Deliver the stream's request body (`Data`, `Trailers`) from now on. Until then it waits
    /// in h2, within the stream's window.
    pub fn want_body(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.want_body {
                s.want_body = true;
                s.waker.wake();
            }
        }
    }

    /// The application took `n` body bytes of the stream: give the client that much credit
    /// again (h2 sends the WINDOW_UPDATE once enough is owed). More than was delivered counts
    /// as all of it; an unknown stream's credit was returned when it ended.
    pub fn release(&mut self, id: StreamId, n: usize) {
        if let Some(s) = self.streams.get_mut(&id) {
            let n = n.min(s.unreleased);
            if n > 0 && s.body.flow_control().release_capacity(n).is_ok() {
                s.unreleased -= n;
                self.dirty = true;
            }
        }
    }

    // --- the response

    /// The response head. `end`: there is no body (the stream's response is complete).
    pub fn respond<'f>(
        &mut self,
        id: StreamId,
        status: u16,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end: bool,
    ) -> Result<(), SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::UnknownStream)?;
        let respond = s.respond.as_mut().ok_or(SendError::AlreadyResponded)?;
        if !(200..1000).contains(&status) {
            return Err(SendError::InvalidStatus);
        }
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).map_err(|_| SendError::InvalidStatus)?;
        *response.headers_mut() = header_map(fields)?;
        let send = respond.send_response(response, end).map_err(|_| SendError::StreamClosed)?;
        s.respond = None;
        s.no_body = s.head.method_kind() == Method::Head || status == 204 || status == 304;
        if !end {
            s.send = Some(send);
            // Its waker now waits on the send side.
            s.waker.wake();
        }
        self.dirty = true;
        if end {
            self.forget(id, true);
        }
        Ok(())
    }

    /// An interim response head (100..=199 but 101; 103 Early Hints), before `respond`.
    pub fn informational<'f>(
        &mut self,
        id: StreamId,
        status: u16,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<(), SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::UnknownStream)?;
        let respond = s.respond.as_mut().ok_or(SendError::AlreadyResponded)?;
        if !(100..200).contains(&status) || status == 101 {
            return Err(SendError::InvalidStatus);
        }
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).map_err(|_| SendError::InvalidStatus)?;
        *response.headers_mut() = header_map(fields)?;
        respond.send_informational(response).map_err(|_| SendError::StreamClosed)?;
        self.dirty = true;
        Ok(())
    }

    /// Send body bytes: as many as the stream may send now (its and the connection's window,
    /// at most `max_send_buffer` queued), returned; the caller keeps the rest and calls again
    /// on `Writable { id }`. `end` ends the response once the last byte is taken. A response
    /// that has no body (to HEAD, 204, 304) takes every byte and sends none.
    pub fn send_data(&mut self, id: StreamId, data: &[u8], end: bool) -> Result<usize, SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::UnknownStream)?;
        let Some(send) = s.send.as_mut() else {
            return Err(if s.respond.is_some() { SendError::NotResponding } else { SendError::UnknownStream });
        };
        let taken = if s.no_body { data.len() } else { 0 };
        let data = if s.no_body { &[][..] } else { data };
        let n = if data.is_empty() {
            0
        } else {
            // Ask for exactly what is offered (h2 counts what it has queued on top): capacity
            // that this stream will not use goes back to the others.
            if send.capacity() < data.len() {
                send.reserve_capacity(data.len());
            }
            send.capacity().min(data.len())
        };
        let last = end && n == data.len();
        if n > 0 || last {
            send.send_data(Bytes::copy_from_slice(&data[..n]), last).map_err(|_| SendError::StreamClosed)?;
        }
        if n < data.len() {
            s.blocked = true;
            s.waker.wake();
        }
        self.dirty = true;
        if last {
            self.forget(id, true);
        }
        Ok(n.max(taken))
    }

    /// Request-style trailers after the body; they end the response.
    pub fn send_trailers<'f>(
        &mut self,
        id: StreamId,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<(), SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::UnknownStream)?;
        let Some(send) = s.send.as_mut() else {
            return Err(if s.respond.is_some() { SendError::NotResponding } else { SendError::UnknownStream });
        };
        send.send_trailers(header_map(fields)?).map_err(|_| SendError::StreamClosed)?;
        self.forget(id, true);
        Ok(())
    }

    /// Reset the stream (RST_STREAM `reason`) and forget it. No event follows.
    pub fn reset(&mut self, id: StreamId, reason: Reason) {
        if let Some(s) = self.streams.get_mut(&id) {
            match (&mut s.respond, &mut s.send) {
                (Some(r), _) => r.send_reset(reason),
                (None, Some(send)) => send.send_reset(reason),
                (None, None) => {}
            }
            self.forget(id, false);
        }
    }

    // --- the connection

    /// GOAWAY: no new streams (after one round trip: h2 sends GOAWAY with the highest id first,
    /// then the last id it accepted once a PING came back), the open ones finish, then
    /// `Closed`.
    pub fn graceful_shutdown(&mut self) {
        match &mut self.state {
            State::Open(c) => c.graceful_shutdown(),
            State::Handshaking(_) => self.shutdown_requested = true,
            State::Closed => {}
        }
        self.dirty = true;
    }

    /// GOAWAY `reason` now: every open stream ends (`Reset`), then `Closed`.
    pub fn abort(&mut self, reason: Reason) {
        if self.our_end.is_none() && !self.is_closed() {
            self.our_end = Some(ConnError::ours(reason, "aborted by the server"));
        }
        match &mut self.state {
            State::Open(c) => c.abrupt_shutdown(reason),
            State::Handshaking(_) => self.end(None),
            State::Closed => {}
        }
        self.dirty = true;
    }

    /// Send a PING of ours (keep-alive: is the peer still there?); `false` if one is already
    /// out without its ACK, or the connection is not open. The ACK clears `ping_out()` during
    /// a later `poll`: a driver that finds it still set after its timeout ends the connection.
    pub fn send_ping(&mut self) -> bool {
        if self.ping_out || !matches!(self.state, State::Open(_)) {
            return false;
        }
        let Some(p) = &mut self.pings else { return false };
        if p.send_ping(h2::Ping::opaque()).is_err() {
            return false;
        }
        self.ping_out = true;
        self.dirty = true;
        true
    }

    /// How many bytes were fed so far: a driver that sees it unchanged knows the peer has been
    /// silent (keep-alive PINGs go to a silent peer only).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// A PING of ours is out and its ACK has not come yet.
    pub fn ping_out(&self) -> bool {
        self.ping_out
    }

    /// Append the bytes to write to `out`: what h2 queued since the last call, encoded now.
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        loop {
            self.drive(false);
            let full = self.pipe.output_full();
            self.pipe.take_output(out);
            if !full {
                break;
            }
        }
        if self.pipe.unread() > 0 && !self.is_closed() {
            // Input waited behind a full output: read it at the next poll.
            self.dirty = true;
        }
    }

    /// Whether the connection has ended (`Closed` is delivered or waiting in `poll`).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Open streams (requests not yet answered or reset): zero means idle.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }
}
