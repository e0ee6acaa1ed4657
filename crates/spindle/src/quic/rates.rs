//! Rates per client address: datagrams a second, and new connections a
//! second (token buckets, [`super::PACKETS_PER_SECOND`] and
//! [`super::NEW_CONNECTIONS_PER_SECOND`]). An IPv6 client is counted by
//! its /64, the block one host usually has. At most
//! [`super::TRACKED_ADDRESSES`] are tracked.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::*;

/// A token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes one token if there is one, refilling at `rate` a second up
    /// to `burst` first.
    fn take(&mut self, rate: u32, burst: u32, now: Instant) -> bool {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + secs * f64::from(rate)).min(f64::from(burst));
        self.at = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

#[derive(Debug, Clone, Copy)]
struct Rate {
    packets: Bucket,
    connections: Bucket,
}

/// The rates of the addresses seen lately.
#[derive(Debug, Default)]
pub struct Rates {
    by_address: HashMap<IpAddr, Rate>,
}

/// The key an address is counted under: itself, or an IPv6 one's /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().expect("checked")),
        v4 => v4,
    }
}

impl Rates {
    fn rate(&mut self, ip: IpAddr, now: Instant) -> &mut Rate {
        let k = key(ip);
        if self.by_address.len() >= TRACKED_ADDRESSES && !self.by_address.contains_key(&k) {
            self.forget(now);
        }
        self.by_address.entry(k).or_insert(Rate {
            packets: Bucket::full(PACKETS_BURST, now),
            connections: Bucket::full(NEW_CONNECTIONS_BURST, now),
        })
    }

    /// Makes room: addresses whose buckets have refilled are as good as
    /// unknown; if that frees too little (a flood from many addresses),
    /// all are forgotten. Amortised O(1) per new address either way.
    fn forget(&mut self, now: Instant) {
        let secs = f64::from(NEW_CONNECTIONS_BURST) / f64::from(NEW_CONNECTIONS_PER_SECOND);
        let refilled = Duration::from_secs_f64(secs);
        self.by_address
            .retain(|_, r| now.saturating_duration_since(r.connections.at) < refilled);
        if self.by_address.len() >= TRACKED_ADDRESSES / 2 {
            self.by_address.clear();
        }
    }

    /// One datagram from `ip`: false when over its rate (drop it).
    pub fn packet(&mut self, ip: IpAddr, now: Instant) -> bool {
        self.rate(ip, now)
            .packets
            .take(PACKETS_PER_SECOND, PACKETS_BURST, now)
    }

    /// A new connection from `ip`: false when over its rate.
    pub fn connection(&mut self, ip: IpAddr, now: Instant) -> bool {
        self.rate(ip, now)
            .connections
            .take(NEW_CONNECTIONS_PER_SECOND, NEW_CONNECTIONS_BURST, now)
    }

    pub fn tracked(&self) -> usize {
        self.by_address.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let t0 = Instant::now();
        let mut r = Rates::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let granted = (0..NEW_CONNECTIONS_BURST + 10)
            .filter(|_| r.connection(ip, t0))
            .count();
        assert_eq!(granted, NEW_CONNECTIONS_BURST as usize);
        let later = t0 + Duration::from_millis(500);
        let again = (0..100).filter(|_| r.connection(ip, later)).count();
        assert_eq!(again, NEW_CONNECTIONS_PER_SECOND as usize / 2);
        // Another address has its own.
        assert!(r.connection("192.0.2.2".parse().unwrap(), later));
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64() {
        let t0 = Instant::now();
        let mut r = Rates::default();
        for i in 0..NEW_CONNECTIONS_BURST {
            let ip: IpAddr = format!("2001:db8::{i:x}").parse().unwrap();
            assert!(r.connection(ip, t0));
        }
        assert!(!r.connection("2001:db8::ffff:1".parse().unwrap(), t0));
        assert!(r.connection("2001:db8:0:1::1".parse().unwrap(), t0));
    }

    #[test]
    fn the_table_stays_bounded_under_many_addresses() {
        let t0 = Instant::now();
        let mut r = Rates::default();
        for i in 0..(3 * TRACKED_ADDRESSES as u32) {
            r.packet(IpAddr::from(i.to_be_bytes()), t0);
            assert!(r.tracked() <= TRACKED_ADDRESSES);
        }
    }
}
