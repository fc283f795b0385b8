//! The request head: httparse for the grammar, then the rules httparse leaves to its caller.
//!
//! httparse is configured with every leniency off (`strict()` names each one), and for requests
//! it already refuses: whitespace between a field name and its colon, obs-fold, more than one SP
//! between the parts of the request line, control bytes other than HTAB in values, and versions
//! other than 1.0/1.1. What it leaves to us, and this module checks:
//! - the request-target: httparse accepts any UTF-8; we want VCHAR only and one of the four
//!   forms of RFC 9112 §3.2, each with the method it belongs to;
//! - 505 versus 400: httparse calls both `HTTP/2.0` and `FOO/1.1` a version error;
//! - the framing and smuggling rules of RFC 9112 §6 (Transfer-Encoding, Content-Length), Host
//!   (§3.2), and the meaning of Connection, Expect and Upgrade.
//!
//! Nothing is copied: the head stays in the receive buffer and `Meta` holds offsets into it
//! (its field vector is cleared and refilled, so a connection allocates it once). httparse's
//! header slots live on the stack, uninitialised (`MaybeUninit`, safe API), so a request costs
//! no allocation and no zeroing.

use std::mem::MaybeUninit;

use super::error::Error;
use super::syntax::{is_host, is_tchar, is_token, list, parse_decimal, trim_ows};
use super::Limits;
pub use super::super::head::{Framing, Method, RequestHead, Version};

/// The most header slots a head can use, whatever `Limits::max_headers` says: the slots are a
/// stack array (32 bytes each), so this bounds the stack the parser takes (8 KiB).
pub const MAX_HEADERS_CAP: usize = 256;

/// A byte range of the head.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// The range `part` takes in `whole` (`part` must be a subslice of `whole`).
    fn of(whole: &[u8], part: &[u8]) -> Span {
        let start = part.as_ptr() as usize - whole.as_ptr() as usize;
        Span { start, end: start + part.len() }
    }

    #[inline]
    fn get(self, bytes: &[u8]) -> &[u8] {
        &bytes[self.start..self.end]
    }
}

/// What the parser learnt about the current request; offsets are into the head's bytes.
#[derive(Debug)]
pub struct Meta {
    method: Span,
    pub(super) method_kind: Method,
    target: Span,
    pub(super) version: Version,
    fields: Vec<(Span, Span)>,
    pub(super) framing: Framing,
    pub(super) keep_alive: bool,
    pub(super) expect_continue: bool,
    /// `TE: trailers` (RFC 9110 §10.1.4): the client accepts trailer fields. HTTP/1.1 only.
    pub(super) te_trailers: bool,
    pub(super) upgrade: Option<Span>,
}

impl Default for Meta {
    fn default() -> Meta {
        Meta {
            method: Span::default(),
            method_kind: Method::Other,
            target: Span::default(),
            version: Version::Http11,
            fields: Vec::new(),
            framing: Framing::None,
            keep_alive: false,
            expect_continue: false,
            te_trailers: false,
            upgrade: None,
        }
    }
}

/// httparse with each leniency named and off. The response-only switches do not touch request
/// parsing; they are listed so a reader need not know that.
fn strict() -> httparse::ParserConfig {
    let mut c = httparse::ParserConfig::default();
    c.allow_multiple_spaces_in_request_line_delimiters(false)
        .allow_space_before_first_header_name(false)
        .ignore_invalid_headers_in_requests(false)
        .allow_spaces_after_header_name_in_responses(false)
        .allow_obsolete_multiline_headers_in_responses(false)
        .allow_multiple_spaces_in_response_status_delimiters(false)
        .ignore_invalid_headers_in_responses(false);
    c
}

