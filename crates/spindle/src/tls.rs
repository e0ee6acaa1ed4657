//! TLS settings: the certificates (several, chosen by SNI, the first the
//! default), protocol versions, ALPN and session resumption, built into one
//! rustls [`ServerConfig`] that every worker shares, so that the ticket keys
//! and the session cache are shared too.
//!
//! rustls does no I/O: a backend hands it the socket's bytes and sends the
//! records it produces, so the io_uring worker keeps owning every socket and
//! file operation (issue 19). This module only loads and checks what the
//! connections will use; it is pure setup, run once at start (and on reload).
//!
//! Choices, and why:
//! - TLS 1.3 and 1.2 only. rustls has no RSA key exchange, no CBC and no
//!   TLS 1.1 or older at all: every TLS 1.2 suite it offers is ECDHE with an
//!   AEAD, which is what Mozilla's "intermediate" profile asks of nginx.
//! - The aws-lc-rs provider, chosen over ring by measurement
//!   (docs/results/tls-provider.md); ring is one feature flag away
//!   (`--no-default-features`) for a build that cannot compile aws-lc's C.
//! - Resumption both ways: a stateful cache of [`SESSION_CACHE_ENTRIES`]
//!   (TLS 1.2 session IDs) and tickets whose keys rotate every 6 hours
//!   (rustls's `Ticketer`), like nginx's `ssl_session_cache shared` plus
//!   `ssl_session_tickets on`.
//! - ALPN offers `http/1.1` and `http/1.0` (HTTP/2 is a later step).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{
    ClientHello, ProducesTickets, ResolvesServerCert, ServerSessionMemoryCache,
    StoresServerSessions,
};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

/// Sessions the stateful resumption cache remembers (shared by all workers).
pub const SESSION_CACHE_ENTRIES: usize = 16_384;
/// Most certificates one server may hold.
pub const MAX_CERTIFICATES: usize = 1_024;
/// Largest certificate chain or key file read.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// One certificate: the host names it serves (empty for the default, which
/// then answers every name), and its PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSpec {
    pub names: Vec<String>,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What resumption needs to survive a reload: the ticket keys and the
/// session cache, shared by every configuration the server builds.
#[derive(Clone)]
pub struct Resumption {
    ticketer: Arc<dyn ProducesTickets>,
    storage: Arc<dyn StoresServerSessions + Send + Sync>,
}

impl Resumption {
    pub fn new() -> Result<Resumption, String> {
        Ok(Resumption {
            ticketer: provider_crate::Ticketer::new()
                .map_err(|e| format!("TLS session tickets: {e}"))?,
            storage: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
        })
    }
}

/// Certificates the ACME client manages (`acme/`), each with its names:
/// `None` until the first is obtained, and a handshake for one of its
/// names fails meanwhile (no certificate: a `handshake_failure` alert).
pub type AcmeEntries = Vec<(Vec<String>, Option<Arc<CertifiedKey>>)>;

/// The configuration new HTTPS connections start from; SIGHUP replaces it
/// (connections already open keep theirs). A worker keeps its own copy and
/// takes the lock only when the generation has moved.
pub struct Shared {
    current: Mutex<Arc<ServerConfig>>,
    generation: AtomicU64,
    specs: Vec<CertSpec>,
    resumption: Resumption,
    h2: bool,
    acme: Mutex<AcmeEntries>,
}

impl Shared {
    /// Loads the certificates (one error line on failure); `h2`: offer
    /// HTTP/2 by ALPN.
    pub fn load(specs: &[CertSpec], h2: bool) -> Result<Shared, String> {
        Shared::load_with_acme(specs, h2, &[])
    }

    /// [`load`](Shared::load), with certificates for `acme` names to come
    /// from the ACME client ([`set_acme`](Shared::set_acme)).
    pub fn load_with_acme(
        specs: &[CertSpec],
        h2: bool,
        acme: &[Vec<String>],
    ) -> Result<Shared, String> {
        let resumption = Resumption::new()?;
        let acme: AcmeEntries = acme
            .iter()
            .map(|names| {
                let names = names.iter().map(|n| n.to_ascii_lowercase()).collect();
                (names, None)
            })
            .collect();
        let cfg = server_config_with(specs, &resumption, h2, &acme)?;
        Ok(Shared {
            current: Mutex::new(cfg),
            generation: AtomicU64::new(0),
            specs: specs.to_vec(),
            resumption,
            h2,
            acme: Mutex::new(acme),
        })
    }

