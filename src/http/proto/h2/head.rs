//! A decoded request head (`Head`, the `RequestHead` view h2 gives) and trailer fields
//! (`Fields`), each copied out of h2's `http::Request` into one owned buffer, and the request
//! rules h2 leaves to its caller.
//!
//! What h2 has already done by the time a request is accepted (and how it ended the stream or
//! connection when the rule failed) is listed in `error.rs`; what is left, and checked here
//! (`Malformed`): `:path` present and in origin-form (or `*` for OPTIONS) with VCHAR only — h2
//! lets a missing `:path` through when there is no `:authority`, and `http::Uri` accepts bytes
//! h1 refuses; `:authority` on a classic CONNECT; and `host` agreeing with `:authority`.
//!
//! The view (RFC 9113 §8.3 and §8.2.3):
//! - `path()` is `:path` up to `?`, `query()` after it; a classic CONNECT's target is its
//!   `:authority`, as h1's authority-form.
//! - `authority()` is `:authority` (any userinfo dropped, as h1 does), which stands for Host;
//!   `request.rs` adds a `host` field from it when the request has none.
//! - `headers()` holds no pseudo-header, names in lowercase (HTTP/2 sends no other), in the
//!   order of each name's first appearance with a name's values together (h2's `HeaderMap`
//!   keeps no more order than that), and the `cookie` fields joined into one with `"; "`
//!   (RFC 9113 §8.2.3: "MUST be concatenated ... before being passed into a ... HTTP/1.1
//!   context").
//! - `framing()`: `Length(n)` for `content-length: n`, n > 0 (h2 checks that the DATA adds up
//!   to it); `None` for `content-length: 0` or when END_STREAM came before any body; else
//!   `Chunked`, which in HTTP/2 means "length unknown: the body ends with END_STREAM".
//! - `upgrade()` is `:protocol` (RFC 8441's extended CONNECT; `websocket` for WebSocket).
//!
//! One buffer per head holds every byte the view returns; `Conn` recycles heads, so a
//! connection in steady state allocates none for them.

use http::header::{CONTENT_LENGTH, COOKIE, HOST, TE};
use http::request::Parts;
use http::HeaderMap;

pub use super::super::head::{Framing, Method, RequestHead, Version};
use super::error::Malformed;

/// Whether a field value starts or ends with SP or HTAB.
#[inline]
fn padded(v: &[u8]) -> bool {
    matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t'))
}

/// A byte range of a `Fields` buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    #[inline]
    fn get(self, buf: &[u8]) -> &[u8] {
        &buf[self.start as usize..self.end as usize]
    }
}

/// Field lines copied out of a `HeaderMap` into one buffer (request heads and trailers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    buf: Vec<u8>,
    lines: Vec<(Span, Span)>,
}

impl Fields {
    fn clear(&mut self) {
        self.buf.clear();
        self.lines.clear();
    }

    fn push(&mut self, bytes: &[u8]) -> Span {
        let start = self.buf.len() as u32;
        self.buf.extend_from_slice(bytes);
        Span { start, end: self.buf.len() as u32 }
    }

    /// Append every field of `map`, the `cookie` values joined into one line. Whether every
    /// value is free of leading and trailing whitespace (RFC 9113 §8.2.1; checked here, where
    /// each value is read anyway).
    pub(super) fn extend_from(&mut self, map: &HeaderMap) -> bool {
        let mut cookie_done = false;
        let mut clean = true;
        for (name, value) in map {
            clean &= !padded(value.as_bytes());
            if name == COOKIE {
                if cookie_done {
                    continue;
                }
                cookie_done = true;
                let n = self.push(name.as_str().as_bytes());
                let start = self.buf.len() as u32;
                for (i, v) in map.get_all(COOKIE).iter().enumerate() {
                    if i > 0 {
                        self.buf.extend_from_slice(b"; ");
                    }
                    self.buf.extend_from_slice(v.as_bytes());
                }
                self.lines.push((n, Span { start, end: self.buf.len() as u32 }));
                continue;
            }
            let n = self.push(name.as_str().as_bytes());
            let v = self.push(value.as_bytes());
            self.lines.push((n, v));
        }
        clean
    }

    /// A new `Fields` from `map` (trailers: their values are passed on as they came).
    pub(super) fn from_map(map: &HeaderMap) -> Fields {
        let mut f = Fields::default();
        f.extend_from(map);
        f
    }

    /// The fields in order, names lowercase.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        self.lines.iter().map(|&(n, v)| (n.get(&self.buf), v.get(&self.buf)))
    }

    /// The first value of field `name` (case-insensitive).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// A request head: the pseudo-headers and the fields of one HEADERS block.
#[derive(Debug, Clone, Default)]
pub struct Head {
    /// The fields, whose buffer also holds the pseudo-headers' bytes (written first).
    f: Fields,
    method: Span,
    method_kind: Option<Method>,
    /// `:path` as sent (path and query), or a classic CONNECT's authority.
    target: Span,
    /// Where the path ends in `target` (at `?` or the end).
    path_len: u32,
    authority: Option<Span>,
    scheme: Option<Span>,
    protocol: Option<Span>,
    framing: Option<Framing>,
    /// `te: trailers` (h2 refuses any other `te`, RFC 9113 §8.2.2).
    te_trailers: bool,
}

