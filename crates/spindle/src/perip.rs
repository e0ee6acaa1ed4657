//! `--max-connections-per-ip`: open connections counted by client address
//! across all workers, as nginx's `limit_conn` on `$binary_remote_addr`.
//!
//! The count is taken at accept (one `getpeername`) and given back when the
//! connection's [`IpSlot`] is dropped with it. A connection past the limit
//! is still accepted, and its first request answered 503 with
//! `Retry-After: 1` before it closes (`Session::over_limit`): a client
//! learns why, rather than seeing a reset. The table is sharded so that
//! workers accepting at once rarely meet on one lock, and holds only
//! addresses with open connections (at most `--max-connections`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// Shards of the address table.
const SHARDS: usize = 16;

/// Open connections per client address.
pub struct PerIp {
    max: u32,
    shards: [Mutex<HashMap<IpAddr, u32>>; SHARDS],
}

/// What [`PerIp::admit`] decided.
pub enum Admitted {
    /// Counted (or not countable: no peer address).
    Yes(Option<IpSlot>),
    /// The address holds the limit already.
    OverLimit,
}

/// One counted connection; dropping it gives the count back.
pub struct IpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    pub fn new(max: u32) -> Arc<PerIp> {
        assert!(max > 0, "a limit of 0 means no table");
        Arc::new(PerIp {
            max,
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        })
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<HashMap<IpAddr, u32>> {
        let h = match ip {
            IpAddr::V4(a) => u32::from(*a) as usize,
            IpAddr::V6(a) => (u128::from(*a) ^ (u128::from(*a) >> 64)) as usize,
        };
        &self.shards[(h ^ (h >> 16)) % SHARDS]
    }

    /// Counts `ip` if it is under the limit.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<IpSlot> {
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let mut m = self.shard(&ip).lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            table: self.clone(),
            ip,
        })
    }

    /// Counts the peer of an accepted socket. A socket whose peer cannot
    /// be read is not counted.
    pub fn admit(self: &Arc<Self>, fd: RawFd) -> Admitted {
        match crate::net::peer_addr(fd) {
            Some(a) => match self.acquire(a.ip()) {
                Some(slot) => Admitted::Yes(Some(slot)),
                None => Admitted::OverLimit,
            },
            None => Admitted::Yes(None),
        }
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut m = self
            .table
            .shard(&self.ip)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_gives_back() {
        let t = PerIp::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let s1 = t.acquire(a).unwrap();
        let s2 = t.acquire(mapped).expect("the same client");
        assert!(t.acquire(a).is_none());
        assert!(t.acquire("192.0.2.2".parse().unwrap()).is_some());
        drop(s1);
        let s3 = t.acquire(a).unwrap();
        drop((s2, s3));
        assert!(
            t.shards.iter().all(|s| s.lock().unwrap().is_empty()),
            "no entry left"
        );
    }
}
