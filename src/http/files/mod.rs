//! Static files served by the server itself (`--static-path-route/-mount/-expires`, granian's
//! flags), before the application is called and without it.
//!
//! The contract with the connection (one call per request head, before the interface's
//! dispatch):
//! ```text
//! match mounts.answer(&view) {            view: method, raw path, one field by name
//!     None         => not mine: dispatch to the application as usual
//!     Some(answer) => write answer.status + answer.fields, framed with answer.length;
//!                     then answer.body: Empty, or File { file, offset, len } (sendfile on
//!                     cleartext, reads through TLS; nothing for HEAD or 304)
//! }
//! ```
//! Everything under a mounted route is answered here (a missing file is a 404, not the
//! application's), as granian does. No PyO3 and no `crate::` in this folder: `path` (the
//! resolver, fuzzed) and `decide` (conditionals, ranges, codings) are pure; `fsio` does the
//! opening, beneath the root, and the syscalls.

pub mod decide;
pub mod fsio;
pub mod path;

use std::fs::File;
use std::io;
use std::path::Path;

use decide::{Coding, Conditions, Decision, Validators};
use fsio::Root;

/// What `answer` reads of a request head.
pub trait RequestView {
    fn method(&self) -> &[u8];
    /// The path, still percent-encoded, without the query.
    fn path(&self) -> &[u8];
    /// The first field of that (lowercase) name.
    fn header(&self, name: &[u8]) -> Option<&[u8]>;
}

/// One mounted directory.
#[derive(Debug)]
pub struct Mount {
    route: Vec<u8>,
    root: Root,
    /// `Cache-Control: max-age=N` (`None`: no such field; `--static-path-expires 0`).
    cache_control: Option<Vec<u8>>,
}

/// Every mount of a server, the longest route first.
#[derive(Debug, Default)]
pub struct Mounts(Vec<Mount>);

/// The response to a static request.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub fields: Vec<(&'static [u8], Vec<u8>)>,
    /// The framing length (Content-Length, also on a HEAD's head).
    pub length: u64,
    pub body: Body,
}

#[derive(Debug)]
pub enum Body {
    Empty,
    File { file: File, offset: u64, len: u64 },
}

impl Mounts {
    /// `(route, directory, expires seconds)` for each mount; an error names the bad one.
    pub fn new(list: &[(String, String, u64)]) -> Result<Mounts, String> {
        let mut mounts = Vec::with_capacity(list.len());
        for (route, dir, expires) in list {
            let norm = path::normalize_route(route).ok_or_else(|| format!("--static-path-route {route:?}: a route is a path starting with '/' (no '.', '..', '?', '#', '%' or spaces)"))?;
            let root = Root::open(Path::new(dir)).map_err(|e| format!("--static-path-mount {dir:?}: {e}"))?;
            let cache_control = (*expires > 0).then(|| format!("max-age={expires}").into_bytes());
            if mounts.iter().any(|m: &Mount| m.route == norm) {
                return Err(format!("--static-path-route {route:?}: given twice"));
            }
            mounts.push(Mount { route: norm, root, cache_control });
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.route.len()));
        Ok(Mounts(mounts))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The answer to a request under a mounted route, or `None` (not mine).
    pub fn answer(&self, req: &impl RequestView) -> Option<Answer> {
        let (mount, rest) = self.0.iter().find_map(|m| path::strip_route(&m.route, req.path()).map(|r| (m, r)))?;
        Some(answer(mount, rest, req))
    }
}

