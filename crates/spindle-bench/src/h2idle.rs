//! Idle HTTP/2 connections for `idle --h2`: N TLS connections (ALPN
//! `h2`, rustls), each with the preface sent, the server's SETTINGS read
//! and acknowledged, and no stream opened, held open by one thread of
//! the harness while h2load measures, then counted and closed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame (RFC 9113 §6.5), and its acknowledgement.
const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
const SETTINGS_ACK: [u8; 9] = [0, 0, 0, 4, 1, 0, 0, 0, 0];
/// How long one connection's setup may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes read from a server while waiting for its SETTINGS.
const MAX_HELLO_BYTES: usize = 64 << 10;

type Conn = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// The held connections' thread.
pub struct Holder {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl Holder {
    /// Opens `n` idle HTTP/2 connections to `addr` (a server whose
    /// certificate `ca` signed, for `localhost`); returns once all are set
    /// up, or the first failure.
    pub fn open(addr: SocketAddr, n: u64, ca: &Path) -> Result<Holder> {
        crate::sys::raise_nofile();
        let cfg = client_config(ca)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut held = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    match connect(addr, &cfg) {
                        Ok(c) => held.push(c),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return 0;
                        }
                    }
                }
                let _ = tx.send(Ok(()));
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                held.iter().filter(|c| still_open(c)).count() as u64
            })
        };
        match rx.recv() {
            Ok(Ok(())) => Ok(Holder { stop, thread }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(anyhow!("the idle connections' thread ended")),
        }
    }

    /// Stops holding: how many connections the server still had open.
    pub fn close(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

pub(crate) fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).context("reading the run's CA")? {
        roots.add(c.context("the run's CA")?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// One connection: the handshake, the preface and SETTINGS both ways.
fn connect(addr: SocketAddr, cfg: &Arc<rustls::ClientConfig>) -> Result<Conn> {
    let sock = TcpStream::connect_timeout(&addr, SETUP_TIMEOUT).context("connecting")?;
    sock.set_read_timeout(Some(SETUP_TIMEOUT))?;
    sock.set_write_timeout(Some(SETUP_TIMEOUT))?;
    // The preface and SETTINGS go in one record and one segment: with
    // Nagle's algorithm a second small write waits for the server's
    // delayed ACK, and some servers wait for SETTINGS before answering.
    sock.set_nodelay(true)?;
    let name = "localhost".try_into().map_err(|_| anyhow!("server name"))?;
    let conn = rustls::ClientConnection::new(cfg.clone(), name)?;
    let mut c = rustls::StreamOwned::new(conn, sock);
    let mut hello = PREFACE.to_vec();
    hello.extend_from_slice(&SETTINGS);
    c.write_all(&hello)?;
    c.flush()?;
    if c.conn.alpn_protocol() != Some(b"h2") {
        bail!("the server did not choose h2 by ALPN");
    }
    // Read frames until the server's own SETTINGS (not an ACK).
    let mut buf = Vec::new();
    loop {
        let mut at = 0;
        while at + 9 <= buf.len() {
            let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
            if buf[at + 3] == 4 && buf[at + 4] & 1 == 0 {
                c.write_all(&SETTINGS_ACK)?;
                c.flush()?;
                return Ok(c);
            }
            at += 9 + len;
        }
        if buf.len() > MAX_HELLO_BYTES {
            bail!("no SETTINGS from the server");
        }
        let mut chunk = [0u8; 4096];
        let n = c
            .read(&mut chunk)
            .context("reading the server's SETTINGS")?;
        if n == 0 {
            bail!("the server closed before its SETTINGS");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the server has not closed the connection (a peek that would
/// block, or finds bytes such as a GOAWAY still ahead of the close).
fn still_open(c: &Conn) -> bool {
    if c.sock.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    match c.sock.peek(&mut b) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}
