//! A real rustls client (the buffered `ClientConnection`) against
//! [`TlsLink`] through byte buffers; hostile records forged with the
//! client's own keys (extracted after its handshake).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CipherSuite, ClientConfig, ClientConnection, HandshakeKind, RootCertStore};

use super::*;
use crate::tls::{CertSpec, Shared};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tls")
        .join(name)
}

/// spindle's configuration (h2 offered), made extractable.
fn server_config() -> Arc<ServerConfig> {
    let spec = CertSpec {
        names: vec![],
        cert: data("p256.pem"),
        key: data("p256.key"),
    };
    let shared = Shared::load(&[spec], true).unwrap();
    record_config(&shared.current().1)
}

const TLS13_SUITES: [CipherSuite; 3] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
];
const TLS12_SUITES: [CipherSuite; 3] = [
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// A client offering only `suite`, and `alpn`.
fn client_config(suite: CipherSuite, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut provider = (*crate::tls::provider()).clone();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    assert_eq!(provider.cipher_suites.len(), 1, "{suite:?}");
    let version = match provider.cipher_suites[0] {
        SupportedCipherSuite::Tls13(_) => &rustls::version::TLS13,
        SupportedCipherSuite::Tls12(_) => &rustls::version::TLS12,
    };
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(data("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg.enable_secret_extraction = true;
    Arc::new(cfg)
}

/// A client and a link, and the buffers between them.
struct Pair {
    client: ClientConnection,
    link: TlsLink,
    inbuf: Vec<u8>,
    /// Plaintext the link handed on.
    got: Vec<u8>,
    /// What the link put in `out`, in order.
    sent: Vec<u8>,
    /// Plaintext the client read.
    client_got: Vec<u8>,
}

impl Pair {
    fn new(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>) -> Pair {
        let name = ServerName::try_from("localhost").unwrap();
        Pair {
            client: ClientConnection::new(client.clone(), name).unwrap(),
            link: TlsLink::new(server).unwrap(),
            inbuf: Vec::new(),
            got: Vec::new(),
            sent: Vec::new(),
            client_got: Vec::new(),
        }
    }

    /// Everything the client wants to send.
    fn client_bytes(&mut self) -> Vec<u8> {
        let mut wire = Vec::new();
        while self.client.wants_write() {
            self.client.write_tls(&mut wire).unwrap();
        }
        wire
    }

    /// `bytes` into the link; what it sends is kept in `sent`.
    fn server_gets(&mut self, bytes: &[u8]) -> Result<Progress, Fatal> {
        self.inbuf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let got = &mut self.got;
        let r = self
            .link
            .receive(&mut self.inbuf, &mut out, |d| got.extend_from_slice(d));
        self.sent.extend_from_slice(&out);
        r
    }

    /// What the link sent so far, into the client.
    fn client_gets(&mut self) -> Result<(), rustls::Error> {
        let sent = std::mem::take(&mut self.sent);
        feed(&mut self.client, &sent, &mut self.client_got)
    }

    /// One round: the client's bytes to the link, the link's back.
    fn round(&mut self) -> Progress {
        let bytes = self.client_bytes();
        let p = self.server_gets(&bytes).unwrap();
        self.client_gets().unwrap();
        p
    }

    /// `data` from the client to the link, in pieces the client buffers.
    fn client_send(&mut self, data: &[u8]) -> Progress {
        let mut last = Progress::Open;
        for piece in data.chunks(32 * 1024) {
            self.client.writer().write_all(piece).unwrap();
            let bytes = self.client_bytes();
            last = self.server_gets(&bytes).unwrap();
        }
        last
    }

    /// Rounds until both sides are done with the handshake.
    fn handshake(&mut self) -> Vec<Progress> {
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(self.round());
            if self.link.is_open() && !self.client.is_handshaking() && !self.client.wants_write() {
                return seen;
            }
        }
        panic!("no handshake: {seen:?}");
    }

    /// Plaintext the client has read.
    fn client_plain(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.client_got)
    }

    /// The link seals `body` in place into records laid out by
    /// [`RecordLayout`], as a loop would after a disk read.
    fn seal_body_in_place(&mut self, body: &[u8]) {
        let layout = RecordLayout::for_link(&self.link, 0);
        let mut buf = vec![0u8; layout.buffer_len(body.len())];
        let slots: Vec<RecordSlot> = layout.slots(buf.len(), body.len()).collect();
        let mut at = 0;
        for s in &slots {
            buf[s.payload.clone()].copy_from_slice(&body[at..at + s.payload.len()]);
            at += s.payload.len();
        }
        assert_eq!(at, body.len());
        for s in &slots {
            let n = self
                .link
                .seal_in_place(&mut buf[s.record.clone()], s.plaintext_len)
                .unwrap();
            assert_eq!(n, s.record.len());
        }
        let end = slots.last().map_or(0, |s| s.record.end);
        assert_eq!(end, buf.len(), "records end to end");
        self.sent.extend_from_slice(&buf);
    }
}

/// `bytes` into a rustls client, in the pieces it takes; the plaintext
/// it reads to `plain`.
fn feed(
    client: &mut ClientConnection,
    mut bytes: &[u8],
    plain: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    while !bytes.is_empty() {
        client.read_tls(&mut bytes).unwrap();
        client.process_new_packets()?;
        match client.reader().read_to_end(plain) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
        }
    }
    Ok(())
}

fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A handshake whose client wrote `request` before it (so it rides with
/// the client's Finished), then data both ways, both sealing paths.
fn exchange(server: &Arc<ServerConfig>, suite: CipherSuite, alpn: &[&[u8]]) -> Pair {
    let mut p = Pair::new(server, &client_config(suite, alpn));
    p.client
        .writer()
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .unwrap();
    let seen = p.handshake();
    assert_eq!(p.got, b"GET / HTTP/1.1\r\n\r\n", "{suite:?}");
    assert!(seen.contains(&Progress::Established), "{seen:?}");
    assert_eq!(p.link.cipher_suite(), Some(suite));
    for len in [0, 1, 100, MAX_PLAINTEXT, MAX_PLAINTEXT + 1, 100 * 1024] {
        let b = body(len);
        p.link
            .seal_into(&mut p.sent, b"HTTP/1.1 200 OK\r\n\r\n")
            .unwrap();
        p.seal_body_in_place(&b);
        p.client_gets().unwrap();
        let mut want = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        want.extend_from_slice(&b);
        assert!(p.client_plain() == want, "{suite:?} {len}");
        p.got.clear();
        assert_eq!(p.client_send(&b), Progress::Open);
        assert!(p.got == b, "{suite:?} {len} to the server");
    }
    p
}

#[test]
fn tls13_every_suite_both_ways() {
    let server = server_config();
    for suite in TLS13_SUITES {
        let p = exchange(&server, suite, &[b"h2", b"http/1.1"]);
        assert_eq!(p.link.protocol_version(), Some(ProtocolVersion::TLSv1_3));
        assert_eq!((p.link.header_room(), p.link.tail_room()), (5, 17));
    }
}

#[test]
fn tls12_every_suite_both_ways() {
    let server = server_config();
    for suite in TLS12_SUITES {
        let p = exchange(&server, suite, &[b"http/1.1"]);
        assert_eq!(p.link.protocol_version(), Some(ProtocolVersion::TLSv1_2));
        let head = if suite == CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 {
            5
        } else {
            13
        };
        assert_eq!((p.link.header_room(), p.link.tail_room()), (head, 16));
    }
}

#[test]
fn alpn_h2_or_http11_as_offered() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS12_SUITES[0]] {
        let p = exchange(&server, suite, &[b"h2", b"http/1.1"]);
        assert_eq!(p.link.alpn(), Some(&b"h2"[..]));
        assert_eq!(p.client.alpn_protocol(), Some(&b"h2"[..]));
        let p = exchange(&server, suite, &[b"http/1.1"]);
        assert_eq!(p.link.alpn(), Some(&b"http/1.1"[..]));
        let p = exchange(&server, suite, &[]);
        assert_eq!(p.link.alpn(), None);
    }
}

#[test]
fn ciphertext_one_byte_at_a_time() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS12_SUITES[0], TLS12_SUITES[2]] {
        let mut p = Pair::new(&server, &client_config(suite, &[b"h2"]));
        p.client.writer().write_all(b"early request").unwrap();
        let mut established = 0;
        for _ in 0..8 {
            for b in p.client_bytes() {
                if p.server_gets(&[b]).unwrap() == Progress::Established {
                    established += 1;
                }
            }
            p.client_gets().unwrap();
            if p.link.is_open() && !p.client.wants_write() {
                break;
            }
        }
        assert_eq!(established, 1, "{suite:?}");
        assert_eq!(p.got, b"early request");
        for piece in body(40_000).chunks(20_000) {
            p.client.writer().write_all(piece).unwrap();
            for b in p.client_bytes() {
                p.server_gets(&[b]).unwrap();
                assert!(p.inbuf.len() < HEADER_LEN + MAX_CIPHERTEXT_12);
            }
        }
        assert_eq!(&p.got[b"early request".len()..], &body(40_000)[..]);
    }
}

#[test]
fn client_key_update_then_both_ways() {
    let server = server_config();
    for suite in TLS13_SUITES {
        let mut p = exchange(&server, suite, &[b"h2"]);
        for round in 0..3 {
            p.client.refresh_traffic_keys().unwrap();
            p.client.writer().write_all(b"after the update").unwrap();
            p.got.clear();
            let bytes = p.client_bytes();
            assert_eq!(p.server_gets(&bytes).unwrap(), Progress::Open);
            assert_eq!(p.got, b"after the update", "{suite:?} {round}");
            // rustls asks for ours: it is in `sent`, before this.
            p.link.seal_into(&mut p.sent, b"answer").unwrap();
            p.seal_body_in_place(&body(20_000));
            p.client_gets().unwrap();
            let mut want = b"answer".to_vec();
            want.extend_from_slice(&body(20_000));
            assert!(p.client_plain() == want, "{suite:?} {round}");
        }
    }
}

