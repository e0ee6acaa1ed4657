//! One HTTP/2 connection that downloads a large file on one stream and,
//! meanwhile, asks for a small file on other streams, one at a time: the
//! small file's latency says whether the server's streams share the
//! connection's send side fairly (issue 38: "a 1 KiB file asked for during
//! a 700 MB download on the same connection comes back within
//! milliseconds"). h2load cannot mix requests on one connection, so this
//! is a client of its own, over rustls with ALPN `h2`.
//!
//! It decodes no HPACK: its requests use the static table and literals,
//! and a response is judged by its DATA bytes, which must equal the file's
//! size (an error page would not).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// The window the client gives each stream and the connection (1 GiB,
/// h2load's default): the download is never window-bound.
const WINDOW: u32 = 1 << 30;
/// Bytes received on a window before it is topped up again.
const WINDOW_REFILL: u64 = 256 << 20;
/// How long one read waits before the loop looks at the clock again.
const READ_POLL: Duration = Duration::from_millis(1);
/// The longest a whole run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// Most bytes buffered from the server before a frame completes (the
/// largest frame the client allows is 16 KiB, the default).
const MAX_BUFFERED: usize = 1 << 20;

/// What to fetch, and from where.
pub struct Mixed<'a> {
    pub addr: SocketAddr,
    pub ca: &'a Path,
    /// The large file's path (no leading slash) and size.
    pub large: (&'a str, u64),
    /// The small file's path and size.
    pub small: (&'a str, u64),
    /// The pause between one small response and the next request.
    pub gap: Duration,
}

/// Runs the download once: the large file's MB/s, and the small file's
/// fetches with their p50, p99 and maximum latency in ms. The first small
/// request goes right behind the large one, and the last one asked for
/// during the download is waited for, so there is at least one.
pub fn run(m: &Mixed) -> Result<BTreeMap<String, f64>> {
    let cfg = crate::h2idle::client_config(m.ca)?;
    let mut sock = TcpStream::connect_timeout(&m.addr, Duration::from_secs(10))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    sock.set_write_timeout(Some(Duration::from_secs(10)))?;
    let name = "localhost".try_into().map_err(|_| anyhow!("server name"))?;
    let mut tls = rustls::ClientConnection::new(cfg, name)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut sock).context("the TLS handshake")?;
    }
    if tls.alpn_protocol() != Some(b"h2") {
        bail!("the server did not choose h2 by ALPN");
    }
    sock.set_read_timeout(Some(READ_POLL))?;
    let authority = format!("localhost:{}", m.addr.port());

    let mut out = crate::h2idle::PREFACE.to_vec();
    // SETTINGS: ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 1 GiB.
    let mut settings = Vec::new();
    settings.extend_from_slice(&2u16.to_be_bytes());
    settings.extend_from_slice(&0u32.to_be_bytes());
    settings.extend_from_slice(&4u16.to_be_bytes());
    settings.extend_from_slice(&WINDOW.to_be_bytes());
    frame(&mut out, 4, 0, 0, &settings);
    window_update(&mut out, 0, WINDOW - 65_535);
    let t0 = Instant::now();
    request(&mut out, 1, &authority, m.large.0);
    send(&mut tls, &mut sock, &out)?;

    let mut large_bytes = 0u64;
    let mut large_unacked = 0u64;
    let mut conn_unacked = 0u64;
    let mut large_done: Option<Duration> = None;
    // The small request in flight: its stream, when it was sent, its bytes.
    let mut small: Option<(u32, Instant, u64)> = None;
    let mut next_small = t0;
    let mut next_id = 3u32;
    let mut lat_ms: Vec<f64> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut plain = vec![0u8; 64 << 10];

    // Until the download ends, and the small fetch asked for during it.
    while large_done.is_none() || small.is_some() {
        if t0.elapsed() > RUN_TIMEOUT {
            bail!("the download took longer than {RUN_TIMEOUT:?}");
        }
        let now = Instant::now();
        if small.is_none() && large_done.is_none() && now >= next_small {
            let mut o = Vec::new();
            request(&mut o, next_id, &authority, m.small.0);
            send(&mut tls, &mut sock, &o)?;
            small = Some((next_id, now, 0));
            next_id += 2;
        }
        match tls.read_tls(&mut sock) {
            Ok(0) => bail!("the server closed the connection"),
            Ok(_) => {
                tls.process_new_packets().map_err(|e| anyhow!("TLS: {e}"))?;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("reading from the server"),
        }
        loop {
            match tls.reader().read(&mut plain) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&plain[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading plaintext"),
            }
        }
        if buf.len() > MAX_BUFFERED {
            bail!("a frame larger than the client allows");
        }
        let mut at = 0;
        let mut reply = Vec::new();
        while at + 9 <= buf.len() {
            let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
            if at + 9 + len > buf.len() {
                break;
            }
            let (kind, flags) = (buf[at + 3], buf[at + 4]);
            let id = u32::from_be_bytes([buf[at + 5], buf[at + 6], buf[at + 7], buf[at + 8]])
                & 0x7fff_ffff;
            let payload = &buf[at + 9..at + 9 + len];
            at += 9 + len;
            let end = flags & 1 != 0;
            match kind {
                0 => {
                    // DATA: the payload less any padding.
                    let pad = if flags & 8 != 0 && !payload.is_empty() {
                        1 + payload[0] as u64
                    } else {
                        0
                    };
                    let n = (len as u64).saturating_sub(pad);
                    conn_unacked += len as u64;
                    if id == 1 {
                        large_bytes += n;
                        large_unacked += len as u64;
                        if large_unacked >= WINDOW_REFILL && !end {
                            window_update(&mut reply, 1, large_unacked as u32);
                            large_unacked = 0;
                        }
                    } else if let Some((sid, _, b)) = small.as_mut() {
                        if *sid == id {
                            *b += n;
                        }
                    }
                    if conn_unacked >= WINDOW_REFILL {
                        window_update(&mut reply, 0, conn_unacked as u32);
                        conn_unacked = 0;
                    }
                }
                1 | 9 => {}
                3 => bail!("the server reset stream {id}"),
                4 if flags & 1 == 0 => frame(&mut reply, 4, 1, 0, &[]),
                6 if flags & 1 == 0 => frame(&mut reply, 6, 1, 0, payload),
                7 => bail!(
                    "GOAWAY from the server, error {}",
                    payload
                        .get(4..8)
                        .map_or(0, |e| u32::from_be_bytes([e[0], e[1], e[2], e[3]]))
                ),
                _ => {}
            }
            if end && matches!(kind, 0 | 1) {
                if id == 1 {
                    large_done = Some(t0.elapsed());
                } else if let Some((sid, sent, b)) = small {
                    if sid == id {
                        if b != m.small.1 {
                            bail!("the small file came back with {b} bytes, not {}", m.small.1);
                        }
                        lat_ms.push(sent.elapsed().as_secs_f64() * 1e3);
                        small = None;
                        next_small = Instant::now() + m.gap;
                    }
                }
            }
        }
        buf.drain(..at);
        // Also flushes what TLS itself has to say.
        send(&mut tls, &mut sock, &reply)?;
    }
    if large_bytes != m.large.1 {
        bail!(
            "the large file came back with {large_bytes} bytes, not {}",
            m.large.1
        );
    }
    let secs = large_done.expect("loop ends on it").as_secs_f64();
    let mut r = BTreeMap::new();
    r.insert("mb_per_sec".into(), large_bytes as f64 / 1e6 / secs);
    // Not `seconds`: a whole download is the unit here, as in `large`'s
    // siege rows, not a span held to the report's length rule.
    r.insert("download_s".into(), secs);
    r.insert("fetches".into(), 1.0);
    r.insert("small_fetches".into(), lat_ms.len() as f64);
    lat_ms.sort_by(f64::total_cmp);
    if !lat_ms.is_empty() {
        let q =
            |p: f64| lat_ms[((lat_ms.len() as f64 * p).ceil() as usize).clamp(1, lat_ms.len()) - 1];
        r.insert("small_p50_ms".into(), q(0.50));
        r.insert("small_p99_ms".into(), q(0.99));
        r.insert("small_max_ms".into(), lat_ms[lat_ms.len() - 1]);
    }
    Ok(r)
}

