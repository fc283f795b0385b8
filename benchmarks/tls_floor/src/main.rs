//! The TLS floor of the HTTPS benchmark: the least an HTTPS server can do per handshake and
//! per request with ringloop's TLS stack.
//!
//!     tls_floor CERT KEY [PORT]
//!
//! One thread, non-blocking sockets on epoll (mio), rustls with the aws-lc-rs provider and the
//! configuration ringloop's server builds (src/tls/config.rs): TLS 1.3 and 1.2, the provider's
//! key-exchange groups, AES-128-GCM suites first with the server's order deciding, ALPN
//! `http/1.1`, a 16 Ki-entry session cache and one stateless session ticket per TLS 1.3
//! handshake (rustls's aws-lc-rs ticketer, as ringloop without a shared secret). Every request
//! gets the response ringloop-asgi gives the suite's plaintext app, byte for byte but for the
//! `server` value (the same length): `200 OK`, `content-type: text/plain`,
//! `content-length: 13`, `date`, `Hello, world!`. HTTP/1.1 keeps the connection unless the
//! request says `Connection: close`; HTTP/1.0 closes it unless it says `keep-alive` (what
//! `openssl s_time -www` sends); pipelined requests are answered in one record. A close
//! (asked for, the client's close_notify, or its EOF) sends close_notify, then closes.
//! A request that is not HTTP/1.x, has `Transfer-Encoding`, or a head over 64 KiB, ends the
//! connection (close_notify, no response): the suite never sends one.
//!
//! Speaks the benchmark's server protocol (benchmarks/harness.py): listens on 127.0.0.1:PORT
//! (0 or none: a free port), prints `{"type": "ready", "pid": …, "port": …}` on stdout once it
//! accepts, and serves until stdin closes (then says `{"type": "done"}`) or SIGTERM.
//!
//! Its server CPU per request is the kernel's TCP work plus rustls and aws-lc's: the part of
//! an HTTPS server no implementation on this TLS stack goes below.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerSessionMemoryCache;
use rustls::version::{TLS12, TLS13};
use rustls::{ServerConfig, ServerConnection, SupportedCipherSuite};

const LISTENER: Token = Token(0);
const STDIN: Token = Token(1);
/// Connection `i` has token `FIRST_CONN + i`.
const FIRST_CONN: usize = 2;
/// A request head longer than this ends the connection.
const MAX_HEAD: usize = 64 * 1024;
/// One read from a socket: a TLS record is at most ~16.7 KiB, a few fit.
const READ_BUF: usize = 64 * 1024;
/// As ringloop's `SESSION_CACHE` (src/tls/config.rs).
const SESSION_CACHE: usize = 16 * 1024;
const BODY: &[u8] = b"Hello, world!";

/// ringloop's rustls configuration (src/tls/config.rs `build` with no client certificates,
/// no `--ssl-ciphers`, no minimum version, ALPN `http/1.1`, no shared ticket secret).
fn config(cert: &str, key: &str) -> Result<Arc<ServerConfig>, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{cert}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{cert}: no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    // ringloop's `prefer_aes128`: AES-128-GCM first, the order within each cipher kept.
    let rank = |s: &SupportedCipherSuite| {
        u8::from(
            !s.suite()
                .as_str()
                .unwrap_or_default()
                .contains("AES_128_GCM"),
        )
    };
    provider.cipher_suites.sort_by_key(rank);
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&TLS13, &TLS12])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.ignore_client_order = true;
    cfg.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    cfg.ticketer =
        rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| format!("session tickets: {e}"))?;
    cfg.send_tls13_tickets = 1;
    Ok(Arc::new(cfg))
}

/// The canned responses of the current second: the `date` header changes once a second.
struct Canned {
    second: u64,
    /// HTTP/1.1 keep-alive: no `connection` header.
    keep: Vec<u8>,
    /// `connection: close`.
    close: Vec<u8>,
    /// HTTP/1.0 asking for keep-alive: `connection: keep-alive`.
    keep10: Vec<u8>,
}

impl Canned {
    fn new() -> Canned {
        let mut c = Canned {
            second: u64::MAX,
            keep: Vec::new(),
            close: Vec::new(),
            keep10: Vec::new(),
        };
        c.tick();
        c
    }

