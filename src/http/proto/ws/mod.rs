//! Sans-I/O WebSocket (RFC 6455) with permessage-deflate (RFC 7692), server side: the upgrade
//! request in, the 101's fields out; bytes in, messages out; messages in, bytes out.
//!
//! The contract with the I/O layer, one `Conn` per upgraded connection:
//! ```text
//! let up = handshake::check(method, version, fields)?      else answer e.status() (+ e.header())
//! let deflate = up.negotiate_deflate(&cfg)                 (params, extension header value)
//! 101 with up.response_headers(subprotocol, deflate ext)   then
//! let mut conn = Conn::new(Config, deflate params)         and see `conn` for the loop
//! ```
//! Rooms: `handshake` judges the request and computes `Sec-WebSocket-Accept`; `extension`
//! parses `Sec-WebSocket-Extensions` and negotiates permessage-deflate; `frame` is the frame
//! format (heads, masking, close codes); `decode` turns frames into whole messages and enforces
//! every reading rule; `encode` writes frames; `deflate` compresses and inflates; `conn` is the
//! close handshake and the automatic answers; `error` names every rule. Nothing here knows
//! sockets, rings or Python, and nothing names `crate::`: the fuzz crate includes this folder
//! by path.


pub mod conn;
pub mod decode;
pub mod deflate;
pub mod encode;
pub mod error;
pub mod extension;
pub mod frame;
pub mod handshake;
mod syntax;

#[cfg(any(test, fuzzing))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use conn::{Config, Conn, Event, State};
pub use deflate::Params;
pub use error::{code, Error, HandshakeError, SendError};
pub use extension::DeflateConfig;
pub use handshake::{accept_key, check, check_extended_connect, Upgrade};