/// Parse a complete head (request line through the empty line, as `Scan` found it) into `m`.
pub fn parse(head: &[u8], limits: &Limits, m: &mut Meta) -> Result<(), Error> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS_CAP];
    let mut req = httparse::Request::new(&mut []);
    let n = limits.max_headers.min(MAX_HEADERS_CAP);
    match strict().parse_request_with_uninit_headers(&mut req, head, &mut slots[..n]) {
        Ok(httparse::Status::Complete(len)) if len == head.len() => {}
        // The scanner found the empty line, so httparse must agree; if it does not, the head
        // is one we do not understand.
        Ok(_) => return Err(Error::InvalidRequestLine),
        Err(e) => return Err(classify(e, head)),
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(Error::InvalidRequestLine);
    };
    m.method = Span::of(head, method.as_bytes());
    m.method_kind = Method::of(method.as_bytes());
    m.target = Span::of(head, target.as_bytes());
    m.version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    check_target(target.as_bytes(), m.method_kind)?;

    let mut hosts = 0u32;
    let mut host = &b""[..];
    let mut cl = ContentLength::default();
    let mut te = TransferEncoding::default();
    let (mut close, mut keep_alive, mut conn_upgrade, mut expect, mut trailers) = (false, false, false, false, false);
    m.upgrade = None;
    m.fields.clear();
    for h in req.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        m.fields.push((Span::of(head, name), Span::of(head, value)));
        // Dispatch on length first: most fields are none of these and cost one compare.
        match name.len() {
            // A two-letter name is rare: this arm costs other fields nothing.
            2 if name.eq_ignore_ascii_case(b"te") => trailers |= list(value).any(|t| t.eq_ignore_ascii_case(b"trailers")),
            4 if name.eq_ignore_ascii_case(b"host") => {
                hosts += 1;
                host = value;
            }
            6 if name.eq_ignore_ascii_case(b"expect") => expect |= value.eq_ignore_ascii_case(b"100-continue"),
            7 if name.eq_ignore_ascii_case(b"upgrade") => m.upgrade = m.upgrade.or(Some(Span::of(head, value))),
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in list(value) {
                    close |= token.eq_ignore_ascii_case(b"close");
                    keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                    conn_upgrade |= token.eq_ignore_ascii_case(b"upgrade");
                }
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => cl.add(value),
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => te.add(value),
            _ => {}
        }
    }

    // Framing first: these are the smuggling rules, and the ones worth naming in a log.
    m.framing = if te.seen {
        if cl.seen {
            return Err(Error::ContentLengthAndTransferEncoding);
        }
        if m.version == Version::Http10 {
            return Err(Error::TransferEncodingHttp10);
        }
        te.verdict()?;
        Framing::Chunked
    } else if cl.seen {
        match cl.verdict()? {
            0 => Framing::None,
            n => Framing::Length(n),
        }
    } else {
        Framing::None
    };
    match (m.version, hosts) {
        (Version::Http11, 0) => return Err(Error::MissingHost),
        (_, 2..) => return Err(Error::DuplicateHost),
        _ if !is_host(host) => return Err(Error::InvalidHost),
        _ => {}
    }
    if let (Framing::Length(n), Some(max)) = (m.framing, limits.max_body) {
        if n > max {
            return Err(Error::BodyTooLarge);
        }
    }
    let v11 = m.version == Version::Http11;
    m.keep_alive = !close && (v11 || keep_alive);
    // RFC 9110 §10.1.1: ignore 100-continue from HTTP/1.0; nothing to continue without a body.
    m.expect_continue = v11 && expect && m.framing != Framing::None;
    // Trailers need chunked framing, which an HTTP/1.0 client cannot read.
    m.te_trailers = v11 && trailers;
    // RFC 9110 §7.8: Upgrade counts only with `Connection: upgrade`, and never in HTTP/1.0.
    if !(v11 && conn_upgrade) {
        m.upgrade = None;
    }
    Ok(())
}

/// Content-Length over every field line and list element (RFC 9110 §8.6). Identical values
/// are accepted as one: the RFC allows it ("MAY ... replace ... with a single instance") and
/// some proxies fold duplicates into `42, 42`; h11 and hyper accept them too. Any element that
/// is not 1*DIGIT, or that differs, makes the message invalid.
#[derive(Default)]
struct ContentLength {
    seen: bool,
    value: Option<u64>,
    error: Option<Error>,
}