    /// Rebuild the responses if the second has changed since the last call.
    fn tick(&mut self) {
        let now = SystemTime::now();
        let second = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if second == self.second {
            return;
        }
        self.second = second;
        let date = httpdate::fmt_http_date(now);
        let build = |connection: &str| {
            let mut r = Vec::with_capacity(160);
            r.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n");
            r.extend_from_slice(
                format!(
                    "content-length: {}\r\n{connection}date: {date}\r\n",
                    BODY.len()
                )
                .as_bytes(),
            );
            // ringloop says `server: ringloop`: a name of the same length.
            r.extend_from_slice(b"server: tlsfloor\r\n\r\n");
            r.extend_from_slice(BODY);
            r
        };
        self.keep = build("");
        self.close = build("connection: close\r\n");
        self.keep10 = build("connection: keep-alive\r\n");
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// Answer and keep the connection; `http10`: say `connection: keep-alive`.
    KeepAlive { http10: bool, body: usize },
    /// Answer with `connection: close`, then close.
    Close { body: usize },
    /// Not something this responder answers: close.
    Bad,
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// Parse a request head (without its final CRLF CRLF).
fn parse_head(head: &[u8]) -> Head {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let http10 = match lines
        .next()
        .map(|l| l.rsplit(|&b| b == b' ').next().unwrap_or_default())
    {
        Some(b"HTTP/1.1") => false,
        Some(b"HTTP/1.0") => true,
        _ => return Head::Bad,
    };
    let (mut close, mut keep_alive, mut body) = (false, false, 0usize);
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Head::Bad;
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                Some(n) => body = n,
                None => return Head::Bad,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Head::Bad;
        }
    }
    if close || (http10 && !keep_alive) {
        Head::Close { body }
    } else {
        Head::KeepAlive { http10, body }
    }
}

struct Conn {
    sock: TcpStream,
    tls: ServerConnection,
    /// Plaintext received and not yet a whole request.
    inbuf: Vec<u8>,
    /// Bytes of the current request's body still to skip.
    body_left: usize,
    /// The last request is answered (or one could not be): close after the responses.
    done: bool,
    /// close_notify is queued: close once everything is written.
    closing: bool,
}

impl Conn {
    /// Answer the whole requests in `inbuf`; responses go into `out`.
    fn answer(&mut self, canned: &Canned, out: &mut Vec<u8>) {
        let mut pos = 0;
        while !self.done {
            let skip = self.body_left.min(self.inbuf.len() - pos);
            pos += skip;
            self.body_left -= skip;
            if self.body_left > 0 {
                break;
            }
            let Some(end) = self.inbuf[pos..].windows(4).position(|w| w == b"\r\n\r\n") else {
                self.done = self.inbuf.len() - pos > MAX_HEAD;
                break;
            };
            match parse_head(&self.inbuf[pos..pos + end]) {
                Head::KeepAlive { http10, body } => {
                    out.extend_from_slice(if http10 { &canned.keep10 } else { &canned.keep });
                    self.body_left = body;
                }
                Head::Close { body } => {
                    out.extend_from_slice(&canned.close);
                    // The body of the last request is not waited for: nothing follows it.
                    let _ = body;
                    self.done = true;
                }
                Head::Bad => self.done = true,
            }
            pos += end + 4;
        }
        self.inbuf.drain(..pos.min(self.inbuf.len()));
    }

    fn close(&mut self) {
        if !self.closing {
            self.tls.send_close_notify();
            self.closing = true;
        }
    }

    /// Feed ciphertext to rustls, answer what it decrypts. false: drop the connection now.
    fn received(&mut self, mut data: &[u8], canned: &Canned, out: &mut Vec<u8>) -> bool {
        while !data.is_empty() {
            if self.tls.read_tls(&mut data).is_err() {
                return false;
            }
            let state = match self.tls.process_new_packets() {
                Ok(state) => state,
                // rustls has queued the alert: send it, then close.
                Err(_) => {
                    self.closing = true;
                    return true;
                }
            };
            let n = state.plaintext_bytes_to_read();
            if n > 0 {
                let old = self.inbuf.len();
                self.inbuf.resize(old + n, 0);
                if self
                    .tls
                    .reader()
                    .read_exact(&mut self.inbuf[old..])
                    .is_err()
                {
                    return false;
                }
            }
            if !self.done && !self.inbuf.is_empty() {
                self.answer(canned, out);
            }
            if state.peer_has_closed() {
                self.done = true;
            }
        }
        if !out.is_empty() {
            // All the responses of this read in one record. Writes to rustls's buffer only.
            let ok = self.tls.writer().write_all(out).is_ok();
            out.clear();
            if !ok {
                return false;
            }
        }
        if self.done {
            self.close();
        }
        true
    }

    /// Write what rustls has queued. false: drop the connection now (error, or closed and done).
    fn flush(&mut self) -> bool {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        !self.closing
    }
}

struct Server {
    poll: Poll,
    listener: TcpListener,
    config: Arc<ServerConfig>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    canned: Canned,
    readbuf: Vec<u8>,
    out: Vec<u8>,
}

