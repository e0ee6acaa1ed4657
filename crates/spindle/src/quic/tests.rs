//! The QUIC driver and its UDP socket against a real HTTP/3 client:
//! `gtlsclient` (Debian's ngtcp2-client, on nghttp3 and GnuTLS) fetches
//! bodies a small server loop here makes from each request's path
//! (`/N`: N bytes of a known pattern), and every byte is compared. The
//! whole server (files, the exchange, the worker's loop) is not in this
//! test: it is the QUIC layer's own.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::driver::{Happened, Quic, Wrote};
use super::udp::{self, Udp};
use super::RECV_BUFFER;

/// Body bytes one `Quic::body` call carries in the test's loop.
const CHUNK: usize = 64 << 10;

fn pattern(at: u64) -> u8 {
    (at.wrapping_mul(31) ^ (at >> 11)) as u8
}

/// One response in progress: its stream and the bytes left.
struct Sending {
    conn: quinn_proto::ConnectionHandle,
    stream: u64,
    sent: u64,
    size: u64,
    held: bool,
}

fn server(addr: &str) -> (Udp, Quic) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let spec = crate::tls::CertSpec {
        names: vec![],
        cert: data.join("p256.pem"),
        key: data.join("p256.key"),
    };
    let https = crate::tls::server_config(&[spec]).expect("test certificate");
    let tls = super::config::quic_tls(&https).expect("QUIC's TLS");
    let server = super::config::server(tls, &[7; 32]);
    let endpoint = super::config::endpoint(0, 0, &[9; 32]);
    let mut group = udp::bind_group(addr.parse().unwrap(), 1).expect("a UDP socket");
    (group.remove(0), Quic::new(endpoint, server, 100))
}

/// Serves `/N` requests until `stop`.
fn serve(mut udp: Udp, mut quic: Quic, stop: Arc<AtomicBool>) {
    let mut buf = vec![0u8; RECV_BUFFER];
    let mut sending: Vec<Sending> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while let Some(r) = udp.recv(&mut buf).expect("recv") {
            quic.recv(now, r.from, r.ecn, &buf[..r.len], r.stride);
        }
        quic.timeouts(now);
        while let Some(e) = quic.poll_event() {
            match e {
                Happened::Request {
                    conn,
                    stream,
                    request,
                    ..
                } => {
                    let size: u64 = request.path()[1..].parse().unwrap_or(0);
                    let mut f = spindle_core::Fields::new();
                    f.push_u64("content-length", size);
                    f.push("content-type", b"application/octet-stream");
                    if quic.respond(conn, stream, 200, &f, size == 0, now) && size > 0 {
                        sending.push(Sending {
                            conn,
                            stream,
                            sent: 0,
                            size,
                            held: false,
                        });
                    }
                }
                Happened::Drained { conn, stream } => {
                    for s in sending
                        .iter_mut()
                        .filter(|s| s.conn == conn && s.stream == stream)
                    {
                        s.held = false;
                    }
                }
                Happened::Gone { conn, stream } => {
                    sending.retain(|s| !(s.conn == conn && s.stream == stream))
                }
            }
        }
        for s in sending.iter_mut().filter(|s| !s.held) {
            let n = (s.size - s.sent).min(CHUNK as u64);
            let chunk: Vec<u8> = (s.sent..s.sent + n).map(pattern).collect();
            match quic.body(s.conn, s.stream, Bytes::from(chunk), now) {
                Wrote::Taken => {}
                Wrote::Held => s.held = true,
                Wrote::Gone => s.sent = s.size,
            }
            s.sent += n;
            if s.sent == s.size {
                quic.finish(s.conn, s.stream, now);
            }
        }
        sending.retain(|s| s.sent < s.size);
        quic.send(&mut udp, now);
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn gtlsclient_fetches_bodies_byte_for_byte_over_http3() {
    if Command::new("gtlsclient")
        .arg("--version")
        .output()
        .is_err()
    {
        return test_skip::skip_or_fail("gtlsclient is not installed (Debian ngtcp2-client)");
    }
    let (udp, quic) = server("127.0.0.1:0");
    let port = udp.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || serve(udp, quic, stop))
    };
    let dir = tempfile::tempdir().unwrap();
    let sizes = [0u64, 1, 1000, 65_536, 1 << 20, (5 << 20) + 3];
    let urls: Vec<String> = sizes
        .iter()
        .map(|n| format!("https://localhost:{port}/{n}"))
        .collect();
    let out = Command::new("gtlsclient")
        .args(["--quiet", "--exit-on-all-streams-close", "--timeout=20s"])
        .arg(format!("--download={}", dir.path().display()))
        .args(["127.0.0.1", &port.to_string()])
        .args(&urls)
        .output()
        .expect("gtlsclient runs");
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    assert!(
        out.status.success(),
        "gtlsclient: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in sizes {
        let got = std::fs::read(dir.path().join(n.to_string())).unwrap_or_default();
        assert_eq!(got.len() as u64, n, "/{n}: length");
        let bad = got
            .iter()
            .enumerate()
            .position(|(i, &b)| b != pattern(i as u64));
        assert_eq!(bad, None, "/{n}: first wrong byte");
    }
}

/// An empty datagram (a UDP payload of 0 bytes) reaches the driver as a
/// receive of no bytes: dropped, and nothing answers it. (It once failed
/// an assertion and took the worker with it.)
#[test]
fn an_empty_datagram_is_dropped() {
    let (udp, mut quic) = server("127.0.0.1:0");
    let from = "127.0.0.1:9".parse().unwrap();
    let mut buf = vec![0; RECV_BUFFER];
    let me = udp.local_addr().unwrap();
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(&[], me).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let r = udp
        .recv(&mut buf)
        .expect("recv")
        .expect("the empty datagram");
    assert_eq!((r.len, r.stride), (0, 0));
    quic.recv(Instant::now(), r.from, r.ecn, &buf[..r.len], r.stride);
    quic.recv(Instant::now(), from, 0, &[], 0);
    assert!(!quic.sending());
    assert!(quic.poll_event().is_none());
}
