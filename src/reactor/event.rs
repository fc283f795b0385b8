//! What the reactor reports: a ready fd (`Event`), a completion of a multishot operation
//! (`OpCompletion`), and which operations there are (`OpKind`). Shared by both backends and the
//! loop above them; nothing here depends on a backend.

use std::os::fd::RawFd;

/// One ready file descriptor, as reported by `poll`.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub fd: RawFd,
    pub readable: bool,
    pub writable: bool,
}

/// One completion of an operation (not a poll): what the kernel returned, and the provided
/// buffer it filled, if any. The buffer must be handed back with `recycle`.
#[derive(Debug, Clone, Copy)]
pub struct OpCompletion {
    pub token: u64,
    pub res: i32,
    pub more: bool,
    pub bid: Option<u16>,
}

/// What a multishot operation does (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A stream socket's `recv` into provided buffers.
    Recv,
    /// A listening socket's `accept`: each completion is a new fd (non-blocking, close-on-exec).
    Accept,
    /// A datagram socket's `recvmsg`: each completion is one datagram with its sender
    /// (`recvmsg_parts` reads the buffer).
    RecvMsg,
}

/// A stream read as the loop hands it to its transport: its bytes still in provided buffers
/// (`(bid, len)`s in order), or read straight from the socket into memory of its own, where
/// the buffer ring ran dry (see the router's rule for `ENOBUFS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadBytes {
    Bufs(Vec<(u16, usize)>),
    Owned(Vec<u8>),
}
