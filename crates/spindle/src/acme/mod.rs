//! Automatic HTTPS: certificates obtained and renewed by spindle itself
//! from an ACME CA (RFC 8555), for the `--acme-domain` names.
//!
//! At start ([`prepare`], on the main thread, after `--user`): the state
//! directory is opened and locked, and every stored certificate still
//! valid goes into the TLS configuration at once. Then one thread of its
//! own orders what is missing and renews what is due, and blocks as it
//! likes: no worker ever waits on it. A certificate it obtains is written
//! to the state directory and swapped in as SIGHUP swaps one
//! (`tls::Shared::set_acme`): connections open keep theirs. Until a name
//! has its first certificate, handshakes for it fail with an alert, and
//! the log says why.
//!
//! - `client.rs`: the protocol (directory, nonces, JWS, account, order).
//! - `store.rs`: the state directory, its lock, atomic 0600 writes.
//! - `der.rs`: the certificate request, and a certificate's validity.
//! - HTTP-01 answers are `spindle_core::challenge::Http01Tokens`, read by
//!   sessions on plain connections.
//!
//! Test knobs (environment, read at start; not for production):
//! `SPINDLE_ACME_RENEW_AFTER_SECS` renews a certificate that many seconds
//! after its `notBefore` instead of at two thirds of its lifetime, and
//! `SPINDLE_ACME_BACKOFF_MS` sets the first retry's delay, and
//! `SPINDLE_ACME_CHALLENGE=http-01` tries HTTP-01 before TLS-ALPN-01.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use spindle_core::challenge::Http01Tokens;

pub mod challenge;
mod client;
pub mod der;
pub mod store;

use client::{AccountKey, Challenges, Client};
use store::{Lock, Store};

/// Let's Encrypt's production directory, the default `--acme-directory`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory (untrusted certificates, generous
/// rate limits): the one to try a setup against first.
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";
/// The default `--acme-state`, matching `StateDirectory=spindle`.
pub const DEFAULT_STATE: &str = "/var/lib/spindle/acme";
/// Where the system's trusted roots are (Debian's ca-certificates).
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Most `--acme-domain` certificates, and names on one (Let's Encrypt's
/// limit per certificate).
pub const MAX_CERTS: usize = 100;
pub const MAX_NAMES_PER_CERT: usize = 100;
/// First retry after a failed order; each further failure doubles it, up
/// to [`MAX_BACKOFF`], each with up to a quarter of jitter either way.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(30);
pub const MAX_BACKOFF: Duration = Duration::from_secs(6 * 3600);
/// Longest sleep of the ACME thread between looks at its certificates.
pub const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// How often a process that does not hold the state directory's lock
/// looks again (for the lock, and for certificates the holder wrote).
pub const LOCK_POLL: Duration = Duration::from_secs(5);

/// `--acme-*`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeConfig {
    /// One entry per `--acme-domain`: the names of one certificate,
    /// lower-case.
    pub certs: Vec<Vec<String>>,
    pub email: Option<String>,
    pub directory: String,
    /// Extra roots trusted for the directory's own TLS.
    pub ca: Option<PathBuf>,
    pub state: PathBuf,
    /// A plain listener answers HTTP-01 (TLS-ALPN-01 is answered on the
    /// TLS listener, which automatic HTTPS always has).
    pub http01: bool,
}

/// What a scrape reports of one certificate (`spindle_acme_*`).
#[derive(Debug, Clone, Default)]
struct Status {
    names: String,
    /// Unix seconds; 0: none yet.
    not_after: i64,
    next_attempt: i64,
    issued: u64,
    failures: u64,
}

/// Every certificate's [`Status`], written by the ACME thread, read by
/// the metrics listener's thread.
static STATUS: Mutex<Vec<Status>> = Mutex::new(Vec::new());

fn status(names: &[String], f: impl FnOnce(&mut Status)) {
    let mut all = STATUS.lock().unwrap_or_else(|p| p.into_inner());
    let joined = names.join(",");
    let i = match all.iter().position(|s| s.names == joined) {
        Some(i) => i,
        None => {
            all.push(Status {
                names: joined,
                ..Default::default()
            });
            all.len() - 1
        }
    };
    f(&mut all[i]);
}

