//! One stream's state on our side of h2, and its poll: what moved since its waker fired.
//!
//! A stream holds h2's three handles: the request body (`RecvStream`, kept to the end for its
//! `FlowControl`), the response's sender before the head (`SendResponse`) and after it
//! (`SendStream`). Its poll asks h2, with the stream's own waker, exactly what the stream
//! waits for:
//! - always, whether it was reset (`poll_reset`: the peer's RST_STREAM, a stream error h2
//!   detected, or the connection ending — h2 wakes every stream then);
//! - body and trailers, only once the caller asked for the body (`want_body`);
//! - send capacity, only while a `send_data` took less than it was given (`blocked`).
//!
//! A waker registered by a poll that returned `Pending` is the one that fires later, so each of
//! these is polled again after every wake, and no other stream is.

use std::collections::VecDeque;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};

use super::event::Event;
use super::head::{Fields, Head};
use super::wake::StreamWaker;

pub(super) struct Stream {
    pub(super) head: Head,
    pub(super) body: RecvStream,
    /// Until the response head is sent.
    pub(super) respond: Option<SendResponse<Bytes>>,
    /// From the response head until its end.
    pub(super) send: Option<SendStream<Bytes>>,
    pub(super) waker: StreamWaker,
    /// The caller asked for the body: deliver it as it comes.
    pub(super) want_body: bool,
    /// The body's end (or trailers) was delivered.
    pub(super) body_done: bool,
    /// A `send_data` took less than it was given: say `Writable` when capacity grows.
    pub(super) blocked: bool,
    /// Body bytes delivered and not yet released (what `release` may still credit).
    pub(super) unreleased: usize,
    /// The response has no body (HEAD, 204, 304): `send_data` takes bytes and sends none.
    pub(super) no_body: bool,
    pub(super) trailers: Option<Fields>,
}

impl Stream {
    pub(super) fn new(head: Head, body: RecvStream, respond: SendResponse<Bytes>, waker: StreamWaker) -> Stream {
        Stream {
            head,
            body,
            respond: Some(respond),
            send: None,
            waker,
            want_body: false,
            body_done: false,
            blocked: false,
            unreleased: 0,
            no_body: false,
            trailers: None,
        }
    }

    /// Poll what the stream waits for, its events appended to `out`. `Err(reason)`: the stream
    /// is gone (reset, or the connection ended); nothing else of it will come.
    pub(super) fn poll(&mut self, id: u32, out: &mut VecDeque<Event>) -> Result<(), Reason> {
        self.waker.rearm();
        let Stream { waker, body, respond, send, want_body, body_done, blocked, unreleased, trailers, .. } = self;
        let mut cx = Context::from_waker(waker.waker());

        let reset = match (respond, send.as_mut()) {
            (Some(r), _) => r.poll_reset(&mut cx),
            (None, Some(s)) => s.poll_reset(&mut cx),
            (None, None) => Poll::Pending,
        };
        match reset {
            Poll::Ready(Ok(reason)) => return Err(reason),
            Poll::Ready(Err(e)) => return Err(reason_of(&e)),
            Poll::Pending => {}
        }

        if *want_body && !*body_done {
            loop {
                match body.poll_data(&mut cx) {
                    Poll::Ready(Some(Ok(data))) => {
                        let end = body.is_end_stream();
                        *unreleased += data.len();
                        // An empty DATA frame without END_STREAM says nothing (h2 bounds how
                        // many a peer may send).
                        if data.is_empty() && !end {
                            continue;
                        }
                        *body_done = end;
                        out.push_back(Event::Data { id, data, end });
                        if end {
                            break;
                        }
                    }
                    Poll::Ready(Some(Err(e))) => return Err(reason_of(&e)),
                    Poll::Ready(None) => {
                        // No more DATA: trailers, or the end came on an empty frame or was
                        // already there (a request with no body).
                        *body_done = true;
                        match body.poll_trailers(&mut cx) {
                            Poll::Ready(Ok(Some(map))) => {
                                *trailers = Some(Fields::from_map(&map));
                                out.push_back(Event::Trailers { id });
                            }
                            Poll::Ready(Err(e)) => return Err(reason_of(&e)),
                            Poll::Ready(Ok(None)) | Poll::Pending => {
                                out.push_back(Event::Data { id, data: Bytes::new(), end: true })
                            }
                        }
                        break;
                    }
                    Poll::Pending => break,
                }
            }
        }

        if *blocked {
            if let Some(s) = send {
                match s.poll_capacity(&mut cx) {
                    Poll::Ready(Some(Ok(_))) => {
                        *blocked = false;
                        out.push_back(Event::Writable { id });
                    }
                    Poll::Ready(Some(Err(e))) => return Err(reason_of(&e)),
                    // The send side is closed: its reset shows above on the next wake.
                    Poll::Ready(None) | Poll::Pending => {}
                }
            }
        }
        Ok(())
    }
}

/// The reason to report for an error that ended a stream: its RST_STREAM or GOAWAY code, else
/// (the transport ended under it) CANCEL.
pub(super) fn reason_of(e: &h2::Error) -> Reason {
    e.reason().unwrap_or(Reason::CANCEL)
}