impl ContentLength {
    fn add(&mut self, v: &[u8]) {
        self.seen = true;
        for e in list(v) {
            let err = match (parse_decimal(e), self.value) {
                (None, _) => Error::InvalidContentLength,
                (Some(n), None) => {
                    self.value = Some(n);
                    continue;
                }
                (Some(n), Some(m)) if n == m => continue,
                (Some(_), Some(_)) => Error::ContentLengthMismatch,
            };
            self.error = self.error.or(Some(err));
        }
    }

    fn verdict(&self) -> Result<u64, Error> {
        match (self.error, self.value) {
            (Some(e), _) => Err(e),
            (None, Some(n)) => Ok(n),
            (None, None) => Err(Error::InvalidContentLength),
        }
    }
}

/// Transfer-Encoding over every field line, in order (RFC 9112 §6.1): the final coding must be
/// `chunked`, applied once; any coding before it is one we do not implement (501).
#[derive(Default)]
struct TransferEncoding {
    seen: bool,
    last_chunked: bool,
    chunked: u32,
    other: bool,
}

impl TransferEncoding {
    fn add(&mut self, v: &[u8]) {
        self.seen = true;
        // Empty list elements are ignored, as RFC 9110 §5.6.1 asks of recipients.
        for coding in list(v).filter(|c| !c.is_empty()) {
            self.last_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if self.last_chunked {
                self.chunked += 1;
            } else {
                self.other = true;
            }
        }
    }

    fn verdict(&self) -> Result<(), Error> {
        if !self.last_chunked {
            Err(Error::TransferEncodingNotChunked)
        } else if self.chunked > 1 {
            Err(Error::ChunkedTwice)
        } else if self.other {
            Err(Error::TransferCodingNotImplemented)
        } else {
            Ok(())
        }
    }
}

/// The request-target (RFC 9112 §3.2): VCHAR only, and a form that fits the method.
fn check_target(t: &[u8], method: Method) -> Result<(), Error> {
    // httparse has already refused every byte below 0x21 and DEL (its URI table), so what is
    // left to refuse is its one leniency, UTF-8: `is_ascii` (word at a time) is the VCHAR test.
    if !t.is_ascii() {
        return Err(Error::InvalidTarget);
    }
    let ok = match (method, t) {
        (Method::Connect, _) => is_authority_form(t),
        (_, [b'/', ..]) => true,
        (Method::Options, b"*") => true,
        _ => is_absolute_form(t),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::TargetForm)
    }
}

/// authority-form: `uri-host ":" port`, the port not empty (CONNECT has no default port).
fn is_authority_form(t: &[u8]) -> bool {
    let Some(colon) = t.iter().rposition(|&b| b == b':') else { return false };
    let (host, port) = (&t[..colon], &t[colon + 1..]);
    // A ':' left in the host is only allowed inside an IP-literal's brackets.
    let bracketed = host.starts_with(b"[") && host.ends_with(b"]");
    !host.is_empty()
        && (bracketed || !host.contains(&b':'))
        && is_host(host)
        && !port.is_empty()
        && port.iter().all(u8::is_ascii_digit)
}

/// absolute-form: `scheme "://" ...`. The grammar allows any absolute-URI, but every URI an
/// HTTP server serves (http, https, ws, wss) has an authority, and requiring `//` keeps an
/// authority-form target (`host:443`) from passing as a URI with scheme `host`.
fn is_absolute_form(t: &[u8]) -> bool {
    let Some(colon) = t.iter().position(|&b| b == b':') else { return false };
    let scheme = &t[..colon];
    scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        && t[colon + 1..].starts_with(b"//")
}

