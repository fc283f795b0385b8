//! The server's protocols. `h1` is sans-I/O HTTP/1.1; `conn.rs` (to come) joins it to the
//! stream transport and Python.

pub mod h1;
