//! The PROXY protocol (HAProxy's `proxy-protocol.txt`, versions 1 and 2):
//! the header a load balancer sends before the first byte of the client's
//! own stream, naming the client it accepted the connection from.
//!
//! [`parse`] looks at the start of a connection's input and says whether
//! a header is there yet, how long it is and whom it names. It does no
//! I/O and keeps no state, so it can be called again each time more bytes
//! arrive. [`Cidr`] is the list of proxies whose headers are believed.
//!
//! What is accepted:
//! - v1: `PROXY TCP4 src dst sport dport\r\n`, `PROXY TCP6 ...`, and
//!   `PROXY UNKNOWN ...\r\n` (the real peer stays the client), at most
//!   [`V1_MAX_LEN`] bytes, single spaces, ports in decimal.
//! - v2: the 12-byte signature, version 2, command `LOCAL` (the proxy's
//!   own connection, a health check: the real peer stays the client) or
//!   `PROXY` with `TCP over IPv4` or `IPv6` (the client is the source
//!   address), `UNSPEC` or `UNIX` (the real peer stays the client). TLVs
//!   after the addresses are skipped. The whole header is at most
//!   [`V2_MAX_LEN`] bytes.
//!
//! Anything else, including `UDP` and a length too short for its
//! addresses, is [`Parsed::Invalid`]: the connection is closed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest v1 header, `\r\n` included (the spec's own figure: `PROXY
/// UNKNOWN`, two full-length IPv6 addresses and two 5-digit ports).
pub const V1_MAX_LEN: usize = 107;

/// Longest v2 header accepted, the 16 fixed bytes included. The spec
/// bounds the addresses at 216 bytes (two UNIX paths) but lets TLVs run
/// to 64 KiB; 536 bytes (TCP's minimum segment for IPv4, the size the
/// spec says a receiver can count on getting in one piece) leaves 304
/// bytes of TLVs beside the largest addresses, far more than HAProxy's
/// `send-proxy-v2` options or a cloud balancer's TLVs take.
pub const V2_MAX_LEN: usize = 536;

/// The most input [`parse`] ever needs to decide: past this many bytes
/// it never answers [`Parsed::Incomplete`].
pub const MAX_LEN: usize = V2_MAX_LEN;

/// The v2 signature, the first 12 bytes of every v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The fixed part of a v2 header: signature, version and command, family
/// and transport, length of the rest.
const V2_FIXED_LEN: usize = 16;
/// Address block of `TCP over IPv4`: two addresses, two ports.
const V2_INET_LEN: usize = 12;
/// Address block of `TCP over IPv6`.
const V2_INET6_LEN: usize = 36;
/// Address block of `UNIX stream`: two 108-byte paths.
const V2_UNIX_LEN: usize = 216;

const V1_PREFIX: &[u8] = b"PROXY ";

/// What the start of a connection's input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A header may still be on its way: more bytes are needed.
    Incomplete,
    /// A whole, valid header of `len` bytes. `client` is the address it
    /// names, or `None` where the connection's own peer stays the client
    /// (v2 `LOCAL`, v1 `UNKNOWN`, v2 `UNSPEC` and `UNIX`).
    Done {
        client: Option<SocketAddr>,
        len: usize,
    },
    /// Not a PROXY header, or a malformed one.
    Invalid,
}

/// Parses the PROXY header at the start of `input` (v1 or v2, told apart
/// by their first bytes). Never needs more than [`MAX_LEN`] bytes.
pub fn parse(input: &[u8]) -> Parsed {
    if input.is_empty() {
        return Parsed::Incomplete;
    }
    let sig = input.len().min(V2_SIGNATURE.len());
    if input[..sig] == V2_SIGNATURE[..sig] {
        return parse_v2(input);
    }
    let pre = input.len().min(V1_PREFIX.len());
    if input[..pre] == V1_PREFIX[..pre] {
        return parse_v1(input);
    }
    Parsed::Invalid
}