/// Name the rule behind an httparse error (the error path only: it re-reads the head).
fn classify(e: httparse::Error, head: &[u8]) -> Error {
    use httparse::Error as H;
    let line_end = head.windows(2).position(|w| w == b"\r\n").unwrap_or(head.len());
    let line = &head[..line_end];
    match e {
        H::Token | H::Version | H::NewLine => {
            if let Some(err) = classify_request_line(line) {
                return err;
            }
            if e == H::NewLine {
                Error::InvalidHeaderValue
            } else {
                Error::InvalidRequestLine
            }
        }
        H::HeaderName => {
            // The first field line whose name is not a token: was it only a space before ':'?
            for field in head[line_end..].split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l)) {
                let name = match field.iter().position(|&b| b == b':') {
                    Some(i) => &field[..i],
                    None if field.is_empty() => continue,
                    None => field,
                };
                if !is_token(name) {
                    let trimmed = trim_ows(name);
                    let only_trailing = trimmed.len() < name.len() && name.starts_with(trimmed);
                    return if only_trailing && is_token(trimmed) {
                        Error::SpaceBeforeColon
                    } else {
                        Error::InvalidHeaderName
                    };
                }
            }
            Error::InvalidHeaderName
        }
        H::HeaderValue => Error::InvalidHeaderValue,
        H::TooManyHeaders => Error::TooManyHeaders,
        H::Status => Error::InvalidRequestLine,
    }
}

/// `method SP target SP HTTP/D.D`: which part is wrong, if any.
fn classify_request_line(line: &[u8]) -> Option<Error> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Some(Error::InvalidRequestLine);
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Some(Error::InvalidMethod);
    }
    if target.is_empty() {
        return Some(Error::InvalidRequestLine);
    }
    if !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return Some(Error::InvalidTarget);
    }
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit() => {
            // RFC 9110 §2.5 says a 1.x with a higher minor SHOULD be served as 1.1; httparse
            // refuses it, and we answer 505 rather than guess.
            if version != b"HTTP/1.0" && version != b"HTTP/1.1" {
                Some(Error::VersionNotSupported)
            } else {
                None
            }
        }
        _ => Some(Error::InvalidVersion),
    }
}

/// Validate a complete trailer section (field lines and the final CRLF) with the head's field
/// rules. Trailers are checked and dropped: neither ASGI nor WSGI has a place for them, and
/// RFC 9110 §6.5.1 lets a recipient discard them.
pub fn check_trailers(section: &[u8], limits: &Limits) -> Result<(), Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS_CAP];
    let n = limits.max_headers.min(MAX_HEADERS_CAP);
    match httparse::parse_headers(section, &mut slots[..n]) {
        Ok(httparse::Status::Complete((len, _))) if len == section.len() => Ok(()),
        Err(httparse::Error::TooManyHeaders) => Err(Error::TooManyHeaders),
        _ => Err(Error::InvalidTrailer),
    }
}

/// A parsed request head, borrowed from the connection's receive buffer.
#[derive(Clone, Copy)]
pub struct Head<'a> {
    bytes: &'a [u8],
    meta: &'a Meta,
}