impl Server {
    fn accept(&mut self) {
        loop {
            let (sock, _) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("tls_floor: accept: {e}");
                    return;
                }
            };
            // Responses are one write each; the handshake's flights must not wait on Nagle.
            let _ = sock.set_nodelay(true);
            let tls = match ServerConnection::new(self.config.clone()) {
                Ok(tls) => tls,
                Err(e) => {
                    eprintln!("tls_floor: {e}");
                    continue;
                }
            };
            let slot = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut conn = Conn {
                sock,
                tls,
                inbuf: Vec::new(),
                body_left: 0,
                done: false,
                closing: false,
            };
            // Edge-triggered, both directions, registered once: a writable edge comes only
            // after a write met a full buffer, so this costs no extra wake-ups.
            let interest = Interest::READABLE | Interest::WRITABLE;
            if self
                .poll
                .registry()
                .register(&mut conn.sock, Token(FIRST_CONN + slot), interest)
                .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.conns[slot] = Some(conn);
        }
    }

    fn ready(&mut self, slot: usize, readable: bool) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let mut keep = true;
        if readable {
            // Edge-triggered: read until the socket is empty (a short read says it is).
            loop {
                match conn.sock.read(&mut self.readbuf) {
                    Ok(0) => {
                        conn.close();
                        break;
                    }
                    Ok(n) => {
                        if !conn.received(&self.readbuf[..n], &self.canned, &mut self.out) {
                            keep = false;
                            break;
                        }
                        if n < self.readbuf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        keep = false;
                        break;
                    }
                }
            }
        }
        if !(keep && conn.flush()) {
            // Closing the socket takes it out of epoll.
            self.conns[slot] = None;
            self.free.push(slot);
        }
    }
}

fn run(cert: &str, key: &str, port: u16) -> Result<(), String> {
    let config = config(cert, key)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut listener = TcpListener::bind(addr).map_err(|e| format!("listening on {addr}: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(|e| e.to_string())?;
    // stdin closing stops the server (the benchmark's protocol); a stdin epoll cannot watch
    // (a file, /dev/null) leaves SIGTERM as the way to stop it.
    let stdin_watched = poll
        .registry()
        .register(&mut SourceFd(&0), STDIN, Interest::READABLE)
        .is_ok();
    let mut server = Server {
        poll,
        listener,
        config,
        conns: Vec::new(),
        free: Vec::new(),
        canned: Canned::new(),
        readbuf: vec![0; READ_BUF],
        out: Vec::new(),
    };
    println!(
        "{{\"type\": \"ready\", \"pid\": {}, \"port\": {port}}}",
        std::process::id()
    );
    io::stdout().flush().map_err(|e| e.to_string())?;
    let mut events = Events::with_capacity(1024);
    loop {
        if let Err(e) = server.poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("epoll_wait: {e}"));
        }
        server.canned.tick();
        for event in events.iter() {
            match event.token() {
                LISTENER => server.accept(),
                STDIN if stdin_watched => {
                    let mut buf = [0u8; 256];
                    match io::stdin().read(&mut buf) {
                        Ok(0) | Err(_) => {
                            println!("{{\"type\": \"done\"}}");
                            return Ok(());
                        }
                        Ok(_) => {}
                    }
                }
                Token(t) if t >= FIRST_CONN => server.ready(
                    t - FIRST_CONN,
                    event.is_readable() || event.is_read_closed(),
                ),
                Token(_) => {}
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = match args.get(2).map(|p| p.parse::<u16>()) {
        None => Ok(0),
        Some(Ok(p)) => Ok(p),
        Some(Err(_)) => Err(format!("PORT {:?} is not a port number", args[2])),
    };
    let result = match (args.len(), port) {
        (2 | 3, Ok(port)) => run(&args[0], &args[1], port),
        (2 | 3, Err(e)) => Err(e),
        _ => Err("usage: tls_floor CERT KEY [PORT]".to_string()),
    };
    if let Err(e) = result {
        // The benchmark's protocol: an "error" line, and a one-line message for a person.
        let quoted = e.replace('\\', "\\\\").replace('"', "\\\"");
        println!("{{\"type\": \"error\", \"error\": \"{quoted}\"}}");
        eprintln!("tls_floor: {e}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: a"),
            Head::KeepAlive {
                http10: false,
                body: 0
            }
        );
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nConnection: Close"),
            Head::Close { body: 0 }
        );
        assert_eq!(parse_head(b"GET / HTTP/1.0"), Head::Close { body: 0 });
        assert_eq!(
            parse_head(b"GET / HTTP/1.0\r\nconnection: keep-alive"),
            Head::KeepAlive {
                http10: true,
                body: 0
            }
        );
        assert_eq!(
            parse_head(b"POST / HTTP/1.1\r\nContent-Length: 5"),
            Head::KeepAlive {
                http10: false,
                body: 5
            }
        );
        assert_eq!(
            parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked"),
            Head::Bad
        );
        assert_eq!(parse_head(b"\x16\x03\x01"), Head::Bad);
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nno colon"), Head::Bad);
    }
}
