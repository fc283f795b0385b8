//! The HTTP server's native half. `proto/` holds the sans-I/O cores (no PyO3, no `crate::`):
//! `h1` (HTTP/1.1), `ws` (WebSocket) and `head`, the `RequestHead` view of a request they give.
//! `conn` joins h1 to the stream transport and the application, one connection each (its
//! `cycle` the driver's side of a request: body in, response out);
//! `h2conn` joins the HTTP/2 core (`proto::h2`) to the transport and the application, many
//! streams per connection; `conn` hands a connection to it when the client speaks HTTP/2.
//! `stream` is the per-request `Stream` the interfaces hold: the connection behind a `Sink`
//! the driver implements, so `asgi`, `native` and `wsgi*` never name `conn`;
//! `request` turns a `RequestHead` into Python objects, `scope` those into ASGI's `http` scope;
//! `websocket` runs `ws` over a stream's upgraded channel (`websocket::Channel`, which `conn`
//! implements after a 101 and `h2conn` for an RFC 8441 extended CONNECT stream: one
//! direction, the drivers name `websocket`, never the reverse) and joins it to
//! ASGI's `websocket` scope or a native handler; `asgi` is the ASGI
//! request cycle (`receive`/`send`); `server` what the connections of one worker share (its
//! registry of them is `conn`'s: sweep, shutdown, and what the blocking watch reads); `files`
//! serves static files (its rules sans-PyO3) before a request reaches the application.
//! The Python half is `ringloop.server`.

pub mod asgi;
pub mod body;
pub mod conn;
pub mod files;
pub mod h2conn;
pub mod proto;
pub mod host;
pub mod native;
pub mod request;
pub mod scope;
pub mod server;
pub mod stream;
pub mod websocket;
pub mod wsgi;
pub mod wsgi_pool;
pub mod wsgi_start;

/// The `Dispatch` of the interface a server was started with: how its connections start
/// the application for a request (`conn` calls it, naming no interface).
pub(crate) fn dispatch(interface: server::Interface) -> &'static dyn stream::Dispatch {
    match interface {
        server::Interface::Asgi => &asgi::DISPATCH,
        server::Interface::Native => &native::SYNC,
        server::Interface::NativeAsync => &native::ASYNC,
        server::Interface::Wsgi => &wsgi::DISPATCH,
    }
}
