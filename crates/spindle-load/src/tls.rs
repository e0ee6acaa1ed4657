//! HTTPS: a rustls client session over the engine's non-blocking socket.
//!
//! rustls does no I/O of its own: ciphertext goes in by `read_tls` and out by
//! `write_tls`, plaintext through its reader and writer. So the engine keeps owning
//! the socket and its edge-triggered epoll: [`Tls::send`] takes request bytes and
//! pushes what it can, [`Tls::recv`] hands out plaintext and reads the socket only when
//! it has none left. One difference from plain text matters to the engine: a short
//! plaintext read does not mean the socket is drained (records are at most 16 KiB), so
//! it must read until `WouldBlock`.

use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, RootCertStore,
    SignatureScheme,
};

use crate::sys;

/// Where Debian keeps the system's trusted roots, used when no `--cacert` is given.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// TLS 1.3 tickets remembered per server for resumption (each resumes one
/// connection).
pub const SESSION_CACHE: usize = 4096;

/// How the client trusts and resumes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsOptions {
    /// PEM file of trusted certificates (default: the system's roots).
    pub cacert: Option<std::path::PathBuf>,
    /// Accept any server certificate (still encrypted; for self-signed test servers).
    pub insecure: bool,
    /// Never resume: every connection pays a full handshake.
    pub no_resume: bool,
}

/// The client configuration every HTTPS connection of a run starts from.
pub fn client_config(o: &TlsOptions) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut cfg = if o.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
            .with_no_client_auth()
    } else {
        let path = o.cacert.clone().unwrap_or_else(|| SYSTEM_ROOTS.into());
        builder
            .with_root_certificates(roots(&path)?)
            .with_no_client_auth()
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = if o.no_resume {
        Resumption::disabled()
    } else {
        Resumption::store(Arc::new(Sessions::default()))
    };
    Ok(Arc::new(cfg))
}

/// The session store: like rustls's in-memory cache, but with room for
/// [`SESSION_CACHE`] TLS 1.3 tickets per server instead of 8. A TLS 1.3
/// ticket resumes one connection only, and a run keeps hundreds of
/// connections to one server starting at once: with 8 tickets most of them
/// found none and paid a full handshake (about 60% of connections in a
/// `-parallel 100` run against nginx and spindle alike), so "resumed" did
/// not mean resumed.
#[derive(Debug, Default)]
struct Sessions {
    servers: std::sync::Mutex<std::collections::HashMap<ServerName<'static>, ServerSessions>>,
}

#[derive(Debug, Default)]
struct ServerSessions {
    kx_hint: Option<rustls::NamedGroup>,
    tls12: Option<rustls::client::Tls12ClientSessionValue>,
    tls13: std::collections::VecDeque<rustls::client::Tls13ClientSessionValue>,
}

impl Sessions {
    fn with<R>(&self, name: &ServerName<'_>, f: impl FnOnce(&mut ServerSessions) -> R) -> R {
        let mut all = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        f(all.entry(name.to_owned()).or_default())
    }
}

impl rustls::client::ClientSessionStore for Sessions {
    fn set_kx_hint(&self, name: ServerName<'static>, group: rustls::NamedGroup) {
        self.with(&name, |s| s.kx_hint = Some(group));
    }

    fn kx_hint(&self, name: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.with(name, |s| s.kx_hint)
    }

    fn set_tls12_session(
        &self,
        name: ServerName<'static>,
        value: rustls::client::Tls12ClientSessionValue,
    ) {
        self.with(&name, |s| s.tls12 = Some(value));
    }

    fn tls12_session(
        &self,
        name: &ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.with(name, |s| s.tls12.clone())
    }

    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.with(name, |s| s.tls12 = None);
    }

    fn insert_tls13_ticket(
        &self,
        name: ServerName<'static>,
        value: rustls::client::Tls13ClientSessionValue,
    ) {
        self.with(&name, |s| {
            if s.tls13.len() == SESSION_CACHE {
                s.tls13.pop_front();
            }
            s.tls13.push_back(value);
        });
    }

    fn take_tls13_ticket(
        &self,
        name: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        // The newest first: the oldest are the likeliest to have expired.
        self.with(name, |s| s.tls13.pop_back())
    }
}

fn roots(path: &Path) -> Result<RootCertStore, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "no usable certificate in {} (give --cacert FILE, or --insecure for a test server)",
            path.display()
        ));
    }
    Ok(store)
}

/// `--insecure`: any certificate is accepted, but the handshake's signatures are still
/// checked against it, so the session is a real one.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The socket as rustls's byte source and sink.
struct Fd(RawFd);

impl Read for Fd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv(self.0, buf)
    }
}

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        sys::send(self.0, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One connection's TLS session.
pub struct Tls {
    conn: ClientConnection,
}

impl Tls {
    pub fn new(cfg: &Arc<ClientConfig>, host: &str) -> io::Result<Tls> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TLS server name {host}: {e}"),
            )
        })?;
        let conn = ClientConnection::new(cfg.clone(), name).map_err(io::Error::other)?;
        Ok(Tls { conn })
    }

    /// Takes request bytes (all of them: rustls holds what the handshake does not yet
    /// let out) and writes what the socket will take. `Ok(n)`: bytes taken.
    pub fn send(&mut self, fd: RawFd, data: &[u8]) -> io::Result<usize> {
        let n = self.conn.writer().write(data)?;
        self.flush(fd)?;
        Ok(n)
    }

    /// Writes pending records; `Ok(true)` when none are left, `Ok(false)` when the
    /// socket is full (an EPOLLOUT edge will come).
    pub fn flush(&mut self, fd: RawFd) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut Fd(fd)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Records still waiting for socket space.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Plaintext into `buf`: `Ok(0)` at the end of the stream (close_notify, or the
    /// peer closed the socket), `WouldBlock` when the socket is drained and no
    /// plaintext is left. Handshake and session-ticket records are handled on the way.
    pub fn recv(&mut self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: for HTTP, framing says
                // whether the response was whole.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut Fd(fd)) {
                Ok(0) => {
                    self.process()?;
                    return match self.conn.reader().read(buf) {
                        Ok(n) => Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                        Err(e) => Err(e),
                    };
                }
                Ok(_) => {
                    self.process()?;
                    // Handshake replies (and the request held back until the
                    // handshake finished) go out now; a full socket leaves them for
                    // the next EPOLLOUT edge.
                    self.flush(fd)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn process(&mut self) -> io::Result<()> {
        self.conn
            .process_new_packets()
            .map(drop)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))
    }

    /// Whether the handshake resumed an earlier session (`None` until it is done).
    pub fn resumed(&self) -> Option<bool> {
        match self.conn.handshake_kind()? {
            HandshakeKind::Resumed => Some(true),
            _ => Some(false),
        }
    }
}
