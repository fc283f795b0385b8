//! The HTTP/2 floor: `h2_floor PORT` serves h2c (prior knowledge) on 127.0.0.1:PORT and
//! answers every request with `200`, `content-type: text/plain`, `date` and `Hello, world!`
//! (a request body is read and dropped first, its window released), on one thread.
//!
//! It is the least a server built on the `h2` crate spends per request: no application, no
//! Python, no routing; the HTTP/2 work and the kernel's. `h2_suite.py` puts every server's
//! figure beside it. It prints `{"type": "ready", "pid": N, "port": N}` once listening and
//! exits when its stdin closes (the harness's server protocol).

use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};

const BODY: &[u8] = b"Hello, world!";

async fn serve(sock: TcpStream) {
    let _ = sock.set_nodelay(true);
    let mut conn = match h2::server::handshake(sock).await {
        Ok(c) => c,
        Err(_) => return,
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        // Each stream its own task, as a server with an application per stream does; the
        // answer is ready at once, so the task ends in its first poll for a GET.
        tokio::task::spawn_local(async move {
            let mut body = req.into_body();
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            let response = Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "text/plain")
                .header("date", httpdate::fmt_http_date(SystemTime::now()))
                .body(())
                .expect("a fixed response");
            if let Ok(mut send) = respond.send_response(response, false) {
                let _ = send.send_data(Bytes::from_static(BODY), true);
            }
        });
    }
}

fn main() {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a tokio runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("a local address").port();
        println!(
            "{{\"type\": \"ready\", \"pid\": {}, \"port\": {}}}",
            std::process::id(),
            port
        );
        let _ = std::io::stdout().flush();
        // The harness stops a server by closing its stdin.
        std::thread::spawn(|| {
            let mut sink = [0u8; 64];
            while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
            std::process::exit(0);
        });
        loop {
            match listener.accept().await {
                Ok((sock, _)) => {
                    tokio::task::spawn_local(serve(sock));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    });
}
