//! How fast a 100 KiB response body becomes TLS records, two ways:
//!
//! - `rustls`: what the backends do today (`worker/tls.rs`): the
//!   body is written to a buffered `ServerConnection` in 64 KiB steps
//!   (`writer().write_all`, which copies it into rustls's queue) and the
//!   records are taken out by `write_tls` (another copy, into the send
//!   buffer);
//! - `seal_in_place`: `tlsrec::TlsLink` encrypts each record where the
//!   body already lies, in a buffer laid out by `RecordLayout` (what a disk
//!   read into one iovec per record would fill);
//! - `seal_into`: `TlsLink`'s copying path (one copy into the output), for
//!   reference.
//!
//! Both links are set up by a real handshake with a rustls client over
//! memory. The kernel's copy from the page cache, common to all three, is
//! not in the timing (`memcpy` shows what one copy of the body costs).
//!
//! Run: `cargo run -p spindle --release --example tls_seal`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CipherSuite, ClientConfig, ClientConnection, RootCertStore, ServerConnection};
use spindle::tls::{CertSpec, Shared};
use spindle::tlsrec::{record_config, RecordLayout, RecordSlot, TlsLink};

/// The response body.
const BODY: usize = 100 * 1024;
/// Plaintext per `write_all`, as `worker/tls.rs` does.
const ENCRYPT_STEP: usize = 64 * 1024;
/// Time each measurement runs.
const RUN: Duration = Duration::from_millis(1500);
/// Measurements per way; the median is reported.
const REPEATS: usize = 5;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tls")
        .join(name)
}

fn server_config() -> Arc<rustls::ServerConfig> {
    let spec = CertSpec {
        names: vec![],
        cert: data("p256.pem"),
        key: data("p256.key"),
    };
    Shared::load(&[spec], true).unwrap().current().1
}

fn client(suite: CipherSuite) -> ClientConnection {
    let mut provider = (*spindle::tls::provider()).clone();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(data("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    ClientConnection::new(Arc::new(cfg), name).unwrap()
}

/// Everything `from` wants to send.
fn drain(from: &mut impl FnMut(&mut Vec<u8>) -> bool) -> Vec<u8> {
    let mut v = Vec::new();
    while from(&mut v) {}
    v
}

fn client_bytes(c: &mut ClientConnection) -> Vec<u8> {
    drain(&mut |v| c.wants_write() && c.write_tls(v).is_ok())
}

fn feed_client(c: &mut ClientConnection, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        c.read_tls(&mut bytes).unwrap();
        c.process_new_packets().unwrap();
    }
}

/// A buffered rustls server connection after its handshake.
fn rustls_server(cfg: &Arc<rustls::ServerConfig>, suite: CipherSuite) -> ServerConnection {
    let mut s = ServerConnection::new(cfg.clone()).unwrap();
    s.set_buffer_limit(None);
    let mut c = client(suite);
    while s.is_handshaking() || c.is_handshaking() {
        let b = client_bytes(&mut c);
        s.read_tls(&mut &b[..]).unwrap();
        s.process_new_packets().unwrap();
        let b = drain(&mut |v| s.wants_write() && s.write_tls(v).is_ok());
        feed_client(&mut c, &b);
    }
    s
}

/// A record link after its handshake.
fn link(cfg: &Arc<rustls::ServerConfig>, suite: CipherSuite) -> TlsLink {
    let cfg = record_config(cfg);
    let mut link = TlsLink::new(&cfg).unwrap();
    let mut c = client(suite);
    let mut inbuf = Vec::new();
    while link.is_handshaking() {
        inbuf.extend(client_bytes(&mut c));
        let mut out = Vec::new();
        link.receive(&mut inbuf, &mut out, |_| {}).unwrap();
        feed_client(&mut c, &out);
    }
    link
}

/// The median of `REPEATS` runs of `f` (one 100 KiB body each call), in
/// GB/s of body.
fn measure(mut f: impl FnMut()) -> f64 {
    let mut rates: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let (t, mut n) = (Instant::now(), 0u64);
            while t.elapsed() < RUN {
                for _ in 0..16 {
                    f();
                }
                n += 16;
            }
            (n * BODY as u64) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[REPEATS / 2]
}

/// Bodies in turn: 1 (hot in the L2 cache) or [`MANY`] (each response
/// in its own buffers, as with many connections: memory bandwidth counts).
const MANY: usize = 192;

fn main() {
    let cfg = server_config();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!("100 KiB body to TLS 1.3 records, GB/s of body (median of {REPEATS}), {cpu}");
    for bodies in [1, MANY] {
        println!(
            "{bodies} bodies in turn ({} KiB of bodies):",
            bodies * BODY / 1024
        );
        run(&cfg, bodies);
    }
}

fn run(cfg: &Arc<rustls::ServerConfig>, bodies: usize) {
    let body: Vec<Vec<u8>> = (0..bodies)
        .map(|b| (0..BODY).map(|i| (i * 7 + b) as u8).collect())
        .collect();
    let mut outs: Vec<Vec<u8>> = (0..bodies).map(|_| Vec::with_capacity(2 * BODY)).collect();
    let mut turn = 0;
    let mut next = move || {
        turn = (turn + 1) % bodies;
        turn
    };
    let copy = measure(|| {
        let i = next();
        outs[i].clear();
        outs[i].extend_from_slice(&body[i]);
        std::hint::black_box(&outs[i]);
    });
    println!("  memcpy of the body (one copy): {copy:.2}");
    for suite in [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let mut s = rustls_server(cfg, suite);
        let rustls = measure(|| {
            let i = next();
            let out = &mut outs[i];
            out.clear();
            for step in body[i].chunks(ENCRYPT_STEP) {
                s.writer().write_all(step).unwrap();
                while s.wants_write() {
                    s.write_tls(out).unwrap();
                }
            }
            std::hint::black_box(out);
        });

        let mut l = link(cfg, suite);
        let layout = RecordLayout::for_link(&l, 0);
        let len = layout.buffer_len(BODY);
        let slots: Vec<RecordSlot> = layout.slots(len, BODY).collect();
        let mut bufs: Vec<Vec<u8>> = body
            .iter()
            .map(|b| {
                let mut buf = vec![0u8; len];
                let mut at = 0;
                for s in &slots {
                    buf[s.payload.clone()].copy_from_slice(&b[at..at + s.payload.len()]);
                    at += s.payload.len();
                }
                buf
            })
            .collect();
        // Each round seals a buffer again (the last round's ciphertext:
        // the same work as a fresh read's plaintext).
        let in_place = measure(|| {
            let buf = &mut bufs[next()];
            for s in &slots {
                l.seal_in_place(&mut buf[s.record.clone()], s.plaintext_len)
                    .unwrap();
            }
            std::hint::black_box(buf);
        });

        let mut l = link(cfg, suite);
        let into = measure(|| {
            let i = next();
            outs[i].clear();
            l.seal_into(&mut outs[i], &body[i]).unwrap();
            std::hint::black_box(&outs[i]);
        });
        println!(
            "  {suite:?}: rustls writer+write_tls {rustls:.2}, seal_in_place {in_place:.2} \
             ({:.2}x), seal_into {into:.2}",
            in_place / rustls
        );
    }
}
