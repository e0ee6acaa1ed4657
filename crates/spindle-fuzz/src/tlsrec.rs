//! The `tlsrec` check: client bytes into spindle's own TLS record layer
//! (`spindle::tlsrec::TlsLink`), during the handshake and after it.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CipherSuite, ClientConfig, ClientConnection, RootCertStore};
use spindle::tlsrec::{Fatal, Progress, RecordLayout, RecordSlot, TlsLink, MAX_INBUF_BYTES};

use crate::{num, xorshift};

/// Most bytes the link may write for one input (handshake, answers,
/// alerts): the script's sends are bounded far below it.
const MAX_OUT: usize = 4 << 20;
/// Most operations one script runs.
const MAX_OPS: usize = 256;
/// Most application data bytes one operation sends.
const MAX_SEND: usize = 40_000;
/// The suites a script may pick (its second byte).
const SUITES: [CipherSuite; 4] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

fn data_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spindle/tests/data/tls")
}

/// The server's configuration, extractable for the record layer.
fn server_config() -> Arc<rustls::ServerConfig> {
    static CFG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CFG.get_or_init(|| spindle::tlsrec::record_config(&crate::tls_config()))
        .clone()
}

/// A client offering only `suite`, trusting the test CA.
fn client_config(suite: CipherSuite) -> Arc<ClientConfig> {
    let mut provider = (*spindle::tls::provider()).clone();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    let version = match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256 | CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => {
            &rustls::version::TLS13
        }
        _ => &rustls::version::TLS12,
    };
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(data_dir().join("ca.pem")).expect("ca.pem") {
        roots.add(c.expect("a certificate")).expect("the CA");
    }
    let cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .expect("the version")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

/// The link under test and what went through it.
struct Harness {
    link: TlsLink,
    inbuf: Vec<u8>,
    /// Plaintext the link handed on.
    got: Vec<u8>,
    /// Bytes the link wrote.
    written: usize,
    /// The link failed: nothing is accepted after.
    failed: bool,
    peer_closed: bool,
}

impl Harness {
    /// `bytes` into the link; what it writes goes to `out`. Checks the
    /// link's promises whatever the bytes.
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<Progress, Fatal> {
        self.inbuf.extend_from_slice(bytes);
        let (before, was_closed) = (self.got.len(), self.peer_closed);
        let got = &mut self.got;
        let at = out.len();
        let r = self
            .link
            .receive(&mut self.inbuf, out, |p| got.extend_from_slice(p));
        self.written += out.len() - at;
        assert!(self.written <= MAX_OUT, "{} bytes written", self.written);
        assert!(
            self.inbuf.len() <= MAX_INBUF_BYTES,
            "inbuf {}",
            self.inbuf.len()
        );
        if self.failed {
            assert!(matches!(r, Err(Fatal::NotOpen)), "after a failure: {r:?}");
        }
        if was_closed && !bytes.is_empty() {
            assert!(r.is_err(), "bytes after close_notify: {r:?}");
        }
        match &r {
            Err(_) => self.failed = true,
            Ok(Progress::PeerClosed) => self.peer_closed = true,
            Ok(_) => {}
        }
        if was_closed {
            assert_eq!(before, self.got.len(), "plaintext after close_notify");
        }
        r
    }
}

/// Bytes from a client on an HTTPS port through `TlsLink`. The first
/// byte's low bit picks the mode:
/// - even: the rest is the client's bytes from the first, split as the
///   second byte's seed says (the handshake under fuzz);
/// - odd: a real rustls client completes a handshake (the suite from the
///   second byte), then the rest is a script of client operations (send
///   data, KeyUpdate, close_notify, raw bytes, a flipped bit, a cut,
///   delivery in pieces) and server answers (sealed in place and copied).
///
/// Checked: no panic; nothing accepted after a failure; input buffered
/// stays under `MAX_INBUF_BYTES`; what the link writes stays bounded; and
/// while the client's bytes arrive untouched, the link fails nothing and
/// hands on exactly what the client sent, in order.
pub fn tlsrec(data: &[u8]) {
    let Ok(link) = TlsLink::new(&server_config()) else {
        panic!("a link for the configuration");
    };
    let mut h = Harness {
        link,
        inbuf: Vec::new(),
        got: Vec::new(),
        written: 0,
        failed: false,
        peer_closed: false,
    };
    match data.first() {
        Some(mode) if mode & 1 == 1 => script(&mut h, data),
        _ => handshake_bytes(&mut h, data),
    }
}

/// The handshake under fuzz: raw client bytes, in pieces.
fn handshake_bytes(h: &mut Harness, data: &[u8]) {
    let mut split = num(data, 1, 1) | 1;
    let mut rest = data.get(2..).unwrap_or(&[]);
    let mut out = Vec::new();
    while !rest.is_empty() {
        split = xorshift(split);
        let n = 1 + (split as usize % 512).min(rest.len() - 1);
        let r = h.feed(&rest[..n], &mut out);
        rest = &rest[n..];
        if r.is_err() {
            return;
        }
    }
}

/// A rustls client and the link after their handshake, or `None` if the
/// handshake failed (it must not).
fn connect(h: &mut Harness, suite: CipherSuite) -> ClientConnection {
    let name = ServerName::try_from("localhost").expect("a name");
    let mut client = ClientConnection::new(client_config(suite), name).expect("a client");
    for _ in 0..8 {
        let wire = client_wire(&mut client);
        let mut out = Vec::new();
        h.feed(&wire, &mut out).expect("a clean handshake");
        let mut plain = Vec::new();
        to_client(&mut client, &out, &mut plain).expect("the server's handshake");
        if h.link.is_open() && !client.is_handshaking() && !client.wants_write() {
            return client;
        }
    }
    panic!("no handshake with {suite:?}");
}