#[test]
fn sessions_resume() {
    let server = server_config();
    for suite in [
        TLS13_SUITES[0],
        TLS13_SUITES[2],
        TLS12_SUITES[0],
        TLS12_SUITES[2],
    ] {
        let client = client_config(suite, &[b"http/1.1"]);
        let mut kinds = Vec::new();
        for _ in 0..3 {
            let mut p = Pair::new(&server, &client);
            p.client.writer().write_all(b"ping").unwrap();
            p.handshake();
            assert_eq!(p.got, b"ping");
            p.link.seal_into(&mut p.sent, b"pong").unwrap();
            p.client_gets().unwrap();
            assert_eq!(p.client_plain(), b"pong");
            kinds.push(p.client.handshake_kind());
        }
        assert_eq!(kinds[0], Some(HandshakeKind::Full), "{suite:?}");
        assert_eq!(kinds[1], Some(HandshakeKind::Resumed), "{suite:?}");
        assert_eq!(kinds[2], Some(HandshakeKind::Resumed), "{suite:?}");
    }
}

/// A ticketer that makes none: the server falls back on its session
/// cache (TLS 1.2 session IDs; TLS 1.3 tickets that name a cache entry).
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

#[test]
fn sessions_resume_from_the_cache() {
    let mut stateful = (*server_config()).clone();
    stateful.ticketer = Arc::new(NoTickets);
    let server = Arc::new(stateful);
    for suite in [TLS13_SUITES[0], TLS12_SUITES[0]] {
        let mut client = (*client_config(suite, &[b"h2"])).clone();
        client.resumption = rustls::client::Resumption::in_memory_sessions(8)
            .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
        let client = Arc::new(client);
        let kinds: Vec<_> = (0..2)
            .map(|_| {
                let mut p = Pair::new(&server, &client);
                p.handshake();
                assert_eq!(p.client_send(b"hi"), Progress::Open);
                p.client.handshake_kind()
            })
            .collect();
        assert_eq!(
            kinds,
            [Some(HandshakeKind::Full), Some(HandshakeKind::Resumed)],
            "{suite:?}"
        );
    }
}

#[test]
fn close_notify_both_ways() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS12_SUITES[1]] {
        let mut p = exchange(&server, suite, &[b"h2"]);
        p.client.send_close_notify();
        let bytes = p.client_bytes();
        assert_eq!(p.server_gets(&bytes).unwrap(), Progress::PeerClosed);
        assert_eq!(p.server_gets(&[]).unwrap(), Progress::PeerClosed);
        // A half-closed link still sends.
        p.link.seal_into(&mut p.sent, b"last words").unwrap();
        let mut out = Vec::new();
        p.link.close_notify(&mut out);
        p.sent.extend_from_slice(&out);
        assert!(!p.link.is_open());
        assert!(matches!(
            p.link.seal_into(&mut out, b"x"),
            Err(Fatal::NotOpen)
        ));
        p.client_gets().unwrap();
        let mut v = p.client_plain();
        assert_eq!(p.client.reader().read_to_end(&mut v).unwrap(), 0);
        assert_eq!(v, b"last words", "then a clean end: {suite:?}");
    }
}

#[test]
fn server_close_notify_first() {
    let server = server_config();
    let mut p = exchange(&server, TLS13_SUITES[1], &[b"h2"]);
    p.link.close_notify(&mut p.sent);
    p.client_gets().unwrap();
    let mut v = p.client_plain();
    assert_eq!(p.client.reader().read_to_end(&mut v).unwrap(), 0);
    assert!(v.is_empty());
    // The client's data after our close still reads; then its close.
    p.client.writer().write_all(b"bye").unwrap();
    p.client.send_close_notify();
    let bytes = p.client_bytes();
    assert_eq!(p.server_gets(&bytes).unwrap(), Progress::PeerClosed);
    assert!(p.got.ends_with(b"bye"));
}

/// The alert the client got, from its error.
fn alert_of(e: rustls::Error) -> AlertDescription {
    match e {
        rustls::Error::AlertReceived(a) => a,
        e => panic!("not an alert: {e:?}"),
    }
}

#[test]
fn flipped_bit_is_bad_record_mac() {
    let server = server_config();
    for suite in TLS13_SUITES.into_iter().chain(TLS12_SUITES) {
        for at in [0usize, 6, 20, usize::MAX] {
            let mut p = exchange(&server, suite, &[b"h2"]);
            p.client.writer().write_all(b"some data").unwrap();
            let mut bytes = p.client_bytes();
            let i = at.min(bytes.len() - 1).max(HEADER_LEN);
            bytes[i] ^= 0x10;
            let e = p.server_gets(&bytes).unwrap_err();
            assert!(
                matches!(
                    e,
                    Fatal::Alert {
                        alert: AlertDescription::BadRecordMac,
                        ..
                    }
                ),
                "{suite:?} {at}: {e:?}"
            );
            assert_eq!(
                e.to_string(),
                "TLS: a record failed authentication (BadRecordMac sent)"
            );
            assert_eq!(
                alert_of(p.client_gets().unwrap_err()),
                AlertDescription::BadRecordMac
            );
            assert!(matches!(p.server_gets(b"more"), Err(Fatal::NotOpen)));
        }
    }
}