impl<'a> Head<'a> {
    pub(super) fn new(bytes: &'a [u8], meta: &'a Meta) -> Head<'a> {
        Head { bytes, meta }
    }

    pub fn method(&self) -> &'a [u8] {
        self.meta.method.get(self.bytes)
    }

    pub fn method_kind(&self) -> Method {
        self.meta.method_kind
    }

    /// The request-target as sent (origin-form `/p?q`, absolute-form, authority-form or `*`).
    pub fn target(&self) -> &'a [u8] {
        self.meta.target.get(self.bytes)
    }

    /// The path of the target, still percent-encoded: origin-form up to `?`; for absolute-form
    /// the path after the authority (`/` if empty); the whole target for `*` and authority-form.
    pub fn path(&self) -> &'a [u8] {
        let t = self.target();
        let t = match t {
            [b'/', ..] => t,
            _ if self.meta.method_kind == Method::Connect || t == b"*" => return t,
            _ => {
                // scheme "://" authority path-abempty ["?" query]
                let after = t.windows(3).position(|w| w == b"://").map_or(0, |i| i + 3);
                match t[after..].iter().position(|&b| b == b'/' || b == b'?') {
                    Some(i) if t[after + i] == b'/' => &t[after + i..],
                    _ => return b"/",
                }
            }
        };
        t.split(|&b| b == b'?').next().unwrap_or(t)
    }

    /// The authority of an absolute-form target (`http://host:port/p` → `host:port`, any
    /// userinfo dropped); `None` for the other forms. RFC 9112 §3.2.2: when the target has
    /// one, the server MUST ignore the Host field and use it.
    pub fn authority(&self) -> Option<&'a [u8]> {
        let t = self.target();
        if matches!(t, [b'/', ..]) || self.meta.method_kind == Method::Connect || t == b"*" {
            return None;
        }
        let after = t.windows(3).position(|w| w == b"://")? + 3;
        let rest = &t[after..];
        let end = rest.iter().position(|&b| b == b'/' || b == b'?' || b == b'#').unwrap_or(rest.len());
        let authority = &rest[..end];
        Some(authority.iter().rposition(|&b| b == b'@').map_or(authority, |i| &authority[i + 1..]))
    }

    /// The query of the target, without `?` (empty if none).
    pub fn query(&self) -> &'a [u8] {
        let t = self.target();
        match t.iter().position(|&b| b == b'?') {
            Some(i) if self.meta.method_kind != Method::Connect => &t[i + 1..],
            _ => b"",
        }
    }

    pub fn version(&self) -> Version {
        self.meta.version
    }

    /// The field lines in order, names as sent (not lowercased), values without OWS.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let bytes = self.bytes;
        self.meta.fields.iter().map(move |&(n, v)| (n.get(bytes), v.get(bytes)))
    }

    /// The first value of field `name` (case-insensitive).
    pub fn header(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.headers().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// How the body is framed.
    pub fn framing(&self) -> Framing {
        self.meta.framing
    }

    /// Whether the client asked to keep the connection (the server may still close it).
    pub fn keep_alive(&self) -> bool {
        self.meta.keep_alive
    }

    /// `Expect: 100-continue` on an HTTP/1.1 request with a body.
    pub fn expect_continue(&self) -> bool {
        self.meta.expect_continue
    }

    /// `TE: trailers` on an HTTP/1.1 request: the client accepts trailer fields.
    pub fn te_trailers(&self) -> bool {
        self.meta.te_trailers
    }

    /// The `Upgrade` value when the request asks for one (`Connection: upgrade`, HTTP/1.1).
    pub fn upgrade(&self) -> Option<&'a [u8]> {
        self.meta.upgrade.map(|s| s.get(self.bytes))
    }

    /// The head's bytes as received, request line through the empty line.
    pub fn raw(&self) -> &'a [u8] {
        self.bytes
    }
}

/// What h1 hands the layers above: the same view h2 gives.
impl<'a> RequestHead<'a> for Head<'a> {
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
        Head::version(self)
    }
    fn headers(&self) -> impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        Head::headers(self)
    }
    fn framing(&self) -> Framing {
        Head::framing(self)
    }
    fn upgrade(&self) -> Option<&'a [u8]> {
        Head::upgrade(self)
    }
    fn te_trailers(&self) -> bool {
        Head::te_trailers(self)
    }
}

/// Two heads are equal when their bytes are (what tests and the fuzz targets compare).
impl PartialEq for Head<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.raw() == other.raw()
    }
}

impl Eq for Head<'_> {}

impl std::fmt::Debug for Head<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Head")
            .field("method", &String::from_utf8_lossy(self.method()))
            .field("target", &String::from_utf8_lossy(self.target()))
            .field("version", &self.version())
            .field("framing", &self.framing())
            .field("keep_alive", &self.keep_alive())
            .finish()
    }
}
