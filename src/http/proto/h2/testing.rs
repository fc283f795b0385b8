//! The reference driver and frame tools the unit tests and the fuzz target share (compiled for
//! `cfg(test)` and `cfg(fuzzing)` only).
//!
//! `serve` plays a server whose application asks for every body, takes (releases) each chunk at
//! once, and answers every request when its body ends: 200 with `BODY`, sent as the windows
//! allow. It checks the contract as it goes: no event for a stream the driver does not know,
//! nothing after `Closed`, `send_data` never taking more than it was given, and `Closed` once
//! EOF was fed.

use std::collections::HashMap;

use super::*;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const BODY: &[u8] = b"ok";

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// One frame's bytes.
pub fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
    f.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The client's preface, an empty SETTINGS and the ACK of the server's (so the server's
/// settings, windows included, apply from the first frame on).
pub fn client_start() -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    v.extend(frame(SETTINGS, 0, 0, &[]));
    v.extend(frame(SETTINGS, ACK, 0, &[]));
    v
}

/// An HPACK integer with an `n`-bit prefix, the prefix's other bits `flags` (RFC 7541 §5.1).
pub fn hpack_int(out: &mut Vec<u8>, flags: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A literal field without indexing, new name, no Huffman (RFC 7541 §6.2.2).
pub fn literal(block: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    block.push(0);
    hpack_int(block, 0, 7, name.len());
    block.extend_from_slice(name);
    hpack_int(block, 0, 7, value.len());
    block.extend_from_slice(value);
}

/// A header block of literals, pseudo-headers included as given.
pub fn block(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        literal(&mut b, n, v);
    }
    b
}

/// A GET of `path` on `a.test` (END_STREAM with the HEADERS).
pub fn get(id: u32, path: &[u8]) -> Vec<u8> {
    let b = block(&[(b":method", b"GET"), (b":scheme", b"https"), (b":path", path), (b":authority", b"a.test")]);
    frame(HEADERS, END_HEADERS | END_STREAM, id, &b)
}

/// A frame read back from the server's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub ty: u8,
    pub flags: u8,
    pub id: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM, or (last stream id, error code) of a GOAWAY.
    pub fn code(&self) -> Option<u32> {
        let at = match self.ty {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        Some(u32::from_be_bytes(self.payload.get(at..at + 4)?.try_into().ok()?))
    }

    pub fn last_id(&self) -> Option<u32> {
        (self.ty == GOAWAY).then(|| u32::from_be_bytes(self.payload[..4].try_into().unwrap()) & 0x7fff_ffff)
    }
}

/// The whole frames in `bytes` (the server writes no preface).
pub fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= 9 {
        let h = &bytes[at..at + 9];
        let len = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
        if bytes.len() - at - 9 < len {
            break;
        }
        let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        out.push(Frame { ty: h[3], flags: h[4], id, payload: bytes[at + 9..at + 9 + len].to_vec() });
        at += 9 + len;
    }
    out
}

/// What `serve` saw and wrote.
#[derive(Debug, Default)]
pub struct Served {
    pub events: Vec<Event>,
    pub out: Vec<u8>,
    /// The most output that waited untaken after a round of polls.
    pub max_pending: usize,
}

/// The reference application's state per open stream: the response bytes not yet taken.
#[derive(Default)]
struct App {
    open: HashMap<StreamId, Option<&'static [u8]>>,
    closed: bool,
}

impl App {
    fn answer(&mut self, c: &mut Conn, id: StreamId) {
        let connect = c.head(id).is_some_and(|h| h.method_kind() == head::Method::Connect);
        let fields: [(&[u8], &[u8]); 1] = [(b"content-type", b"text/plain")];
        if c.respond(id, 200, fields, false).is_err() {
            return;
        }
        let body = if connect { &b""[..] } else { BODY };
        self.open.insert(id, Some(body));
        self.send(c, id);
    }

    fn send(&mut self, c: &mut Conn, id: StreamId) {
        let Some(Some(rest)) = self.open.get(&id).copied() else { return };
        match c.send_data(id, rest, true) {
            Ok(n) => {
                assert!(n <= rest.len(), "send_data took {n} of {}", rest.len());
                if n == rest.len() {
                    self.open.remove(&id);
                } else {
                    self.open.insert(id, Some(&rest[n..]));
                }
            }
            Err(_) => {
                self.open.remove(&id);
            }
        }
    }

    fn on(&mut self, c: &mut Conn, ev: &Event) {
        assert!(!self.closed, "{ev:?} after Closed");
        match *ev {
            Event::Request { id } => {
                let h = c.head(id).expect("a head for a new request");
                inspect(h);
                self.open.insert(id, None);
                c.want_body(id);
            }
            Event::Refused { id, .. } => assert!(!self.open.contains_key(&id)),
            Event::Data { id, ref data, end } => {
                assert_eq!(self.open.get(&id), Some(&None), "data for {id} not waiting for a body");
                c.release(id, data.len());
                if end {
                    self.answer(c, id);
                }
            }
            Event::Trailers { id } => {
                assert_eq!(self.open.get(&id), Some(&None), "trailers for {id} not waiting for a body");
                assert!(c.trailers(id).is_some());
                self.answer(c, id);
            }
            Event::Writable { id } => {
                assert!(matches!(self.open.get(&id), Some(Some(_))), "writable {id} with nothing to send");
                self.send(c, id);
            }
            Event::Reset { id, .. } => {
                assert!(self.open.remove(&id).is_some(), "reset of {id}, not open");
                assert!(c.head(id).is_none());
            }
            Event::Closed { .. } => self.closed = true,
        }
    }
}

/// Touch everything a head exposes (the fuzz target wants no panic anywhere in it).
fn inspect(h: &Head) {
    use super::super::head::RequestHead;
    let v = h;
    let _ = (v.method(), v.method_kind(), v.path(), v.query(), v.authority(), v.version().as_str());
    let _ = (v.framing(), v.upgrade(), v.header(b"host"), h.scheme(), h.target());
    assert!(v.path().len() <= h.target().len());
    for (name, _) in v.headers() {
        assert!(!name.is_empty() && !name.starts_with(b":"));
    }
}

/// Serve `input`, fed in pieces whose sizes `split` chooses (EOF after the last), polling and
/// answering after each piece and taking the output.
pub fn serve(input: &[u8], mut split: impl FnMut() -> usize, settings: &Settings) -> Served {
    let mut c = Conn::new(settings);
    let mut app = App::default();
    let mut s = Served::default();
    let mut at = 0;
    while at < input.len() {
        let n = split().clamp(1, input.len() - at);
        c.feed(&input[at..at + n]);
        at += n;
        run(&mut c, &mut app, &mut s);
    }
    c.feed_eof();
    run(&mut c, &mut app, &mut s);
    assert!(app.closed, "no Closed after EOF");
    assert!(c.poll().is_none() && !c.wants_read());
    s
}

fn run(c: &mut Conn, app: &mut App, s: &mut Served) {
    loop {
        while let Some(ev) = c.poll() {
            app.on(c, &ev);
            s.events.push(ev);
        }
        let before = s.out.len();
        c.take_output(&mut s.out);
        s.max_pending = s.max_pending.max(s.out.len() - before);
        if !c.needs_poll() {
            break;
        }
    }
}