/// The client's keys, taken from it after the handshake, to forge records
/// rustls would never send.
struct Forger {
    sealer: Sealer,
    opener: Opener,
}

#[allow(deprecated)] // the kernel-connection API needs an unbuffered client
fn forger(p: Pair) -> (TlsLink, Forger) {
    let version = p.client.protocol_version().unwrap();
    let secrets = p.client.dangerous_extract_secrets().unwrap();
    let framing = framing(version, &secrets.tx.1).unwrap();
    let f = Forger {
        sealer: Sealer {
            framing,
            keys: Keys::new(secrets.tx).unwrap(),
        },
        opener: Opener {
            framing,
            keys: Keys::new(secrets.rx).unwrap(),
        },
    };
    (p.link, f)
}

impl Forger {
    /// A record of type `typ` around `data`, of any length.
    fn record(&mut self, typ: u8, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        self.sealer.seal_into(typ, &mut v, data).unwrap();
        v
    }

    /// The records the link sent, opened: (type, plaintext) each.
    fn open_all(&mut self, mut bytes: &mut [u8]) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while !bytes.is_empty() {
            let len = self.opener.check_header(&bytes[..HEADER_LEN]).unwrap();
            let (rec, rest) = bytes.split_at_mut(HEADER_LEN + len);
            let (typ, range) = self.opener.open(rec).unwrap();
            v.push((typ, rec[range].to_vec()));
            bytes = rest;
        }
        v
    }
}

/// `bytes` into `link`: its result, and the records it sent.
fn into_link(link: &mut TlsLink, bytes: &[u8]) -> (Result<Progress, Fatal>, Vec<u8>) {
    let (mut inbuf, mut out) = (bytes.to_vec(), Vec::new());
    let r = link.receive(&mut inbuf, &mut out, |_| {});
    (r, out)
}

/// The fatal alert `bytes` draws from a fresh link of `suite`, checked
/// against the alert record the link sent.
fn fatal_alert_for(
    server: &Arc<ServerConfig>,
    suite: CipherSuite,
    forge: impl FnOnce(&mut Forger) -> Vec<u8>,
) -> AlertDescription {
    let (mut link, mut f) = forger(exchange(server, suite, &[b"h2"]));
    let bytes = forge(&mut f);
    let (r, mut out) = into_link(&mut link, &bytes);
    let Err(Fatal::Alert { alert, .. }) = r else {
        panic!("{suite:?}: {r:?}");
    };
    let sent = f.open_all(&mut out);
    assert_eq!(
        sent.last(),
        Some(&(CT_ALERT, vec![ALERT_FATAL, u8::from(alert)]))
    );
    alert
}

#[test]
fn hostile_records_are_fatal_with_the_right_alert() {
    use AlertDescription as A;
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS12_SUITES[0], TLS12_SUITES[2]] {
        let tls13 = suite == TLS13_SUITES[0];
        let check = |want: A, forge: &dyn Fn(&mut Forger) -> Vec<u8>| {
            let got = fatal_alert_for(&server, suite, |f| forge(f));
            assert_eq!(got, want, "{suite:?}");
        };
        check(A::RecordOverflow, &|f| {
            f.record(CT_APPLICATION_DATA, &[b'x'; MAX_PLAINTEXT + 1])
        });
        // An oversized header fails before its body comes.
        check(A::RecordOverflow, &|_| vec![23, 3, 3, 0x48, 0x01]);
        check(A::ProtocolVersion, &|_| vec![23, 3, 1, 0, 40]);
        check(A::UnexpectedMessage, &|_| vec![20, 3, 3, 0, 1, 1]);
        check(A::UnexpectedMessage, &|_| vec![99, 3, 3, 0, 1, 1]);
        check(A::BadRecordMac, &|_| vec![23, 3, 3, 0, 3, 1, 2, 3]);
        check(A::UnexpectedMessage, &|f| f.record(99, b"x"));
        check(A::DecodeError, &|f| f.record(CT_ALERT, &[1, 0, 0]));
        check(A::DecodeError, &|f| f.record(CT_HANDSHAKE, &[]));
        // A NewSessionTicket from the client.
        check(A::UnexpectedMessage, &|f| {
            f.record(CT_HANDSHAKE, &[4, 0, 0, 2, 0, 0])
        });
        // A handshake message in two records.
        check(A::UnexpectedMessage, &|f| {
            f.record(CT_HANDSHAKE, &[24, 0, 0])
        });
        check(A::UnexpectedMessage, &|f| {
            let mut v = f.record(CT_ALERT, &[1, 0]);
            v.extend(f.record(CT_APPLICATION_DATA, b"after close_notify"));
            v
        });
        if tls13 {
            check(A::IllegalParameter, &|f| {
                f.record(CT_HANDSHAKE, &[24, 0, 0, 1, 7])
            });
            check(A::UnexpectedMessage, &|f| {
                f.record(CT_HANDSHAKE, &[24, 0, 0, 1, 0, 24, 0, 0, 1, 0])
            });
            // A ClientHello in TLS 1.3.
            check(A::UnexpectedMessage, &|f| {
                f.record(CT_HANDSHAKE, &[1, 0, 0, 0])
            });
        } else {
            check(A::UnexpectedMessage, &|f| {
                f.record(CT_HANDSHAKE, &[24, 0, 0, 1, 0])
            });
        }
    }
}