/// A metric family: name, type, help, and its value for a certificate.
type Family = (&'static str, &'static str, &'static str, fn(&Status) -> i64);

/// The `spindle_acme_*` families in the text exposition format; empty
/// without `--acme-domain`.
pub fn metrics_text() -> String {
    use std::fmt::Write as _;
    let all = STATUS.lock().unwrap_or_else(|p| p.into_inner());
    let mut o = String::new();
    if all.is_empty() {
        return o;
    }
    let families: [Family; 4] = [
        (
            "spindle_acme_certificate_expiry_timestamp_seconds",
            "gauge",
            "When the certificate in use expires (Unix time; 0: none yet), by its names.",
            |s| s.not_after,
        ),
        (
            "spindle_acme_next_attempt_timestamp_seconds",
            "gauge",
            "When the next order (first, renewal or retry) is due (Unix time).",
            |s| s.next_attempt,
        ),
        (
            "spindle_acme_certificates_issued_total",
            "counter",
            "Certificates obtained (first and renewals).",
            |s| s.issued as i64,
        ),
        (
            "spindle_acme_failures_total",
            "counter",
            "Orders that failed (each retried after a backoff).",
            |s| s.failures as i64,
        ),
    ];
    for (name, kind, help, value) in families {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in all.iter() {
            let _ = writeln!(o, "{name}{{names=\"{}\"}} {}", s.names, value(s));
        }
    }
    o
}

/// Every HTTP-01 answer of this process (one ACME thread at most).
static HTTP01: OnceLock<Arc<Http01Tokens>> = OnceLock::new();

/// The HTTP-01 answers sessions read (`SessionConfig::acme_http01`).
pub fn http01_tokens() -> Arc<Http01Tokens> {
    HTTP01.get_or_init(Default::default).clone()
}

/// Where one certificate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CertState {
    /// None usable: handshakes for its names fail until one is issued.
    Missing,
    /// In use until `not_after`; renewed from `renew_at` (Unix seconds).
    Valid { not_after: i64, renew_at: i64 },
}

/// One `--acme-domain` certificate and its schedule.
struct Managed {
    names: Vec<String>,
    state: CertState,
    /// Failed attempts in a row.
    failures: u32,
    /// No attempt before this (Unix seconds): the backoff after a failure.
    not_before_try: i64,
}

impl Managed {
    /// Its state, for the metrics.
    fn report(&self) {
        status(&self.names, |s| {
            s.next_attempt = self.due();
            if let CertState::Valid { not_after, .. } = self.state {
                s.not_after = not_after;
            }
        });
    }

    /// When it wants an order (Unix seconds).
    fn due(&self) -> i64 {
        let want = match self.state {
            CertState::Missing => 0,
            CertState::Valid { renew_at, .. } => renew_at,
        };
        want.max(self.not_before_try)
    }
}

pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn env_knob(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// When a certificate valid from `not_before` to `not_after` is renewed:
/// with a third of its lifetime left.
fn renew_at(info: &der::CertInfo) -> i64 {
    match env_knob("SPINDLE_ACME_RENEW_AFTER_SECS") {
        Some(s) => info.not_before + s as i64,
        None => info.not_before + (info.not_after - info.not_before) * 2 / 3,
    }
}

/// The delay after `failures` failures in a row: doubled each time from
/// the first, capped, with jitter.
fn backoff(failures: u32) -> Duration {
    let first = env_knob("SPINDLE_ACME_BACKOFF_MS")
        .map(Duration::from_millis)
        .unwrap_or(FIRST_BACKOFF);
    let base = first
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20))
        .min(MAX_BACKOFF);
    let mut r = [0u8; 2];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut r);
    // A factor in [0.75, 1.25).
    let factor = 0.75 + f64::from(u16::from_le_bytes(r)) / f64::from(u16::MAX) / 2.0;
    base.mul_f64(factor)
}

/// Automatic HTTPS, ready to run: [`prepare`]d, not yet ordering.
pub struct Prepared {
    cfg: AcmeConfig,
    store: Store,
    roots: Vec<Vec<u8>>,
    tls: Arc<crate::tls::Shared>,
    managed: Vec<Managed>,
    listening: Vec<SocketAddr>,
}