/// Appends one frame.
fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, id: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    assert!(len < 1 << 14, "frames stay under the default maximum");
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
}

fn window_update(out: &mut Vec<u8>, id: u32, by: u32) {
    frame(out, 8, 0, id, &by.to_be_bytes());
}

/// A GET as one HEADERS frame with END_STREAM and END_HEADERS. HPACK
/// (RFC 7541): `:method GET` and `:scheme https` are static entries 2 and
/// 7; `:authority` (1) and `:path` (4) are literals without indexing whose
/// names are static entries, their values plain strings of under 127
/// bytes (one length byte, no Huffman).
fn request(out: &mut Vec<u8>, id: u32, authority: &str, path: &str) {
    let path = format!("/{path}");
    assert!(authority.len() < 127 && path.len() < 127);
    let mut h = vec![0x82, 0x87];
    h.push(0x01);
    h.push(authority.len() as u8);
    h.extend_from_slice(authority.as_bytes());
    h.push(0x04);
    h.push(path.len() as u8);
    h.extend_from_slice(path.as_bytes());
    frame(out, 1, 0x5, id, &h);
}

/// Writes `bytes` through TLS, all of it.
fn send(tls: &mut rustls::ClientConnection, sock: &mut TcpStream, bytes: &[u8]) -> Result<()> {
    tls.writer().write_all(bytes)?;
    while tls.wants_write() {
        tls.write_tls(sock).context("writing to the server")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_is_one_headers_frame() {
        let mut out = Vec::new();
        super::request(&mut out, 3, "localhost:8080", "a/b.bin");
        // 9-byte header, then 2 indexed fields and two literals.
        let len = 2 + 2 + 14 + 2 + 8;
        assert_eq!(&out[..9], &[0, 0, len as u8, 1, 5, 0, 0, 0, 3]);
        assert_eq!(&out[9..11], &[0x82, 0x87]);
        assert_eq!(&out[out.len() - 8..], b"/a/b.bin");
    }
}