    /// Puts an ACME certificate in for the entry of `names`, as a reload
    /// does: connections open keep theirs, new ones get this one.
    pub fn set_acme(&self, names: &[String], key: Arc<CertifiedKey>) -> Result<(), String> {
        let mut acme = self.acme.lock().unwrap_or_else(|p| p.into_inner());
        let entry = acme
            .iter_mut()
            .find(|(n, _)| {
                n.iter()
                    .map(String::as_str)
                    .eq(names.iter().map(String::as_str))
            })
            .ok_or_else(|| format!("no ACME certificate is configured for {}", names.join(",")))?;
        entry.1 = Some(key);
        let cfg = server_config_with(&self.specs, &self.resumption, self.h2, &acme)?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = cfg;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces a worker's copy of the configuration if a reload has
    /// published a newer one since it was taken.
    pub fn refresh(&self, copy: &mut (u64, Arc<ServerConfig>)) {
        if self.generation() != copy.0 {
            *copy = self.current();
        }
    }

    /// The current configuration and its generation.
    pub fn current(&self) -> (u64, Arc<ServerConfig>) {
        let cfg = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (self.generation(), cfg)
    }

    /// Reads the certificate and key files again; on any error the running
    /// configuration stays. Ticket keys and cached sessions carry over, so
    /// clients keep resuming.
    pub fn reload(&self) -> Result<(), String> {
        let acme = self.acme.lock().unwrap_or_else(|p| p.into_inner());
        let cfg = server_config_with(&self.specs, &self.resumption, self.h2, &acme)?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = cfg;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// What a connection's TLS layer (`conn::tls::Tls::receive`) found in a
/// batch of ciphertext.
pub enum Received {
    /// Records processed; any plaintext was handed on (during a handshake,
    /// there is none yet).
    Ok,
    /// The peer closed the TLS session (close_notify).
    Closed,
    /// Not TLS, or a TLS error: the connection must go (an alert, if
    /// one was made, is waiting to be written).
    Failed,
}

#[cfg(feature = "aws-lc-rs")]
use rustls::crypto::aws_lc_rs as provider_crate;
/// aws-lc-rs (the default `aws-lc-rs` feature), or ring without it: the
/// same suites and order either way. Measured against each other in
/// docs/results/tls-provider.md: aws-lc-rs took 5% less server CPU per
/// 100 KiB response and 9-11% less per handshake, and the same per 1 KiB.
#[cfg(not(feature = "aws-lc-rs"))]
use rustls::crypto::ring as provider_crate;

/// The crypto provider built in, by name (for reports and logs).
pub const PROVIDER_NAME: &str = if cfg!(feature = "aws-lc-rs") {
    "aws-lc-rs"
} else {
    "ring"
};

/// The provider every TLS object of the server uses, its suites in the
/// server's order of preference (see [`suite_rank`]).
pub fn provider() -> Arc<CryptoProvider> {
    let mut p = provider_crate::default_provider();
    p.cipher_suites.sort_by_key(|s| suite_rank(s.suite()));
    Arc::new(p)
}

/// Where a suite stands in the server's order: TLS 1.3 before 1.2, then
/// AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 (Mozilla's "intermediate"
/// order: AES-128 is the cheapest per byte with AES instructions, which
/// every x86 and ARMv8 server has). Every suite rustls offers is an
/// ephemeral key exchange with an AEAD, so the order only picks among
/// strong ones; the server applies it (`ignore_client_order`) as nginx's
/// packaged `ssl_prefer_server_ciphers on` does, and as testssl.sh expects.
fn suite_rank(suite: rustls::CipherSuite) -> (u8, u8) {
    let name = format!("{suite:?}");
    let version = if name.starts_with("TLS13") { 0 } else { 1 };
    let aead = if name.contains("AES_128") {
        0
    } else if name.contains("AES_256") {
        1
    } else {
        2
    };
    (version, aead)
}

/// Loads and checks the certificates and keys and builds the configuration,
/// with resumption state of its own. Errors are one line naming the file.
pub fn server_config(specs: &[CertSpec]) -> Result<Arc<ServerConfig>, String> {
    server_config_with(specs, &Resumption::new()?, false, &[])
}

/// `h2`: offer HTTP/2 by ALPN, before HTTP/1.1.
fn server_config_with(
    specs: &[CertSpec],
    resumption: &Resumption,
    h2: bool,
    acme: &[(Vec<String>, Option<Arc<CertifiedKey>>)],
) -> Result<Arc<ServerConfig>, String> {
    if specs.is_empty() && acme.is_empty() {
        return Err("TLS needs a certificate: give --tls-cert FILE and --tls-key FILE".into());
    }
    if specs.len() > MAX_CERTIFICATES {
        return Err(format!(
            "{} certificates; at most {MAX_CERTIFICATES}",
            specs.len()
        ));
    }
    let provider = provider();
    let mut entries = Vec::with_capacity(specs.len());
    for s in specs {
        entries.push((
            s.names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            Arc::new(certified_key(s, &provider)?),
        ));
    }
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(BySni {
            entries,
            acme: acme.to_vec(),
        }));
    // http/1.0 too, as nginx does: curl -0 offers only that, and an
    // ALPN mismatch is a fatal alert (RFC 7301).
    cfg.alpn_protocols = vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    if h2 {
        cfg.alpn_protocols.insert(0, b"h2".to_vec());
    }
    if !acme.is_empty() {
        // TLS-ALPN-01 validation (RFC 8737): only a CA's validator offers
        // it, and the resolver answers it with the challenge certificate.
        cfg.alpn_protocols
            .push(crate::acme::challenge::ACME_TLS_ALPN.to_vec());
    }
    cfg.ignore_client_order = true;
    cfg.session_storage = resumption.storage.clone();
    cfg.ticketer = resumption.ticketer.clone();
    // After the handshake, spindle's own record layer takes the traffic
    // keys over (conn::tls, tlsrec), as kTLS would.
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// Adds the PEM certificates of `path` to `roots` (DER), as trusted roots
/// of a client (ACME's directory, the edge's origin). `required`: an
/// unreadable file, a bad entry or no certificate is an error naming
/// `what`; else they are skipped (the system's bundle, where it may be
/// missing).
pub fn add_pem_roots(
    roots: &mut Vec<Vec<u8>>,
    path: &Path,
    required: bool,
    what: &str,
) -> Result<(), String> {
    let pem = match std::fs::read(path) {
        Ok(p) => p,
        Err(_) if !required => return Ok(()),
        Err(e) => return Err(format!("{what} {}: {e}", path.display())),
    };
    let before = roots.len();
    for c in CertificateDer::pem_slice_iter(&pem) {
        match c {
            Ok(c) => roots.push(c.to_vec()),
            Err(e) if required => return Err(format!("{what} {}: {e}", path.display())),
            Err(_) => {}
        }
    }
    if required && roots.len() == before {
        return Err(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(())
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .len();
    if len > MAX_PEM_BYTES {
        return Err(format!(
            "{what} {}: {len} bytes; a PEM file of more than {MAX_PEM_BYTES} is not a certificate or key",
            path.display()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{what} {}: {e}", path.display()))
}

/// The chain and key of one spec, checked to belong together.
pub fn certified_key(s: &CertSpec, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let pem = read_pem(&s.cert, "certificate")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate {}: {e}", s.cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "certificate {}: no PEM certificate in it (BEGIN CERTIFICATE)",
            s.cert.display()
        ));
    }
    let pem = read_pem(&s.key, "key")?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "key {}: no PEM private key in it ({e}); PKCS#8, PKCS#1 (RSA) and SEC1 (EC) are read",
            s.key.display()
        )
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "key {} does not belong to certificate {}",
            s.key.display(),
            s.cert.display()
        ),
        e => format!("key {}: {e}", s.key.display()),
    })
}

/// Chooses the certificate by the ClientHello's server name: an ACME
/// name (none while its certificate is awaited), an exact name, then a
/// `*.` wildcard for one label, then the first certificate (or, with
/// none configured, the first ACME one obtained).
#[derive(Debug)]
struct BySni {
    entries: Vec<(Vec<String>, Arc<CertifiedKey>)>,
    acme: AcmeEntries,
}

impl BySni {
    fn pick(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = name.map(str::to_ascii_lowercase) {
            if let Some((_, k)) = self.acme.iter().find(|(n, _)| n.contains(&name)) {
                return k.clone();
            }
            let wild = name.split_once('.').map(|(_, rest)| format!("*.{rest}"));
            for want in std::iter::once(Some(&name))
                .chain(std::iter::once(wild.as_ref()))
                .flatten()
            {
                if let Some((_, k)) = self
                    .entries
                    .iter()
                    .find(|(names, _)| names.iter().any(|n| n == want))
                {
                    return Some(k.clone());
                }
            }
        }
        match self.entries.first() {
            Some((_, k)) => Some(k.clone()),
            None => self.acme.iter().find_map(|(_, k)| k.clone()),
        }
    }
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let acme_validation = !self.acme.is_empty()
            && hello
                .alpn()
                .is_some_and(|mut p| p.any(|p| p == crate::acme::challenge::ACME_TLS_ALPN));
        if acme_validation {
            return crate::acme::challenge::tls_alpn_certs().get(hello.server_name()?);
        }
        self.pick(hello.server_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tls")
            .join(name)
    }

