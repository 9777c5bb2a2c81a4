//! Replies kept for retransmitted requests: a SIP proxy that heard nothing
//! within its timeout sends the same request again with the same cookie,
//! and must get the same answer without the work being done twice.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

/// How long a reply is kept.
pub const TTL_NS: i64 = 30_000_000_000;
/// Most replies kept, and their bytes.
pub const MAX_REPLIES: usize = 4096;
pub const MAX_BYTES: usize = 8 << 20;

struct Kept {
    at: i64,
    /// The request's hash: only the same request gets the kept reply.
    request: u64,
    reply: Vec<u8>,
}

/// Replies by (the requester's address, cookie), capped in number, bytes
/// and age.
#[derive(Default)]
pub struct Replies {
    kept: HashMap<(IpAddr, Vec<u8>), Kept>,
    /// Insertion order, for eviction (an entry replaced since is skipped).
    order: VecDeque<(i64, IpAddr, Vec<u8>)>,
    bytes: usize,
}

fn hash(request: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    request.hash(&mut h);
    h.finish()
}

impl Replies {
    /// The reply already given to this very request from `from`, if it is
    /// still kept. A reused cookie with another request gets nothing, so a
    /// short datagram cannot draw out a long kept reply.
    pub fn get(&self, now: i64, from: IpAddr, cookie: &[u8], request: &[u8]) -> Option<&[u8]> {
        let k = self.kept.get(&(from, cookie.to_vec()))?;
        (now - k.at < TTL_NS && k.request == hash(request)).then_some(&k.reply[..])
    }

    /// Keeps `reply`, dropping what is too old or over the caps.
    pub fn keep(&mut self, now: i64, from: IpAddr, cookie: &[u8], request: &[u8], reply: &[u8]) {
        let key = (from, cookie.to_vec());
        self.bytes += reply.len();
        if let Some(old) = self
            .kept
            .insert(key.clone(), Kept { at: now, request: hash(request), reply: reply.to_vec() })
        {
            self.bytes -= old.reply.len();
        }
        self.order.push_back((now, from, cookie.to_vec()));
        while let Some((at, ip, c)) = self.order.front() {
            // The order itself is capped too: one cookie reused with new
            // requests keeps one reply but would add a slot each time.
            let over = self.kept.len() > MAX_REPLIES
                || self.bytes > MAX_BYTES
                || self.order.len() > 2 * MAX_REPLIES;
            if !over && now - at < TTL_NS {
                break;
            }
            let key = (*ip, c.clone());
            // Only the entry this order slot put there (not a newer one).
            if self.kept.get(&key).is_some_and(|k| k.at == *at) {
                if let Some(k) = self.kept.remove(&key) {
                    self.bytes -= k.reply.len();
                }
            }
            self.order.pop_front();
        }
    }
}