/// Takes the opened state directory ([`Store::open`], an error line if it
/// cannot be written) and puts every stored certificate still valid into `tls` at once; then
/// [`Prepared::spawn`] starts the thread that orders and renews.
/// `listening`: the addresses of the TLS and plain listeners, which the
/// names should resolve to (a warning if they cannot).
pub fn prepare(
    cfg: &AcmeConfig,
    store: Store,
    tls: Arc<crate::tls::Shared>,
    listening: Vec<SocketAddr>,
) -> Result<Prepared, String> {
    let roots = roots(cfg)?;
    let mut managed = Vec::new();
    for names in &cfg.certs {
        let state = match load_stored(&store, names, &tls) {
            Ok(Some(info)) => {
                crate::info!(
                    "acme: {}: using the stored certificate, valid until {}",
                    names.join(","),
                    spindle_core::date::fmt_unix(info.not_after)
                );
                CertState::Valid {
                    not_after: info.not_after,
                    renew_at: renew_at(&info),
                }
            }
            Ok(None) => {
                crate::warn!(
                    "acme: {}: no certificate yet; ordering one from {}; HTTPS handshakes for {} fail until it is issued",
                    names.join(","),
                    cfg.directory,
                    if names.len() == 1 { "it" } else { "them" }
                );
                CertState::Missing
            }
            Err(e) => {
                crate::warn!(
                    "acme: {}: stored certificate unusable ({e}); ordering a new one; HTTPS handshakes for it fail until it is issued",
                    names.join(",")
                );
                CertState::Missing
            }
        };
        let m = Managed {
            names: names.clone(),
            state,
            failures: 0,
            not_before_try: 0,
        };
        m.report();
        managed.push(m);
    }
    Ok(Prepared {
        cfg: cfg.clone(),
        store,
        roots,
        tls,
        managed,
        listening,
    })
}

impl Prepared {
    /// Starts the ACME thread.
    pub fn spawn(self) -> Result<(), String> {
        let Prepared {
            cfg,
            store,
            roots,
            tls,
            managed,
            listening,
        } = self;
        std::thread::Builder::new()
            .name("acme".into())
            .spawn(move || {
                // DNS may block: here, not on the main thread.
                for name in cfg.certs.iter().flatten() {
                    if let Some(why) = not_covered(name, &listening) {
                        crate::warn!("acme: {name}: {why}; the CA checks the name at its address, so it must reach this server there");
                    }
                }
                run(cfg, store, roots, tls, managed)
            })
            .map(drop)
            .map_err(|e| format!("cannot start the ACME thread: {e}"))
    }
}

/// Why `name` may not reach any of the `listening` addresses, if it may
/// not: it does not resolve, or every listener is bound to an address it
/// does not resolve to. (A listener on `0.0.0.0` or `[::]` covers any.)
fn not_covered(name: &str, listening: &[SocketAddr]) -> Option<String> {
    use std::net::ToSocketAddrs;
    let resolved: Vec<std::net::IpAddr> = match (name, 443).to_socket_addrs() {
        Ok(a) => a.map(|a| a.ip()).collect(),
        Err(_) => Vec::new(),
    };
    if resolved.is_empty() {
        return Some("not found in DNS from here".into());
    }
    let covered = listening
        .iter()
        .any(|l| l.ip().is_unspecified() || resolved.contains(&l.ip()));
    (!covered).then(|| {
        let list: Vec<String> = resolved.iter().map(|a| a.to_string()).collect();
        format!("resolves to {}, where no listener is bound", list.join(" "))
    })
}

/// A name certified by ACME may not be one of a `--tls-cert`'s names too
/// (the default certificate names none in the configuration: its own are
/// read here).
pub fn check_tls_certs(cfg: &AcmeConfig, specs: &[crate::tls::CertSpec]) -> Result<(), String> {
    for s in specs {
        let Ok(Some(pem)) = store::read(&s.cert) else {
            continue; // loading it says what is wrong
        };
        let Some(Ok(leaf)) = CertificateDer::pem_slice_iter(&pem).next() else {
            continue;
        };
        let Some(info) = der::cert_info(&leaf) else {
            continue;
        };
        if let Some(n) = cfg.certs.iter().flatten().find(|n| info.names.contains(n)) {
            return Err(format!(
                "acme-domain {n}: --tls-cert {} is for it too; drop one",
                s.cert.display()
            ));
        }
    }
    Ok(())
}

/// The roots trusted for the directory's TLS: the system's, and
/// `--acme-ca`'s.
fn roots(cfg: &AcmeConfig) -> Result<Vec<Vec<u8>>, String> {
    let mut roots = Vec::new();
    let mut add = |path: &std::path::Path, required: bool| {
        crate::tls::add_pem_roots(&mut roots, path, required, "acme-ca")
    };
    add(std::path::Path::new(SYSTEM_ROOTS), false)?;
    if let Some(ca) = &cfg.ca {
        add(ca, true)?;
    }
    if roots.is_empty() {
        return Err(format!(
            "acme: no trusted roots for {} (none in {SYSTEM_ROOTS}; give --acme-ca FILE)",
            cfg.directory
        ));
    }
    Ok(roots)
}

