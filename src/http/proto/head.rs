//! `RequestHead`: what a protocol core hands the layers above for each request — method,
//! target parts, version, fields and framing — the same view from HTTP/1.1 (`h1::Head`, a
//! borrow of its receive buffer) and HTTP/2 (`h2::Head`, a decoded HEADERS block). `request.rs`
//! copies what the application sees out of it; nothing above `proto/` names `h1::Head`.
//!
//! Like the rest of `proto/`: no PyO3, no `crate::` (the fuzz crate includes this folder by
//! path).

/// The view of a request head every protocol core gives (`'a`: the core's buffer).
pub trait RequestHead<'a> {
    /// The method as sent.
    fn method(&self) -> &'a [u8];
    fn method_kind(&self) -> Method;
    /// The path, still percent-encoded, without the query.
    fn path(&self) -> &'a [u8];
    /// The authority of an absolute-form target (h1) or `:authority` (h2), which replaces
    /// `Host`.
    fn authority(&self) -> Option<&'a [u8]>;
    /// The query, without `?`.
    fn query(&self) -> &'a [u8];
    fn version(&self) -> Version;
    /// The fields in order, names as sent, values without OWS.
    fn headers(&self) -> impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + 'a;
    /// The first value of field `name` (case-insensitive).
    fn header(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.headers().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }
    fn framing(&self) -> Framing;
    /// The protocol the request asks to upgrade to (h1's `Upgrade`, h2's `:protocol`).
    fn upgrade(&self) -> Option<&'a [u8]>;
    /// The client accepts response trailers (`te: trailers`; h1 records it while parsing,
    /// HTTP/2 allows no other `te`).
    fn te_trailers(&self) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    Http2,
}

impl Version {
    /// `"1.0"`, `"1.1"` or `"2"`, as ASGI's `http_version` has it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "1.0",
            Version::Http11 => "1.1",
            Version::Http2 => "2",
        }
    }
}

/// The methods the server treats specially or sees often; the bytes are always in `method()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Patch,
    Options,
    Connect,
    Trace,
    Other,
}

impl Method {
    pub fn of(m: &[u8]) -> Method {
        // Methods are case-sensitive (RFC 9110 §9.1): `get` is some other method.
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"PATCH" => Method::Patch,
            b"OPTIONS" => Method::Options,
            b"CONNECT" => Method::Connect,
            b"TRACE" => Method::Trace,
            _ => Method::Other,
        }
    }
}

/// How the request body is framed, as the head declared it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (no Content-Length and no Transfer-Encoding, or `Content-Length: 0`).
    None,
    /// `Content-Length: n`, n > 0.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}


/// `%XX` decoded (a `%` not followed by two hex digits stays as is), as
/// `urllib.parse.unquote_to_bytes`.
pub fn percent_decode(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !raw.contains(&b'%') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_decoding_as_unquote_to_bytes() {
        assert_eq!(&*percent_decode(b"/a%20b"), b"/a b");
        assert_eq!(&*percent_decode(b"/%e2%82%ac"), "/€".as_bytes());
        assert_eq!(&*percent_decode(b"/100%"), b"/100%");
        assert_eq!(&*percent_decode(b"/%zz%4"), b"/%zz%4");
        assert_eq!(&*percent_decode(b"/%41%"), b"/A%");
    }
}
