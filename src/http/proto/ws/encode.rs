//! Frames out: heads (RFC 6455 §5.2), whole messages optionally fragmented, control frames.
//!
//! A server's frames are unmasked (§5.1: "A server MUST NOT mask"); the masked writer exists
//! for the client side, which today is the tests and the fuzz target. Lengths use the shortest
//! encoding (§5.2 asks it of senders). Every function appends to the caller's vector: the I/O
//! layer's write buffer, so a message is copied once, straight to where it leaves from.

use super::error::SendError;
use super::frame::{apply_mask, close_code_valid, OpCode, MAX_CONTROL};

/// Append a frame head; `mask` for a client's frame.
pub fn head(out: &mut Vec<u8>, fin: bool, rsv1: bool, opcode: OpCode, len: usize, mask: Option<[u8; 4]>) {
    let b0 = (u8::from(fin) << 7) | (u8::from(rsv1) << 6) | opcode as u8;
    let m = if mask.is_some() { 0x80 } else { 0 };
    match len {
        0..=125 => out.extend_from_slice(&[b0, m | len as u8]),
        126..=0xffff => {
            out.extend_from_slice(&[b0, m | 126]);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.extend_from_slice(&[b0, m | 127]);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    if let Some(k) = mask {
        out.extend_from_slice(&k);
    }
}

/// Append one frame.
pub fn frame(out: &mut Vec<u8>, fin: bool, rsv1: bool, opcode: OpCode, payload: &[u8], mask: Option<[u8; 4]>) {
    head(out, fin, rsv1, opcode, payload.len(), mask);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(k) = mask {
        apply_mask(&mut out[start..], k, 0);
    }
}

/// Append a data message (`opcode` Text or Binary) as frames of at most `max_frame` payload
/// bytes (one frame if it fits; an empty message is one empty frame). `rsv1` marks the
/// message compressed: it goes on the first frame only (RFC 7692 §6.1).
pub fn message(out: &mut Vec<u8>, opcode: OpCode, rsv1: bool, payload: &[u8], max_frame: usize, mask: Option<[u8; 4]>) {
    let max_frame = max_frame.max(1);
    if payload.len() <= max_frame {
        return frame(out, true, rsv1, opcode, payload, mask);
    }
    let mut chunks = payload.chunks(max_frame).peekable();
    let mut first = true;
    while let Some(chunk) = chunks.next() {
        let op = if first { opcode } else { OpCode::Continuation };
        frame(out, chunks.peek().is_none(), rsv1 && first, op, chunk, mask);
        first = false;
    }
}

/// Append a ping or pong; at most 125 bytes of payload.
pub fn control(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8], mask: Option<[u8; 4]>) -> Result<(), SendError> {
    debug_assert!(opcode.is_control());
    if payload.len() > MAX_CONTROL {
        return Err(SendError::ControlTooLong);
    }
    frame(out, true, false, opcode, payload, mask);
    Ok(())
}

/// Append a close frame: no payload without a code; the code must be one a close frame may
/// carry (`frame::close_code_valid`), the reason at most 123 bytes.
pub fn close(out: &mut Vec<u8>, code: Option<u16>, reason: &str, mask: Option<[u8; 4]>) -> Result<(), SendError> {
    let mut payload = [0u8; MAX_CONTROL];
    let len = match code {
        None if reason.is_empty() => 0,
        None => return Err(SendError::InvalidCloseCode),
        Some(c) if !close_code_valid(c) => return Err(SendError::InvalidCloseCode),
        Some(_) if reason.len() > MAX_CONTROL - 2 => return Err(SendError::CloseReasonTooLong),
        Some(c) => {
            payload[..2].copy_from_slice(&c.to_be_bytes());
            payload[2..2 + reason.len()].copy_from_slice(reason.as_bytes());
            2 + reason.len()
        }
    };
    frame(out, true, false, OpCode::Close, &payload[..len], mask);
    Ok(())
}