/// The stored certificate for `names`, if it covers them and is still
/// valid: put into `tls`, and its validity returned.
fn load_stored(
    store: &Store,
    names: &[String],
    tls: &crate::tls::Shared,
) -> Result<Option<der::CertInfo>, String> {
    let Some(info) = stored_info(store, names)? else {
        return Ok(None);
    };
    let (cert, key) = store.cert_paths(names);
    let spec = crate::tls::CertSpec {
        names: names.to_vec(),
        cert,
        key,
    };
    let key = crate::tls::certified_key(&spec, &crate::tls::provider())?;
    tls.set_acme(names, Arc::new(key))?;
    Ok(Some(info))
}

/// The validity of the stored certificate for `names`, if it covers them
/// and has not expired.
fn stored_info(store: &Store, names: &[String]) -> Result<Option<der::CertInfo>, String> {
    let (cert, _) = store.cert_paths(names);
    let Some(pem) = store::read(&cert)? else {
        return Ok(None);
    };
    let leaf = CertificateDer::pem_slice_iter(&pem)
        .next()
        .ok_or("no certificate in it")?
        .map_err(|e| e.to_string())?;
    let info = der::cert_info(&leaf).ok_or("cannot read its validity")?;
    if let Some(n) = names.iter().find(|n| !info.names.contains(n)) {
        return Err(format!("it does not name {n}"));
    }
    if info.not_after <= now() {
        return Err(format!(
            "it expired {}",
            spindle_core::date::fmt_unix(info.not_after)
        ));
    }
    Ok(Some(info))
}

/// While another spindle holds the state directory's lock: whatever the
/// holder wrote since, in use at once (only a new certificate makes a new
/// TLS configuration).
fn adopt_stored(store: &Store, tls: &crate::tls::Shared, managed: &mut [Managed]) {
    for m in managed {
        let Ok(Some(info)) = stored_info(store, &m.names) else {
            continue;
        };
        let fresh = match m.state {
            CertState::Valid { not_after, .. } => info.not_after != not_after,
            CertState::Missing => true,
        };
        if fresh && load_stored(store, &m.names, tls).is_ok() {
            m.state = CertState::Valid {
                not_after: info.not_after,
                renew_at: renew_at(&info),
            };
            m.report();
        }
    }
}

/// The ACME thread: forever, the certificate due first, ordered when due.
fn run(
    cfg: AcmeConfig,
    mut store: Store,
    roots: Vec<Vec<u8>>,
    tls: Arc<crate::tls::Shared>,
    mut managed: Vec<Managed>,
) {
    let http01 = http01_tokens();
    let mut client: Option<Client> = None;
    let mut waited_for_lock = false;
    loop {
        if store.try_lock() == Lock::HeldElsewhere {
            if !waited_for_lock {
                crate::info!(
                    "acme: {} is locked by another spindle (a handover?); using what it writes",
                    store.dir().display()
                );
                waited_for_lock = true;
            }
            adopt_stored(&store, &tls, &mut managed);
            std::thread::sleep(LOCK_POLL);
            continue;
        }
        let Some(m) = managed.iter_mut().min_by_key(|m| m.due()) else {
            return;
        };
        let wait = m.due() - now();
        if wait > 0 {
            std::thread::sleep(Duration::from_secs(wait as u64).min(MAX_SLEEP));
            continue;
        }
        let renewing = matches!(m.state, CertState::Valid { .. });
        // TLS-ALPN-01 first (it needs only the TLS listener); after a
        // failure, the other kind, in turn.
        let challenges = Challenges {
            http01: cfg.http01.then_some(&*http01),
            tls_alpn01: Some(challenge::tls_alpn_certs()),
            prefer: preferred(m.failures),
        };
        let result = client_for(&cfg, &store, &roots, &mut client)
            .and_then(|c| issue(c, &store, &m.names, &challenges, &tls));
        match result {
            Ok((info, by)) => {
                crate::info!(
                    "acme: {}: certificate {}{}, valid until {}; in use for new connections",
                    m.names.join(","),
                    if renewing { "renewed" } else { "issued" },
                    by.map_or(String::new(), |k| format!(" (by {})", k.name())),
                    spindle_core::date::fmt_unix(info.not_after)
                );
                m.state = CertState::Valid {
                    not_after: info.not_after,
                    renew_at: renew_at(&info),
                };
                m.failures = 0;
                m.not_before_try = 0;
                status(&m.names, |s| s.issued += 1);
                m.report();
            }
            Err(e) => {
                m.failures += 1;
                status(&m.names, |s| s.failures += 1);
                let delay = backoff(m.failures);
                m.not_before_try = now() + delay.as_secs().max(1) as i64;
                m.report();
                // The CA may have restarted or moved: the next attempt
                // reads the directory again and takes a new nonce.
                if let Some(c) = client.as_mut() {
                    c.forget_session();
                }
                crate::warn!(
                    "acme: {}: {} failed (attempt {}): {e}; retrying in {:.0?}; {}",
                    m.names.join(","),
                    if renewing { "renewal" } else { "order" },
                    m.failures,
                    delay,
                    if renewing {
                        "serving goes on with the certificate in use"
                    } else {
                        "HTTPS handshakes for it fail until then"
                    }
                );
            }
        }
    }
}