/// TLS 1.3 padding: stripped, up to an inner plaintext of 2^14 + 1.
#[test]
fn tls13_padding_is_stripped_and_bounded() {
    let server = server_config();
    // `record(0, ..)` puts a zero after the data: the inner plaintext is
    // the content, its type, then zeros.
    let padded = |content: &[u8], inner_len: usize| {
        let mut v = content.to_vec();
        v.push(CT_APPLICATION_DATA);
        v.resize(inner_len - 1, 0);
        v
    };
    let (mut link, mut f) = forger(exchange(&server, TLS13_SUITES[0], &[b"h2"]));
    let bytes = f.record(0, &padded(b"padded", MAX_PLAINTEXT + 1));
    let (mut inbuf, mut out, mut got) = (bytes, Vec::new(), Vec::new());
    let r = link.receive(&mut inbuf, &mut out, |d| got.extend_from_slice(d));
    assert_eq!(r.unwrap(), Progress::Open);
    assert_eq!(got, b"padded");
    let got = fatal_alert_for(&server, TLS13_SUITES[0], |f| {
        f.record(0, &padded(b"padded", MAX_PLAINTEXT + 2))
    });
    assert_eq!(got, AlertDescription::RecordOverflow);
}

/// A TLS 1.3 inner plaintext of only zeros has no content type.
#[test]
fn tls13_record_of_padding_only_is_unexpected() {
    let server = server_config();
    let got = fatal_alert_for(&server, TLS13_SUITES[2], |f| {
        // Sealed as type 0 with no content: inner plaintext [0].
        f.record(0, &[])
    });
    assert_eq!(got, AlertDescription::UnexpectedMessage);
}

#[test]
fn peer_alerts_end_the_link_without_an_answer() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS12_SUITES[0]] {
        let (mut link, mut f) = forger(exchange(&server, suite, &[b"h2"]));
        let bytes = f.record(CT_ALERT, &[ALERT_FATAL, 40]);
        let (r, out) = into_link(&mut link, &bytes);
        assert!(
            matches!(r, Err(Fatal::PeerAlert(AlertDescription::HandshakeFailure))),
            "{r:?}"
        );
        assert!(out.is_empty());
        // user_canceled is a warning: a few pass.
        let (mut link, mut f) = forger(exchange(&server, suite, &[b"h2"]));
        for i in 0..=MAX_WARNING_ALERTS {
            let bytes = f.record(CT_ALERT, &[ALERT_WARNING, 90]);
            let (r, _) = into_link(&mut link, &bytes);
            assert_eq!(r.is_ok(), i < MAX_WARNING_ALERTS, "{suite:?} {i}: {r:?}");
        }
    }
}

#[test]
fn tls12_renegotiation_gets_a_warning_then_fatal() {
    let server = server_config();
    for suite in [TLS12_SUITES[0], TLS12_SUITES[2]] {
        let (mut link, mut f) = forger(exchange(&server, suite, &[b"h2"]));
        let hello = [HS_CLIENT_HELLO, 0, 0, 2, 3, 3];
        let bytes = f.record(CT_HANDSHAKE, &hello);
        let (r, mut out) = into_link(&mut link, &bytes);
        assert_eq!(r.unwrap(), Progress::Open);
        let warning = vec![ALERT_WARNING, u8::from(AlertDescription::NoRenegotiation)];
        assert_eq!(f.open_all(&mut out), vec![(CT_ALERT, warning)]);
        // The link goes on.
        let mut sent = Vec::new();
        link.seal_into(&mut sent, b"still here").unwrap();
        assert_eq!(
            f.open_all(&mut sent),
            vec![(CT_APPLICATION_DATA, b"still here".to_vec())]
        );
        let bytes = f.record(CT_HANDSHAKE, &hello);
        let (r, _) = into_link(&mut link, &bytes);
        assert!(matches!(
            r,
            Err(Fatal::Alert {
                alert: AlertDescription::UnexpectedMessage,
                ..
            })
        ));
    }
}

#[test]
fn key_update_floods_are_bounded() {
    let server = server_config();
    let mut p = exchange(&server, TLS13_SUITES[0], &[b"h2"]);
    for i in 0..=MAX_KEY_UPDATES_WITHOUT_DATA {
        p.client.refresh_traffic_keys().unwrap();
        let bytes = p.client_bytes();
        let r = p.server_gets(&bytes);
        assert_eq!(r.is_ok(), i < MAX_KEY_UPDATES_WITHOUT_DATA, "{i}: {r:?}");
        if r.is_ok() {
            p.client_gets().unwrap();
        }
    }
    let (mut link, mut f) = forger(exchange(&server, TLS13_SUITES[0], &[b"h2"]));
    let bytes = f.record(CT_HANDSHAKE, &[HS_KEY_UPDATE, 0, 0, 1, 0]);
    let (r, out) = into_link(&mut link, &bytes);
    assert_eq!(r.unwrap(), Progress::Open);
    assert!(out.is_empty(), "update_not_requested: no KeyUpdate back");
}

