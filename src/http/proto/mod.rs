//! The sans-I/O protocol cores: bytes in, events out; no sockets, rings or Python, and no
//! `crate::` anywhere below (the fuzz crate includes this folder by path, and the module
//! graph test keeps everything above from reaching down into it through anything else).
//! `h1` is HTTP/1.1, `h2` HTTP/2 (the `h2` crate driven through in-memory buffers), `ws` the
//! WebSocket codec (RFC 6455 + permessage-deflate), `head` the `RequestHead` view h1 and h2
//! give of a request.

pub mod h1;
pub mod h2;
pub mod head;
pub mod ws;