fn parse_v1(input: &[u8]) -> Parsed {
    let window = &input[..input.len().min(V1_MAX_LEN)];
    let Some(cr) = window.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return if input.len() >= V1_MAX_LEN {
            Parsed::Invalid
        } else {
            Parsed::Incomplete
        };
    };
    if input[cr] == b'\n' {
        return Parsed::Invalid;
    }
    match input.get(cr + 1) {
        None => return Parsed::Incomplete,
        Some(b'\n') => {}
        Some(_) => return Parsed::Invalid,
    }
    let len = cr + 2;
    if len > V1_MAX_LEN {
        return Parsed::Invalid;
    }
    let Ok(line) = std::str::from_utf8(&input[V1_PREFIX.len()..cr]) else {
        return Parsed::Invalid;
    };
    let mut fields = line.split(' ');
    let client = match fields.next() {
        // "the receiver must ignore anything presented before the CRLF".
        Some("UNKNOWN") => return Parsed::Done { client: None, len },
        Some("TCP4") => fields
            .next()
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
            .map(IpAddr::V4),
        Some("TCP6") => fields
            .next()
            .and_then(|s| s.parse::<Ipv6Addr>().ok())
            .map(IpAddr::V6),
        _ => None,
    };
    let Some(src) = client else {
        return Parsed::Invalid;
    };
    let dst_ok = match (src, fields.next()) {
        (IpAddr::V4(_), Some(d)) => d.parse::<Ipv4Addr>().is_ok(),
        (IpAddr::V6(_), Some(d)) => d.parse::<Ipv6Addr>().is_ok(),
        _ => false,
    };
    let sport = fields.next().and_then(v1_port);
    let dport = fields.next().and_then(v1_port);
    match (dst_ok, sport, dport, fields.next()) {
        (true, Some(port), Some(_), None) => Parsed::Done {
            client: Some(SocketAddr::new(src, port)),
            len,
        },
        _ => Parsed::Invalid,
    }
}

/// A v1 port: 1 to 5 decimal digits, at most 65535.
fn v1_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_v2(input: &[u8]) -> Parsed {
    if input.len() < V2_FIXED_LEN {
        // Check what has come so far, so garbage is refused at once.
        return match input.get(12) {
            Some(&vc) if vc >> 4 != 2 || vc & 0xf > 1 => Parsed::Invalid,
            _ => Parsed::Incomplete,
        };
    }
    let ver_cmd = input[12];
    let fam = input[13];
    let rest = usize::from(u16::from_be_bytes([input[14], input[15]]));
    let len = V2_FIXED_LEN + rest;
    if ver_cmd >> 4 != 2 || len > V2_MAX_LEN {
        return Parsed::Invalid;
    }
    let local = match ver_cmd & 0xf {
        0 => true,
        1 => false,
        _ => return Parsed::Invalid,
    };
    if input.len() < len {
        return Parsed::Incomplete;
    }
    if local {
        // A connection of the proxy's own (a health check): whatever the
        // addresses say, the peer is the client.
        return Parsed::Done { client: None, len };
    }
    let body = &input[V2_FIXED_LEN..len];
    let client = match fam {
        // UNSPEC: the proxy does not know; the peer stays the client.
        0x00 => None,
        // TCP over IPv4.
        0x11 if rest >= V2_INET_LEN => {
            let ip = Ipv4Addr::from(<[u8; 4]>::try_from(&body[0..4]).expect("4 bytes"));
            let port = u16::from_be_bytes([body[8], body[9]]);
            Some(SocketAddr::new(IpAddr::V4(ip), port))
        }
        // TCP over IPv6.
        0x21 if rest >= V2_INET6_LEN => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&body[0..16]).expect("16 bytes"));
            let port = u16::from_be_bytes([body[32], body[33]]);
            Some(SocketAddr::new(IpAddr::V6(ip), port))
        }
        // UNIX stream: no IP address to give; the peer stays the client.
        0x31 if rest >= V2_UNIX_LEN => None,
        // UDP, UNIX datagram, unknown families, addresses cut short.
        _ => return Parsed::Invalid,
    };
    Parsed::Done { client, len }
}