    fn spec(names: &[&str], kind: &str) -> CertSpec {
        CertSpec {
            names: names.iter().map(|s| s.to_string()).collect(),
            cert: data(&format!("{kind}.pem")),
            key: data(&format!("{kind}.key")),
        }
    }

    #[test]
    fn every_key_type_loads() {
        for kind in ["p256", "p384", "rsa", "ed25519"] {
            server_config(&[spec(&[], kind)]).unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
    }

    #[test]
    fn bad_files_give_one_line_naming_them() {
        let pair = |cert: &str, key: &str| CertSpec {
            names: vec![],
            cert: data(cert),
            key: data(key),
        };
        let cases = [
            (
                vec![pair("p256.pem", "p384.key")],
                "does not belong to certificate",
            ),
            (vec![pair("p256.key", "p256.pem")], "no PEM certificate"),
            (vec![pair("nope.pem", "p256.key")], "nope.pem"),
            (vec![pair("p256.pem", "nope.key")], "key "),
            (vec![], "--tls-cert"),
        ];
        for (specs, want) in cases {
            let e = server_config(&specs).unwrap_err();
            assert!(e.contains(want), "{specs:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_first() {
        let p = provider();
        let key = |kind: &str| Arc::new(certified_key(&spec(&[], kind), &p).unwrap());
        let (a, b, c) = (key("p256"), key("rsa"), key("ed25519"));
        let r = BySni {
            acme: vec![
                (vec!["pending.test".into()], None),
                (vec!["issued.test".into()], Some(c.clone())),
            ],
            entries: vec![
                (vec![], a.clone()),
                (vec!["rsa.test".into()], b.clone()),
                (vec!["*.example.org".into()], c.clone()),
            ],
        };
        assert!(Arc::ptr_eq(&r.pick(Some("RSA.test")).unwrap(), &b));
        assert!(Arc::ptr_eq(&r.pick(Some("www.example.org")).unwrap(), &c));
        assert!(Arc::ptr_eq(&r.pick(Some("a.b.example.org")).unwrap(), &a));
        assert!(Arc::ptr_eq(&r.pick(Some("other.test")).unwrap(), &a));
        assert!(Arc::ptr_eq(&r.pick(None).unwrap(), &a));
        assert!(
            r.pick(Some("pending.test")).is_none(),
            "awaited: no certificate"
        );
        assert!(Arc::ptr_eq(&r.pick(Some("Issued.test")).unwrap(), &c));
    }
}