fn client_wire(client: &mut ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while client.wants_write() {
        if client.write_tls(&mut wire).is_err() {
            break;
        }
    }
    wire
}

/// The link's bytes into the client; its plaintext into `plain`.
fn to_client(
    client: &mut ClientConnection,
    mut bytes: &[u8],
    plain: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    while !bytes.is_empty() {
        if client.read_tls(&mut bytes).is_err() {
            return Err(rustls::Error::General("client buffer".into()));
        }
        client.process_new_packets()?;
        let _ = client.reader().read_to_end(plain);
    }
    Ok(())
}

/// What a script has done to the client's bytes on the way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    Untouched,
    Tampered,
}

/// The post-handshake script.
fn script(h: &mut Harness, data: &[u8]) {
    let suite = SUITES[num(data, 1, 1) as usize % SUITES.len()];
    let mut client = connect(h, suite);
    let mut ops = data.get(2..).unwrap_or(&[]);
    let (mut wire, mut state, mut sent) = (Vec::new(), Wire::Untouched, Vec::new());
    let mut client_closed = false;
    for _ in 0..MAX_OPS {
        let Some((&op, rest)) = ops.split_first() else {
            break;
        };
        let arg = num(rest, 0, 2) as usize;
        ops = rest.get(2..).unwrap_or(&[]);
        match op % 8 {
            0 if !client_closed => {
                let n = arg % MAX_SEND;
                let bytes: Vec<u8> = (0..n).map(|i| (i as u8) ^ op).collect();
                for piece in bytes.chunks(16_384) {
                    let _ = client.writer().write_all(piece);
                    wire.extend(client_wire(&mut client));
                }
                sent.extend_from_slice(&bytes);
            }
            1 if !client_closed => {
                let _ = client.refresh_traffic_keys();
                wire.extend(client_wire(&mut client));
            }
            2 if !client_closed => {
                client.send_close_notify();
                client_closed = true;
                wire.extend(client_wire(&mut client));
            }
            3 => {
                let n = (arg % 64).min(ops.len());
                wire.extend_from_slice(&ops[..n]);
                ops = &ops[n..];
                state = Wire::Tampered;
            }
            4 if !wire.is_empty() => {
                let i = arg % wire.len();
                wire[i] ^= 1 << (op >> 5);
                state = Wire::Tampered;
            }
            5 if !wire.is_empty() => {
                wire.truncate(arg % wire.len());
                state = Wire::Tampered;
            }
            6 => {
                deliver(h, &mut client, &mut wire, arg, state);
                if state == Wire::Untouched {
                    assert!(sent.starts_with(&h.got), "the link's plaintext");
                }
            }
            _ => answer(h, &mut client, arg),
        }
    }
    deliver(h, &mut client, &mut wire, 255, state);
    if state == Wire::Untouched && !h.failed {
        assert_eq!(h.got, sent, "the link's plaintext, whole");
    }
}

/// The client's pending bytes into the link in pieces of `arg % 256 + 1`
/// (untouched bytes must not fail it), and what the link wrote (a
/// KeyUpdate, an alert) back to the client.
fn deliver(
    h: &mut Harness,
    client: &mut ClientConnection,
    wire: &mut Vec<u8>,
    arg: usize,
    state: Wire,
) {
    let piece = arg % 256 + 1;
    let mut out = Vec::new();
    for chunk in wire.chunks(piece) {
        let untouched = state == Wire::Untouched && !h.failed;
        let r = h.feed(chunk, &mut out);
        assert!(
            !untouched || r.is_ok(),
            "untouched client bytes failed the link: {r:?}"
        );
        if r.is_err() {
            break;
        }
    }
    wire.clear();
    let _ = to_client(client, &out, &mut Vec::new());
}

/// The server answers: `arg` bytes, the first record copied, the rest
/// sealed in place; the client must read them while the link is open.
fn answer(h: &mut Harness, client: &mut ClientConnection, arg: usize) {
    if !h.link.is_open() {
        return;
    }
    let body: Vec<u8> = (0..arg % MAX_SEND).map(|i| i as u8).collect();
    let mut out = Vec::new();
    let (head, rest) = body.split_at(body.len().min(100));
    if h.link.seal_into(&mut out, head).is_err() || h.link.rekey_if_due(&mut out).is_err() {
        return;
    }
    let layout = RecordLayout::for_link(&h.link, 0);
    let mut buf = vec![0u8; layout.buffer_len(rest.len())];
    let slots: Vec<RecordSlot> = layout.slots(buf.len(), rest.len()).collect();
    let mut at = 0;
    for s in &slots {
        buf[s.payload.clone()].copy_from_slice(&rest[at..at + s.payload.len()]);
        at += s.payload.len();
        let n = h
            .link
            .seal_in_place(&mut buf[s.record.clone()], s.plaintext_len)
            .expect("an open link seals");
        out.extend_from_slice(&buf[s.record.start..s.record.start + n]);
    }
    h.written += out.len();
    let mut plain = Vec::new();
    if to_client(client, &out, &mut plain).is_ok() {
        assert_eq!(plain, body, "the client reads the answer");
    }
}