#[test]
fn the_callers_mistakes_are_errors() {
    let server = server_config();
    let mut p = exchange(&server, TLS13_SUITES[0], &[b"h2"]);
    let mut rec = vec![0; MAX_PLAINTEXT + 100];
    assert!(matches!(
        p.link.seal_in_place(&mut rec, MAX_PLAINTEXT + 1),
        Err(Fatal::Misuse(_))
    ));
    assert!(matches!(
        p.link.seal_in_place(&mut rec[..100], 90),
        Err(Fatal::Misuse(_))
    ));
    let mut plain_cfg = (*server).clone();
    plain_cfg.enable_secret_extraction = false;
    assert!(TlsLink::new(&Arc::new(plain_cfg)).is_err());
    let mut fresh = TlsLink::new(&server).unwrap();
    assert!(fresh.is_handshaking());
    assert!(matches!(
        fresh.seal_into(&mut Vec::new(), b"x"),
        Err(Fatal::NotOpen)
    ));
    assert_eq!(fresh.header_room(), MAX_HEADER_ROOM);
}

#[test]
fn handshake_failure_sends_rustls_alert() {
    let server = server_config();
    let mut p = Pair::new(&server, &client_config(TLS13_SUITES[0], &[b"spdy/1"]));
    let bytes = p.client_bytes();
    let e = p.server_gets(&bytes).unwrap_err();
    assert!(matches!(e, Fatal::Handshake(_)), "{e:?}");
    assert_eq!(
        alert_of(p.client_gets().unwrap_err()),
        AlertDescription::NoApplicationProtocol
    );
    // Not TLS at all.
    let mut link = TlsLink::new(&server).unwrap();
    let (r, _) = into_link(&mut link, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(r, Err(Fatal::Handshake(_))), "{r:?}");
}

#[test]
fn the_key_limit_updates_tls13_and_closes_tls12() {
    let server = server_config();
    let mut p = exchange(&server, TLS13_SUITES[0], &[b"h2"]);
    let State::Open(r) = &mut p.link.state else {
        panic!()
    };
    r.limit = 2 * (r.sealer.keys.seq + 4);
    for i in 0..40 {
        p.link.seal_into(&mut p.sent, &body(i)).unwrap();
        p.link.rekey_if_due(&mut p.sent).unwrap();
        p.seal_body_in_place(&body(i + 1));
    }
    p.client_gets().unwrap();
    let want: Vec<u8> = (0..40)
        .flat_map(|i| [body(i), body(i + 1)].concat())
        .collect();
    assert!(p.client_plain() == want);

    let mut p = exchange(&server, TLS12_SUITES[0], &[b"h2"]);
    let State::Open(r) = &mut p.link.state else {
        panic!()
    };
    r.limit = 2 * (r.sealer.keys.seq + 4);
    let mut n = 0;
    while p.link.seal_into(&mut p.sent, b"x").is_ok() {
        n += 1;
    }
    assert_eq!(n, 4, "half the tiny limit is the margin");
    p.client_gets().unwrap();
    let mut v = p.client_plain();
    assert_eq!(p.client.reader().read_to_end(&mut v).unwrap(), 0);
    assert_eq!(v, b"xxxx", "then close_notify");
}

#[test]
fn random_bytes_never_panic() {
    let server = server_config();
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let suites: Vec<CipherSuite> = TLS13_SUITES.into_iter().chain(TLS12_SUITES).collect();
    for round in 0..600 {
        let suite = suites[round % suites.len()];
        let mut p = exchange_quiet(&server, suite);
        let mut valid = {
            p.client
                .writer()
                .write_all(&body(rng.random_range(1..3000)))
                .unwrap();
            p.client_bytes()
        };
        let mut bytes: Vec<u8> = match round % 3 {
            0 => (0..rng.random_range(1..5000))
                .map(|_| rng.random())
                .collect(),
            1 => {
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..valid.len());
                    valid[i] = rng.random();
                }
                valid
            }
            _ => {
                let len: u16 = rng.random_range(0..20_000);
                let mut v = vec![rng.random_range(20..25), 3, 3];
                v.extend(len.to_be_bytes());
                v.extend((0..len).map(|_| rng.random::<u8>()));
                v
            }
        };
        bytes.truncate(rng.random_range(1..=bytes.len()));
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = rng.random_range(1..=rest.len().min(700));
            let r = p.server_gets(&rest[..n]);
            rest = &rest[n..];
            if r.is_err() {
                assert!(matches!(p.server_gets(b"x"), Err(Fatal::NotOpen)));
                break;
            }
        }
    }
}

/// A plain handshake with no data, for the fuzz rounds.
fn exchange_quiet(server: &Arc<ServerConfig>, suite: CipherSuite) -> Pair {
    let mut p = Pair::new(server, &client_config(suite, &[b"h2"]));
    p.handshake();
    p
}

