//! The HTTP server's native half. `h1` is sans-I/O HTTP/1.1 (no PyO3); `conn` joins it to the
//! stream transport and the application, one connection each; `request` turns a request head
//! into Python objects, `scope` those into ASGI's `http` scope; `ws` is sans-I/O WebSocket (no PyO3 either); `websocket` joins `ws` to the
//! connection and to ASGI's `websocket` scope; `asgi` is the ASGI request cycle
//! (`receive`/`send`); `server` what the connections of one worker share; `watch` what the
//! blocking watch reads about the request that blocked the loop; `files` serves static files
//! (sans-PyO3) before a request reaches the application.
//! The Python half is `ringloop.server`.

pub mod asgi;
pub mod body;
pub mod conn;
pub mod cycle;
pub mod files;
pub mod h1;
pub mod host;
pub mod native;
pub mod request;
pub mod scope;
pub mod server;
pub mod watch;
pub mod websocket;
pub mod ws;
pub mod wsgi;
pub mod wsgi_pool;
pub mod wsgi_start;