fn bare(status: u16, fields: Vec<(&'static [u8], Vec<u8>)>) -> Answer {
    Answer { status, fields, length: 0, body: Body::Empty }
}

fn answer(mount: &Mount, rest: &[u8], req: &impl RequestView) -> Answer {
    let get = match req.method() {
        b"GET" => true,
        b"HEAD" => false,
        _ => return bare(405, vec![(b"allow", b"GET, HEAD".to_vec())]),
    };
    let Ok(name) = path::resolve(rest) else { return bare(404, Vec::new()) };
    let Some((file, meta, coding)) = open_best(&mount.root, &name, req.header(b"accept-encoding")) else { return bare(404, Vec::new()) };
    let v = Validators::new(meta.size, meta.mtime_s, meta.mtime_ns, coding);
    let c = Conditions {
        get,
        if_match: req.header(b"if-match"),
        if_none_match: req.header(b"if-none-match"),
        if_modified_since: req.header(b"if-modified-since"),
        if_unmodified_since: req.header(b"if-unmodified-since"),
        range: req.header(b"range"),
        if_range: req.header(b"if-range"),
    };
    let decision = decide::decide(&c, &v, meta.size);
    let mut fields: Vec<(&'static [u8], Vec<u8>)> = Vec::with_capacity(8);
    // §15.4.5: a 304 carries the validators and caching fields a 200 would.
    if decision != Decision::PreconditionFailed {
        fields.push((b"etag", v.etag.into_bytes()));
        fields.push((b"last-modified", httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(v.modified)).into_bytes()));
        if let Some(cc) = &mount.cache_control {
            fields.push((b"cache-control", cc.clone()));
        }
        fields.push((b"vary", b"accept-encoding".to_vec()));
    }
    match decision {
        Decision::PreconditionFailed => bare(412, fields),
        Decision::NotModified => bare(304, fields),
        Decision::Unsatisfiable => {
            fields.push((b"content-range", format!("bytes */{}", meta.size).into_bytes()));
            bare(416, fields)
        }
        Decision::Full | Decision::Partial { .. } => {
            fields.push((b"content-type", content_type(&name)));
            if coding != Coding::Identity {
                fields.push((b"content-encoding", coding.suffix().1.to_vec()));
            }
            fields.push((b"accept-ranges", b"bytes".to_vec()));
            let (status, offset, len) = match decision {
                Decision::Partial { start, end } => {
                    fields.push((b"content-range", format!("bytes {start}-{end}/{}", meta.size).into_bytes()));
                    (206, start, end - start + 1)
                }
                _ => (200, 0, meta.size),
            };
            let body = if get && len > 0 { Body::File { file, offset, len } } else { Body::Empty };
            Answer { status, fields, length: len, body }
        }
    }
}

/// The best acceptable representation of `name` that exists as a regular file: a `.br`/`.gz`
/// sibling in the order `Accept-Encoding` prefers, else the file itself.
fn open_best(root: &Root, name: &[u8], accept: Option<&[u8]>) -> Option<(File, fsio::Meta, Coding)> {
    // The name itself must be a servable file: a sibling never stands in for a missing one.
    let plain = open_regular(root, name).ok()??;
    for coding in decide::codings(accept) {
        let mut sibling = name.to_vec();
        sibling.extend_from_slice(coding.suffix().0);
        if let Ok(Some((f, m))) = open_regular(root, &sibling) {
            return Some((f, m, coding));
        }
    }
    Some((plain.0, plain.1, Coding::Identity))
}

fn open_regular(root: &Root, name: &[u8]) -> io::Result<Option<(File, fsio::Meta)>> {
    let f = root.open_beneath(name)?;
    let m = fsio::meta(&f)?;
    Ok(m.regular.then_some((f, m)))
}

/// `Content-Type` from the name's extension; text gets `charset=utf-8`, the unknown
/// `application/octet-stream`.
fn content_type(name: &[u8]) -> Vec<u8> {
    let name = String::from_utf8_lossy(name);
    match mime_guess::from_path(&*name).first_raw() {
        Some(t) if t.starts_with("text/") || t == "application/javascript" || t == "application/json" => format!("{t}; charset=utf-8").into_bytes(),
        Some(t) => t.as_bytes().to_vec(),
        None => b"application/octet-stream".to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Req<'a>(&'a [u8], &'a [u8], Vec<(&'a [u8], &'a [u8])>);
    impl RequestView for Req<'_> {
        fn method(&self) -> &[u8] {
            self.0
        }
        fn path(&self) -> &[u8] {
            self.1
        }
        fn header(&self, name: &[u8]) -> Option<&[u8]> {
            self.2.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        }
    }

    fn mounts() -> (std::path::PathBuf, Mounts) {
        let base = std::env::temp_dir().join(format!("ringloop-mounts-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("s/dir")).unwrap();
        std::fs::write(base.join("s/a.css"), b"body{}").unwrap();
        std::fs::write(base.join("s/a.css.br"), b"BR").unwrap();
        std::fs::write(base.join("s/only.gz"), b"GZ").unwrap();
        let m = Mounts::new(&[("/static".into(), base.join("s").to_string_lossy().into(), 60)]).unwrap();
        (base, m)
    }

    fn field<'a>(a: &'a Answer, name: &[u8]) -> Option<&'a [u8]> {
        a.fields.iter().find(|(n, _)| *n == name).map(|(_, v)| &v[..])
    }

    #[test]
    fn routes_and_answers() {
        let (base, m) = mounts();
        assert!(m.answer(&Req(b"GET", b"/other", vec![])).is_none());
        let a = m.answer(&Req(b"GET", b"/static/a.css", vec![])).unwrap();
        assert_eq!((a.status, a.length), (200, 6));
        assert_eq!(field(&a, b"content-type"), Some(&b"text/css; charset=utf-8"[..]));
        assert_eq!(field(&a, b"cache-control"), Some(&b"max-age=60"[..]));
        assert!(matches!(a.body, Body::File { offset: 0, len: 6, .. }));
        let h = m.answer(&Req(b"HEAD", b"/static/a.css", vec![])).unwrap();
        assert!(matches!(h.body, Body::Empty) && h.length == 6);
        assert_eq!(m.answer(&Req(b"POST", b"/static/a.css", vec![])).unwrap().status, 405);
        assert_eq!(m.answer(&Req(b"GET", b"/static/dir", vec![])).unwrap().status, 404);
        assert_eq!(m.answer(&Req(b"GET", b"/static/missing", vec![])).unwrap().status, 404);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn precompressed_siblings() {
        let (base, m) = mounts();
        let a = m.answer(&Req(b"GET", b"/static/a.css", vec![(b"accept-encoding", b"gzip, br")])).unwrap();
        assert_eq!((field(&a, b"content-encoding"), a.length), (Some(&b"br"[..]), 2));
        assert_eq!(field(&a, b"content-type"), Some(&b"text/css; charset=utf-8"[..]));
        assert_eq!(field(&a, b"vary"), Some(&b"accept-encoding"[..]));
        let g = m.answer(&Req(b"GET", b"/static/a.css", vec![(b"accept-encoding", b"gzip")])).unwrap();
        assert_eq!((field(&g, b"content-encoding"), g.length), (None, 6));
        // A sibling without its plain file is not served in its place.
        assert_eq!(m.answer(&Req(b"GET", b"/static/only", vec![(b"accept-encoding", b"gzip")])).unwrap().status, 404);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn conditional_and_ranges() {
        let (base, m) = mounts();
        let a = m.answer(&Req(b"GET", b"/static/a.css", vec![])).unwrap();
        let etag = field(&a, b"etag").unwrap().to_vec();
        let n = m.answer(&Req(b"GET", b"/static/a.css", vec![(b"if-none-match", &etag)])).unwrap();
        assert_eq!(n.status, 304);
        assert_eq!(field(&n, b"etag"), Some(&etag[..]));
        let r = m.answer(&Req(b"GET", b"/static/a.css", vec![(b"range", b"bytes=1-2")])).unwrap();
        assert_eq!((r.status, r.length, field(&r, b"content-range")), (206, 2, Some(&b"bytes 1-2/6"[..])));
        let u = m.answer(&Req(b"GET", b"/static/a.css", vec![(b"range", b"bytes=9-")])).unwrap();
        assert_eq!((u.status, field(&u, b"content-range")), (416, Some(&b"bytes */6"[..])));
        assert_eq!(m.answer(&Req(b"GET", b"/static/a.css", vec![(b"if-match", b"\"nope\"")])).unwrap().status, 412);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn bad_mounts_name_the_flag() {
        let e = Mounts::new(&[("static".into(), "/tmp".into(), 0)]).unwrap_err();
        assert!(e.starts_with("--static-path-route"), "{e}");
        let e = Mounts::new(&[("/s".into(), "/nonexistent/dir".into(), 0)]).unwrap_err();
        assert!(e.starts_with("--static-path-mount"), "{e}");
    }
}
