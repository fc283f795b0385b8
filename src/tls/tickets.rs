//! Session tickets every worker of one server can open: a ticket issued by worker A resumes
//! on worker B (the kernel spreads a client's connections over the workers' listeners).
//!
//! rustls's own ticketer makes random keys per process, so each worker could only resume its
//! own tickets. Here the keys come from one secret the supervisor makes before it forks (as
//! nginx's `ssl_session_ticket_key` file is shared by its workers): the key of period `e`
//! (six hours) is HKDF-SHA256(secret, e), so every worker agrees on it with no messages.
//! A ticket is `e` (8 bytes, big-endian) ‖ a random 12-byte nonce ‖ AES-256-GCM of the
//! session state, with `e` as associated data; it opens in its own period and the next
//! (`lifetime` says one period). The trade-off, as for nginx's key file: whoever learns the
//! secret while the server runs can open every ticket it issued, so the secret lives only in
//! the server's memory and dies with it.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
use rustls::server::ProducesTickets;

/// How long one key issues tickets.
const PERIOD: u64 = 6 * 60 * 60;
const SALT: &[u8] = b"ringloop session tickets v1";
const HEADER: usize = 8 + NONCE_LEN;

/// Tickets sealed with keys derived from one shared secret (see the module docs).
pub struct SharedTicketer {
    prk: aws_lc_rs::hkdf::Prk,
    /// The keys derived so far, newest last (at most the current and the previous period's).
    keys: Mutex<Vec<(u64, LessSafeKey)>>,
    now: fn() -> u64,
}

impl std::fmt::Debug for SharedTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTicketer")
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl SharedTicketer {
    /// From the server's secret (at least 32 random bytes).
    pub fn new(secret: &[u8]) -> Result<SharedTicketer, String> {
        Self::with_clock(secret, unix_now)
    }

    fn with_clock(secret: &[u8], now: fn() -> u64) -> Result<SharedTicketer, String> {
        if secret.len() < 32 {
            return Err(format!("the session ticket secret is {} bytes; it needs at least 32", secret.len()));
        }
        Ok(SharedTicketer { prk: Salt::new(HKDF_SHA256, SALT).extract(secret), keys: Mutex::new(Vec::new()), now })
    }

    fn derive(&self, period: u64) -> Option<LessSafeKey> {
        let info = period.to_be_bytes();
        let info = [info.as_slice()];
        let okm = self.prk.expand(&info, &AES_256_GCM).ok()?;
        Some(LessSafeKey::new(UnboundKey::from(okm)))
    }

    /// Run `f` with the key of `period`, deriving it if needed; keys older than the previous
    /// period are dropped (erased) as time moves on.
    fn with_key<T>(&self, period: u64, f: impl FnOnce(&LessSafeKey) -> Option<T>) -> Option<T> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let current = (self.now)() / PERIOD;
        keys.retain(|(p, _)| *p + 1 >= current);
        if let Some((_, k)) = keys.iter().find(|(p, _)| *p == period) {
            return f(k);
        }
        let key = self.derive(period)?;
        keys.push((period, key));
        f(&keys.last()?.1)
    }
}

impl ProducesTickets for SharedTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        PERIOD as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let period = (self.now)() / PERIOD;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(HEADER + plain.len() + AES_256_GCM.tag_len());
        out.extend_from_slice(&period.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let (head, body) = out.split_at_mut(HEADER);
        let tag = self.with_key(period, |k| k.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&head[..8]), body).ok())?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < HEADER + AES_256_GCM.tag_len() {
            return None;
        }
        let period = u64::from_be_bytes(cipher[..8].try_into().ok()?);
        let current = (self.now)() / PERIOD;
        if period != current && period + 1 != current {
            return None;
        }
        let nonce = Nonce::try_assume_unique_for_key(&cipher[8..HEADER]).ok()?;
        let mut body = cipher[HEADER..].to_vec();
        let n = self.with_key(period, |k| k.open_in_place(nonce, Aad::from(&cipher[..8]), &mut body).ok().map(|p| p.len()))?;
        body.truncate(n);
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_start() -> u64 {
        1_000 * PERIOD
    }
    fn next_period() -> u64 {
        1_001 * PERIOD + 5
    }
    fn two_later() -> u64 {
        1_002 * PERIOD + 5
    }

    #[test]
    fn two_workers_with_one_secret_open_each_others_tickets() {
        let (a, b) = (SharedTicketer::new(&[7; 32]).unwrap(), SharedTicketer::new(&[7; 32]).unwrap());
        let t = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&t).as_deref(), Some(&b"session state"[..]));
        let other = SharedTicketer::new(&[8; 32]).unwrap();
        assert_eq!(other.decrypt(&t), None);
    }

    #[test]
    fn a_ticket_opens_in_its_period_and_the_next_only() {
        let t = SharedTicketer::with_clock(&[1; 32], at_start).unwrap().encrypt(b"s").unwrap();
        assert!(SharedTicketer::with_clock(&[1; 32], next_period).unwrap().decrypt(&t).is_some());
        assert!(SharedTicketer::with_clock(&[1; 32], two_later).unwrap().decrypt(&t).is_none());
    }

    #[test]
    fn tampered_or_short_tickets_do_not_open() {
        let k = SharedTicketer::new(&[2; 32]).unwrap();
        let t = k.encrypt(b"state").unwrap();
        for i in 0..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 1;
            assert_eq!(k.decrypt(&bad), None, "byte {i} flipped");
        }
        assert_eq!(k.decrypt(&t[..HEADER]), None);
        assert_eq!(k.decrypt(&[]), None);
        assert!(SharedTicketer::new(&[0; 16]).is_err());
    }
}