impl Head {
    /// Fill this head from an accepted request (its buffers reused). `ended`: the stream's
    /// request side was over when it was accepted, no body byte having come.
    pub(super) fn decode(&mut self, parts: &Parts, ended: bool) -> Result<(), Malformed> {
        self.f.clear();
        let method = parts.method.as_str().as_bytes();
        let kind = Method::of(method);
        self.method = self.f.push(method);
        self.method_kind = Some(kind);

        let protocol = parts.extensions.get::<h2::ext::Protocol>().map(|p| p.as_str().as_bytes());
        let authority = parts.uri.authority().map(|a| {
            let a = a.as_str().as_bytes();
            a.iter().rposition(|&b| b == b'@').map_or(a, |i| &a[i + 1..])
        });
        let classic_connect = kind == Method::Connect && protocol.is_none();
        // h2 builds the URI from the pseudo-headers: `path_and_query` is `:path` as sent when
        // there was one; without one, `path()` is empty (`as_str()` would say "/").
        let target = if classic_connect {
            authority.ok_or(Malformed::ConnectWithoutAuthority)?
        } else {
            let t = match parts.uri.path_and_query() {
                Some(pq) if !parts.uri.path().is_empty() => pq.as_str().as_bytes(),
                _ => b"",
            };
            check_path(t, kind)?;
            t
        };
        let mut hosts = parts.headers.get_all(HOST).iter().map(|v| v.as_bytes());
        if let Some(first) = authority.or_else(|| hosts.next()) {
            if hosts.any(|h| !h.eq_ignore_ascii_case(first)) {
                return Err(Malformed::HostMismatch);
            }
        }

        self.target = self.f.push(target);
        self.path_len = target.iter().position(|&b| b == b'?').unwrap_or(target.len()) as u32;
        self.authority = authority.map(|a| self.f.push(a));
        self.scheme = parts.uri.scheme_str().map(|s| self.f.push(s.as_bytes()));
        self.protocol = protocol.map(|p| self.f.push(p));
        // h2 has checked that every content-length is the same run of digits.
        let length = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        self.framing = Some(match length {
            Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
            None if ended => Framing::None,
            None => Framing::Chunked,
        });
        self.te_trailers = parts.headers.contains_key(TE);
        if !self.f.extend_from(&parts.headers) {
            return Err(Malformed::FieldValueWhitespace);
        }
        Ok(())
    }

    pub fn method(&self) -> &[u8] {
        self.method.get(&self.f.buf)
    }

    pub fn method_kind(&self) -> Method {
        self.method_kind.unwrap_or(Method::Other)
    }

    /// `:path` as sent, path and query (a classic CONNECT's: its authority).
    pub fn target(&self) -> &[u8] {
        self.target.get(&self.f.buf)
    }

    /// The path, still percent-encoded, without the query.
    pub fn path(&self) -> &[u8] {
        &self.target()[..self.path_len as usize]
    }

    /// The query, without `?` (empty if none).
    pub fn query(&self) -> &[u8] {
        self.target().get(self.path_len as usize + 1..).unwrap_or(b"")
    }

    /// `:authority`, without userinfo.
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.map(|s| s.get(&self.f.buf))
    }

    /// `:scheme` (absent on a classic CONNECT).
    pub fn scheme(&self) -> Option<&[u8]> {
        self.scheme.map(|s| s.get(&self.f.buf))
    }

    /// `:protocol` of an extended CONNECT (RFC 8441).
    pub fn protocol(&self) -> Option<&[u8]> {
        self.protocol.map(|s| s.get(&self.f.buf))
    }

    pub fn fields(&self) -> &Fields {
        &self.f
    }

    pub fn framing(&self) -> Framing {
        self.framing.unwrap_or(Framing::None)
    }

    /// `te: trailers`: the client accepts response trailers.
    pub fn te_trailers(&self) -> bool {
        self.te_trailers
    }
}

/// `:path` for anything but a classic CONNECT (RFC 9113 §8.3.1): present, origin-form or `*`
/// for OPTIONS, and VCHAR only.
fn check_path(t: &[u8], method: Method) -> Result<(), Malformed> {
    match t {
        [] => Err(Malformed::MissingPath),
        [b'/', ..] if t.iter().all(|&b| (0x21..0x7f).contains(&b)) => Ok(()),
        [b'/', ..] => Err(Malformed::InvalidPath),
        b"*" if method == Method::Options => Ok(()),
        _ => Err(Malformed::PathForm),
    }
}

/// What h2 hands the layers above: the same view h1 gives.
impl<'a> RequestHead<'a> for &'a Head {
    fn method(&self) -> &'a [u8] {
        Head::method(self)
    }
    fn method_kind(&self) -> Method {
        Head::method_kind(self)
    }
    fn path(&self) -> &'a [u8] {
        Head::path(self)
    }
    fn authority(&self) -> Option<&'a [u8]> {
        Head::authority(self)
    }
    fn query(&self) -> &'a [u8] {
        Head::query(self)
    }
    fn version(&self) -> Version {
        Version::Http2
    }
    fn headers(&self) -> impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let f: &'a Fields = &self.f;
        f.iter()
    }
    fn framing(&self) -> Framing {
        Head::framing(self)
    }
    fn upgrade(&self) -> Option<&'a [u8]> {
        Head::protocol(self)
    }
    fn te_trailers(&self) -> bool {
        Head::te_trailers(self)
    }
}