#[test]
fn random_bytes_during_the_handshake_never_panic() {
    let server = server_config();
    let mut rng = SmallRng::seed_from_u64(7);
    for _ in 0..200 {
        let mut p = Pair::new(&server, &client_config(TLS13_SUITES[0], &[b"h2"]));
        let mut hello = p.client_bytes();
        let i = rng.random_range(0..hello.len());
        hello[i] = rng.random();
        hello.truncate(rng.random_range(1..=hello.len()));
        let _ = p.server_gets(&hello);
    }
}

#[test]
fn slots_lie_end_to_end_with_full_records() {
    for (prefix, head, tail) in [(0, 5, 17), (9, 5, 17), (0, 13, 16), (9, 13, 16)] {
        let l = RecordLayout {
            prefix,
            header_room: head,
            tail_room: tail,
            align: 1,
        };
        for buf_len in [0, 1, head + prefix + tail, 100, 64 * 1024, 256 * 1024 + 7] {
            let slots: Vec<RecordSlot> = record_slots(buf_len, prefix, head, tail).collect();
            let mut at = 0;
            for (i, s) in slots.iter().enumerate() {
                assert_eq!(s.record.start, at);
                assert_eq!(s.payload.start, at + head + prefix);
                assert_eq!(s.record.end, s.payload.end + tail);
                assert_eq!(s.plaintext_len, prefix + s.payload.len());
                assert!(!s.payload.is_empty());
                if i + 1 < slots.len() {
                    assert_eq!(s.plaintext_len, MAX_PLAINTEXT, "full but the last");
                }
                at = s.record.end;
            }
            assert!(at <= buf_len);
            assert!(buf_len - at <= head + prefix + tail, "{buf_len}: room left");
        }
        for payload in [1, 100, MAX_PLAINTEXT, 100 * 1024, 1 << 20] {
            let len = l.buffer_len(payload);
            let slots: Vec<RecordSlot> = l.slots(len, payload).collect();
            let total: usize = slots.iter().map(|s| s.payload.len()).sum();
            assert_eq!(total, payload);
            assert_eq!(slots.last().unwrap().record.end, len, "exactly");
            let capped: usize = l.slots(1 << 22, payload).map(|s| s.payload.len()).sum();
            assert_eq!(capped, payload);
        }
    }
}

#[test]
fn h2_data_frames_sealed_in_place() {
    let server = server_config();
    let mut p = exchange(&server, TLS13_SUITES[0], &[b"h2"]);
    let layout = RecordLayout::for_link(&p.link, 9);
    let file = body(100 * 1024);
    let mut buf = vec![0u8; layout.buffer_len(file.len())];
    let slots: Vec<RecordSlot> = layout.slots(buf.len(), file.len()).collect();
    let mut at = 0;
    for s in &slots {
        let n = s.payload.len();
        buf[s.payload.clone()].copy_from_slice(&file[at..at + n]);
        let frame = &mut buf[s.payload.start - 9..s.payload.start];
        frame[..3].copy_from_slice(&(n as u32).to_be_bytes()[1..]);
        frame[3..].copy_from_slice(&[0, 0, 0, 0, 0, 1]);
        at += n;
    }
    for s in &slots {
        p.link
            .seal_in_place(&mut buf[s.record.clone()], s.plaintext_len)
            .unwrap();
    }
    p.sent.extend_from_slice(&buf);
    p.client_gets().unwrap();
    let got = p.client_plain();
    let mut rest = &got[..];
    let mut data = Vec::new();
    while !rest.is_empty() {
        let n = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        assert_eq!(&rest[3..9], &[0, 0, 0, 0, 0, 1]);
        data.extend_from_slice(&rest[9..9 + n]);
        rest = &rest[9 + n..];
    }
    assert!(data == file);
}

/// The client's last handshake flight carries its request (TLS 1.3, and
/// a resumed TLS 1.2 handshake, where the client's Finished comes last):
/// fed whole, rustls reads the request before the takeover; cut inside
/// the request's record, the link reads the rest with the sequence number
/// rustls handed over.
#[test]
fn request_in_the_finished_flight() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS13_SUITES[2], TLS12_SUITES[0]] {
        let client = client_config(suite, &[b"http/1.1"]);
        let mut warm = Pair::new(&server, &client);
        warm.handshake();
        for cut_back in [0, 1, 30] {
            let mut p = Pair::new(&server, &client);
            p.client.writer().write_all(b"GET /first HTTP/1.1").unwrap();
            let hello = p.client_bytes();
            assert_eq!(p.server_gets(&hello).unwrap(), Progress::Handshaking);
            p.client_gets().unwrap();
            let flight = p.client_bytes();
            let (a, b) = flight.split_at(flight.len() - cut_back);
            let first = p.server_gets(a).unwrap();
            if cut_back == 0 {
                assert_eq!(first, Progress::Established, "{suite:?}");
                assert_eq!(p.got, b"GET /first HTTP/1.1");
            } else {
                assert!(p.got.is_empty(), "{suite:?}: the request's record is cut");
            }
            let second = p.server_gets(b).unwrap();
            if cut_back > 0 {
                assert!(
                    first == Progress::Established,
                    "{suite:?} {cut_back}: {first:?}"
                );
                assert_eq!(second, Progress::Open);
            }
            assert_eq!(p.got, b"GET /first HTTP/1.1", "{suite:?} {cut_back}");
            assert_eq!(p.client_send(b"second"), Progress::Open);
            assert!(p.got.ends_with(b"second"));
        }
    }
}