/// The client, made once: the account key read from the state directory
/// or made and written there, and the account URL if one was stored.
fn client_for<'a>(
    cfg: &AcmeConfig,
    store: &Store,
    roots: &[Vec<u8>],
    client: &'a mut Option<Client>,
) -> Result<&'a mut Client, String> {
    if client.is_none() {
        let (key_path, url_path) = store.account_paths();
        let pkcs8 = match store::read(&key_path)? {
            Some(pem) => rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(&pem)
                .map_err(|e| format!("{}: {e}", key_path.display()))?
                .secret_pkcs8_der()
                .to_vec(),
            None => {
                let der = AccountKey::generate()?;
                store::write_atomic(&key_path, &client::pem("PRIVATE KEY", &der))
                    .map_err(|e| format!("{}: {e}", key_path.display()))?;
                // A new key is a new account.
                let _ = std::fs::remove_file(&url_path);
                der
            }
        };
        let kid = store::read(&url_path)?
            .and_then(|u| String::from_utf8(u).ok())
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty());
        *client = Some(Client::new(
            &cfg.directory,
            roots.to_vec(),
            AccountKey::from_pkcs8(&pkcs8)?,
            kid,
        ));
    }
    let c = client.as_mut().expect("just made");
    if c.account_url().is_none() {
        c.ensure_account(cfg.email.as_deref())?;
        let (_, url_path) = store.account_paths();
        let url = c.account_url().expect("account made");
        store::write_atomic(&url_path, url.as_bytes())
            .map_err(|e| format!("{}: {e}", url_path.display()))?;
        crate::info!("acme: account {url}");
    }
    Ok(c)
}

/// One order for `names`: the certificate written to the state directory
/// and put into `tls`.
fn issue(
    client: &mut Client,
    store: &Store,
    names: &[String],
    challenges: &Challenges,
    tls: &crate::tls::Shared,
) -> Result<(der::CertInfo, Option<challenge::Kind>), String> {
    let issued = client.order(names, challenges)?;
    let (cert, key) = store.cert_paths(names);
    // The key first: a chain beside an old key would not load.
    store::write_atomic(&key, &issued.key_pem).map_err(|e| format!("{}: {e}", key.display()))?;
    store::write_atomic(&cert, &issued.chain_pem)
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    let info = load_stored(store, names, tls)?.ok_or("the certificate just written is gone")?;
    Ok((info, issued.by))
}

/// The challenge tried first after `failures` failures in a row:
/// TLS-ALPN-01, then each kind in turn (the test knob
/// `SPINDLE_ACME_CHALLENGE=http-01` makes HTTP-01 first).
fn preferred(failures: u32) -> challenge::Kind {
    let first = match std::env::var("SPINDLE_ACME_CHALLENGE").as_deref() {
        Ok("http-01") => challenge::Kind::Http01,
        _ => challenge::Kind::TlsAlpn01,
    };
    match (first, failures % 2) {
        (k, 0) => k,
        (challenge::Kind::TlsAlpn01, _) => challenge::Kind::Http01,
        (challenge::Kind::Http01, _) => challenge::Kind::TlsAlpn01,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let d1 = backoff(1).as_secs_f64();
        assert!((22.0..=38.0).contains(&d1), "{d1}");
        let d3 = backoff(3).as_secs_f64();
        assert!((90.0..=150.0).contains(&d3), "{d3}");
        assert!(backoff(40) <= MAX_BACKOFF.mul_f64(1.25));
    }

    #[test]
    fn a_name_no_listener_covers_is_named() {
        let local: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:443".parse().unwrap();
        let other: SocketAddr = "192.0.2.1:443".parse().unwrap();
        assert_eq!(not_covered("localhost", &[local]), None);
        assert_eq!(not_covered("localhost", &[any]), None);
        let why = not_covered("localhost", &[other]).unwrap();
        assert!(why.contains("no listener"), "{why}");
        let why = not_covered("no-such-name.invalid", &[any]).unwrap();
        assert!(why.contains("not found in DNS"), "{why}");
    }

    #[test]
    fn renewal_with_a_third_left() {
        let info = der::CertInfo {
            not_before: 0,
            not_after: 90,
            names: vec![],
        };
        assert_eq!(renew_at(&info), 60);
    }
}
