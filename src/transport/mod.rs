//! Native transports: the per-connection I/O under ringloop's stream (TCP and Unix-socket)
//! and UDP transports (`datagram::DatagramIO`, same split: native reads and the common
//! `sendto`, asyncio's transport class for the rest).
//!
//! The split follows DESIGN.md's "Rust owns the hot path, Python owns the subtle semantics":
//! `stream::StreamIO` reads (one `recv` into a scratch buffer, copied into an exact-size
//! `bytes`, straight to `protocol.data_received`; or `recv_into` the protocol's own buffer for a
//! `BufferedProtocol`), writes (a direct `send` first, later writes of the same loop iteration
//! coalesced into one `sendmsg` at the end of the iteration), and owns the write buffer and its
//! flow-control arithmetic. The Python transport (`python/ringloop/_streams.py`) keeps asyncio's
//! lifecycle semantics — closing, fatal errors, `connection_lost`, `Server` bookkeeping — by
//! subclassing asyncio's own selector transport, and is called back only on the rare edges
//! (EOF, errors, crossing a water mark, the buffer draining while someone waits for it).

pub mod buffers;
pub mod datagram;
pub mod reading;
pub mod registry;
pub mod stream;