#[test]
fn aligned_slots_suit_o_direct() {
    const ALIGN: usize = 4096;
    for (prefix, head, tail) in [(0, 5, 17), (9, 5, 17), (0, 13, 16), (9, 13, 16)] {
        let l = RecordLayout {
            prefix,
            header_room: head,
            tail_room: tail,
            align: 1,
        }
        .aligned(ALIGN);
        let per = if prefix == 0 {
            MAX_PLAINTEXT
        } else {
            3 * ALIGN
        };
        assert_eq!(l.max_payload(), per);
        for payload in [1, ALIGN + 1, MAX_PLAINTEXT, 100 * 1024, 1 << 20] {
            let len = l.buffer_len(payload);
            let slots: Vec<RecordSlot> = l.slots(len, payload).collect();
            let total: usize = slots.iter().map(|s| s.payload.len()).sum();
            assert_eq!(total, payload);
            let mut end = 0;
            for (i, s) in slots.iter().enumerate() {
                assert!(s.record.start >= end, "no overlap");
                assert_eq!(s.payload.start % ALIGN, 0);
                assert_eq!(s.record.start + head + prefix, s.payload.start);
                assert_eq!(s.record.end, s.payload.end + tail);
                if i + 1 < slots.len() {
                    assert_eq!(s.payload.len(), per);
                }
                end = s.record.end;
            }
            let last = slots.last().unwrap();
            assert!(last.payload.end.next_multiple_of(ALIGN) <= len);
            assert!(end <= len);
        }
        // A buffer too short for the payload: full aligned payloads only.
        let slots: Vec<RecordSlot> = l.slots(40_000, usize::MAX).collect();
        assert!(
            slots.iter().all(|s| s.payload.len() % ALIGN == 0),
            "{slots:?}"
        );
        assert!(slots.last().unwrap().record.end <= 40_000);
    }
}

#[test]
fn aligned_records_sealed_in_place_and_gathered() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS12_SUITES[0]] {
        let mut p = exchange(&server, suite, &[b"http/1.1"]);
        let layout = RecordLayout::for_link(&p.link, 0).aligned(4096);
        let file = body(100 * 1024 + 5);
        let mut buf = vec![0u8; layout.buffer_len(file.len())];
        let slots: Vec<RecordSlot> = layout.slots(buf.len(), file.len()).collect();
        let mut at = 0;
        for s in &slots {
            buf[s.payload.clone()].copy_from_slice(&file[at..at + s.payload.len()]);
            at += s.payload.len();
        }
        for s in &slots {
            p.link
                .seal_in_place(&mut buf[s.record.clone()], s.plaintext_len)
                .unwrap();
            // One iovec per record.
            p.sent.extend_from_slice(&buf[s.record.clone()]);
        }
        p.client_gets().unwrap();
        assert!(p.client_plain() == file, "{suite:?}");
    }
}

/// A worker may own its links on any thread.
#[test]
fn a_link_is_send() {
    fn send<T: Send>() {}
    send::<TlsLink>();
}

/// A client that sends its request and close_notify with its Finished
/// still gets its answer.
#[test]
fn close_notify_with_the_finished_flight() {
    let server = server_config();
    for suite in [TLS13_SUITES[0], TLS13_SUITES[1]] {
        let mut p = Pair::new(&server, &client_config(suite, &[b"http/1.1"]));
        let hello = p.client_bytes();
        assert_eq!(p.server_gets(&hello).unwrap(), Progress::Handshaking);
        p.client_gets().unwrap();
        assert!(!p.client.is_handshaking());
        p.client
            .writer()
            .write_all(b"GET / HTTP/1.0\r\n\r\n")
            .unwrap();
        p.client.send_close_notify();
        let flight = p.client_bytes();
        assert_eq!(p.server_gets(&flight).unwrap(), Progress::PeerClosed);
        assert_eq!(p.got, b"GET / HTTP/1.0\r\n\r\n");
        assert!(p.link.is_open());
        assert_eq!(p.link.alpn(), Some(&b"http/1.1"[..]));
        p.link
            .seal_into(&mut p.sent, b"HTTP/1.0 200 OK\r\n\r\nhi")
            .unwrap();
        p.link.close_notify(&mut p.sent);
        p.client_gets().unwrap();
        let mut v = p.client_plain();
        assert_eq!(p.client.reader().read_to_end(&mut v).unwrap(), 0);
        assert_eq!(v, b"HTTP/1.0 200 OK\r\n\r\nhi");
        assert!(matches!(p.server_gets(b"x"), Err(Fatal::Alert { .. })));
    }
}