/// An address block (`10.0.0.0/8`, `2001:db8::/32`, or a single address,
/// which is a /32 or /128): the proxies trusted to send PROXY headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/PREFIX` or `ADDR`. Bits set below the prefix are an
    /// error (`10.0.0.1/8` is most likely a typo for a host or a network),
    /// as are prefixes longer than the address.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let shown = s.escape_debug();
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("'{shown}' is not an address block (examples: 10.0.0.0/8, 192.0.2.7, 2001:db8::/32)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && !p.starts_with('+') => n,
                _ => {
                    return Err(format!(
                        "'{shown}': the prefix length must be a number from 0 to {max}"
                    ))
                }
            },
        };
        let cidr = Cidr { addr, prefix };
        if cidr.network() != addr {
            return Err(format!(
                "'{shown}' has bits set past its /{prefix} prefix; did you mean {}/{prefix}?",
                cidr.network()
            ));
        }
        Ok(cidr)
    }

    /// The block's first address.
    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        }
    }

    /// Whether `ip` lies in the block. An IPv4-mapped IPv6 address
    /// (`::ffff:10.1.2.3`, the peer of a dual-stack socket) counts as the
    /// IPv4 address it carries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let probe = Cidr {
            addr: ip,
            prefix: self.prefix,
        };
        ip.is_ipv4() == self.addr.is_ipv4() && probe.network() == self.addr
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | cmd);
        h.push(fam);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h
    }

    fn inet4(src: [u8; 4], sport: u16) -> Vec<u8> {
        let mut b = src.to_vec();
        b.extend_from_slice(&[10, 0, 0, 1]);
        b.extend_from_slice(&sport.to_be_bytes());
        b.extend_from_slice(&80u16.to_be_bytes());
        b
    }

    fn done(client: &str, len: usize) -> Parsed {
        Parsed::Done {
            client: Some(client.parse().unwrap()),
            len,
        }
    }

    /// Every strict prefix of a valid header is `Incomplete`.
    fn prefixes_incomplete(h: &[u8]) {
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Parsed::Incomplete, "{n} of {h:?}");
        }
    }

    #[test]
    fn v1_tcp4_and_tcp6() {
        let h = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(parse(h), done("192.0.2.7:56324", 41));
        prefixes_incomplete(&h[..41]);
        let h = b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 80\r\n";
        assert_eq!(parse(h), done("[2001:db8::7]:65535", h.len()));
        prefixes_incomplete(h);
    }

    #[test]
    fn v1_longest_header_fits() {
        let h = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(h.len(), V1_MAX_LEN);
        assert!(matches!(
            parse(h),
            Parsed::Done {
                len: V1_MAX_LEN,
                ..
            }
        ));
        let h = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert!(matches!(
            parse(h),
            Parsed::Done {
                client: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn v1_unknown_keeps_the_peer() {
        let h = b"PROXY UNKNOWN\r\n";
        assert_eq!(
            parse(h),
            Parsed::Done {
                client: None,
                len: h.len()
            }
        );
        let h = b"PROXY UNKNOWN ffff:f::1 ffff:f::2 1 2\r\nrest";
        assert_eq!(
            parse(h),
            Parsed::Done {
                client: None,
                len: h.len() - 4
            }
        );
    }

    #[test]
    fn v1_malformed() {
        for h in [
            &b"PROXY TCP4 192.0.2.7 10.0.0.1 56324\r\n"[..],
            b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443 9\r\n",
            b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 2001:db8::1 1 2\r\n",
            b"PROXY TCP4  192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 +1 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 1 2\rX",
            b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY tcp4 192.0.2.7 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.007 10.0.0.1 1 2\r\n",
            b"PROXY \xff\r\n",
            b"PROXY\r\n",
            b"GET / HTTP/1.1\r\n",
            b"proxy TCP4",
            b"X",
        ] {
            assert_eq!(parse(h), Parsed::Invalid, "{}", String::from_utf8_lossy(h));
        }
        // The start of a v2 signature may still become one.
        assert_eq!(parse(b"\r\n\r\n"), Parsed::Incomplete);
    }

    #[test]
    fn v1_oversize_is_refused_without_waiting_for_more() {
        let mut h = b"PROXY UNKNOWN ".to_vec();
        h.resize(V1_MAX_LEN - 1, b'x');
        assert_eq!(parse(&h), Parsed::Incomplete);
        h.push(b'x');
        assert_eq!(parse(&h), Parsed::Invalid);
        // The line ends one byte too late.
        h.extend_from_slice(b"\r\n");
        assert_eq!(parse(&h), Parsed::Invalid);
        let mut h = b"PROXY UNKNOWN ".to_vec();
        h.resize(V1_MAX_LEN - 1, b'x');
        h.push(b'\r');
        assert_eq!(parse(&h), Parsed::Incomplete);
        h.push(b'\n');
        assert_eq!(parse(&h), Parsed::Invalid, "108 bytes");
    }

    #[test]
    fn v2_ipv4_ipv6_with_tlvs() {
        let mut h = v2(1, 0x11, &inet4([198, 51, 100, 9], 40_000));
        let len = h.len();
        assert_eq!(len, 28);
        h.extend_from_slice(b"GET /");
        assert_eq!(parse(&h), done("198.51.100.9:40000", 28));
        prefixes_incomplete(&h[..len]);

        let mut body = Vec::new();
        body.extend_from_slice(&"2001:db8::9".parse::<Ipv6Addr>().unwrap().octets());
        body.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        body.extend_from_slice(&443u16.to_be_bytes());
        body.extend_from_slice(&8443u16.to_be_bytes());
        // A TLV (PP2_TYPE_AUTHORITY, "example.org"): skipped.
        body.extend_from_slice(&[0x02, 0, 11]);
        body.extend_from_slice(b"example.org");
        let h = v2(1, 0x21, &body);
        assert_eq!(parse(&h), done("[2001:db8::9]:443", 16 + 36 + 14));
        prefixes_incomplete(&h);
    }

    #[test]
    fn v2_local_unspec_and_unix_keep_the_peer() {
        // LOCAL: addresses (if any) are ignored.
        for h in [v2(0, 0x00, &[]), v2(0, 0x11, &inet4([1, 2, 3, 4], 5))] {
            assert_eq!(
                parse(&h),
                Parsed::Done {
                    client: None,
                    len: h.len()
                }
            );
        }
        let h = v2(1, 0x00, &[]);
        assert_eq!(
            parse(&h),
            Parsed::Done {
                client: None,
                len: 16
            }
        );
        let h = v2(1, 0x31, &[0; 216]);
        assert_eq!(
            parse(&h),
            Parsed::Done {
                client: None,
                len: 232
            }
        );
    }

    #[test]
    fn v2_malformed() {
        let ok = v2(1, 0x11, &inet4([1, 2, 3, 4], 5));
        let mut bad_version = ok.clone();
        bad_version[12] = 0x11;
        let mut bad_cmd = ok.clone();
        bad_cmd[12] = 0x22;
        for (what, h) in [
            ("version 1 in a v2 header", bad_version.clone()),
            ("command 2", bad_cmd.clone()),
            ("UDP over IPv4", v2(1, 0x12, &inet4([1, 2, 3, 4], 5))),
            ("UDP over IPv6", v2(1, 0x22, &[0; 36])),
            ("UNIX datagram", v2(1, 0x32, &[0; 216])),
            ("family 4", v2(1, 0x41, &[0; 36])),
            ("IPv4 cut short", v2(1, 0x11, &[0; 11])),
            ("IPv6 cut short", v2(1, 0x21, &[0; 35])),
            ("UNIX cut short", v2(1, 0x31, &[0; 215])),
        ] {
            assert_eq!(parse(&h), Parsed::Invalid, "{what}");
        }
        // A wrong version or command is refused from byte 13 on.
        assert_eq!(parse(&bad_version[..13]), Parsed::Invalid);
        assert_eq!(parse(&bad_cmd[..13]), Parsed::Invalid);
        // A signature that goes wrong part way.
        assert_eq!(parse(b"\r\n\r\n\0\r\nQUIX"), Parsed::Invalid);
        assert_eq!(parse(b"\r\n\r\nGET"), Parsed::Invalid);
    }

    #[test]
    fn v2_length_cap() {
        let h = v2(1, 0x11, &[0; V2_MAX_LEN - 16]);
        assert_eq!(parse(&h), done("0.0.0.0:0", V2_MAX_LEN));
        let h = v2(1, 0x11, &[0; V2_MAX_LEN - 15]);
        // Refused from the length field on, without waiting for the rest.
        assert_eq!(parse(&h[..16]), Parsed::Invalid);
        assert_eq!(parse(&h), Parsed::Invalid);
        let mut h = v2(0, 0, &[]);
        h[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(parse(&h), Parsed::Invalid);
    }

    /// Random bytes and mutated headers: no panic, and a header is never
    /// longer than its input nor than the caps.
    #[test]
    fn random_input_never_panics() {
        let seeds = [
            v2(1, 0x11, &inet4([1, 2, 3, 4], 5)),
            v2(0, 0x21, &[7; 40]),
            b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\n".to_vec(),
            b"PROXY TCP6 ::1 ::2 1 2\r\n".to_vec(),
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..50_000 {
            let mut h = seeds[round % seeds.len()].clone();
            for _ in 0..(rnd() % 4) {
                let at = (rnd() as usize) % h.len();
                match rnd() % 3 {
                    0 => h[at] = rnd() as u8,
                    1 => h.truncate(at.max(1)),
                    _ => h.insert(at, rnd() as u8),
                }
            }
            if let Parsed::Done { len, .. } = parse(&h) {
                assert!(len <= h.len() && len <= MAX_LEN, "{h:?}");
            }
            if h.len() >= MAX_LEN {
                assert_ne!(parse(&h), Parsed::Incomplete);
            }
        }
    }

    #[test]
    fn cidr() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.255.1.2".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::a00:1".parse().unwrap()));
        let h = Cidr::parse("127.0.0.1").unwrap();
        assert_eq!(h.to_string(), "127.0.0.1/32");
        assert!(h.contains("127.0.0.1".parse().unwrap()));
        assert!(!h.contains("127.0.0.2".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("203.0.113.5".parse().unwrap()));
        assert!(!all.contains("2001:db8::1".parse().unwrap()));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!v6.contains("2001:db9::1".parse().unwrap()));
        assert!(Cidr::parse("::/0")
            .unwrap()
            .contains("::1".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "10.0.0.1/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0/8",
            "localhost",
            "",
            "2001:db8::/129",
            "10.0.0.0/8/8",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        let e = Cidr::parse("10.0.0.1/8").unwrap_err();
        assert!(e.contains("10.0.0.0/8"), "{e}");
        assert!(!Cidr::parse("a\nb").unwrap_err().contains('\n'));
    }
}
