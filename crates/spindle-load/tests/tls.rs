//! spindle-load over HTTPS, against a real TLS server on loopback: rustls on a std
//! TcpListener, one thread per connection, with the test CA and server certificate in
//! tests/data (made with openssl, valid for 100 years; the key is a test key).

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{HandshakeKind, ServerConfig, ServerConnection, StreamOwned};

const LIMIT: Duration = Duration::from_secs(60);

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

struct TlsServer {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    resumed: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
}

/// Serves `body` for any GET, keep-alive unless the request says close.
fn tls_server(body: Vec<u8>) -> TlsServer {
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(data("test-server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(data("test-server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = Arc::new(
        ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicU64::new(0));
    let resumed = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let (cn, rs, rq) = (connections.clone(), resumed.clone(), requests.clone());
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(s) = s else { continue };
            cn.fetch_add(1, SeqCst);
            let (cfg, body, rs, rq) = (cfg.clone(), body.clone(), rs.clone(), rq.clone());
            std::thread::spawn(move || serve(s, cfg, &body, &rs, &rq));
        }
    });
    TlsServer {
        addr,
        connections,
        resumed,
        requests,
    }
}

fn serve(
    s: TcpStream,
    cfg: Arc<ServerConfig>,
    body: &[u8],
    resumed: &AtomicU64,
    requests: &AtomicU64,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = s.set_nodelay(true);
    let mut tls = StreamOwned::new(ServerConnection::new(cfg).unwrap(), s);
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    let mut counted = false;
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            match tls.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
            continue;
        };
        if !counted {
            counted = true;
            if tls.conn.handshake_kind() == Some(HandshakeKind::Resumed) {
                resumed.fetch_add(1, SeqCst);
            }
        }
        let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
        pending.drain(..end + 4);
        requests.fetch_add(1, SeqCst);
        let close = head.contains("connection: close");
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        )
        .into_bytes();
        r.extend_from_slice(body);
        if tls.write_all(&r).and_then(|_| tls.flush()).is_err() {
            return;
        }
        if close {
            tls.conn.send_close_notify();
            let _ = tls.flush();
            return;
        }
    }
}

/// A directory with a URL file naming the server by `host`.
struct Run {
    dir: tempfile::TempDir,
    urls: PathBuf,
}

impl Run {
    fn new(srv: &TlsServer, host: &str) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let urls = write_file(
            dir.path(),
            "urls",
            &format!("https://{host}:{}/a\n", srv.addr.port()),
        );
        Run { dir, urls }
    }

    /// spindle-load with `args`, then `--json` and the URL file; the output and the
    /// JSON report (null if none was written).
    fn load(&self, args: &[&str]) -> (std::process::Output, serde_json::Value) {
        let jp = self.dir.path().join("out.json");
        let _ = std::fs::remove_file(&jp);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--json", jp.to_str().unwrap(), self.urls.to_str().unwrap()]);
        let out = load(&all, LIMIT);
        let v = if jp.exists() {
            json(&jp)
        } else {
            serde_json::Value::Null
        };
        (out, v)
    }
}

fn ca() -> String {
    data("test-ca.pem").to_str().unwrap().to_string()
}

#[test]
fn https_with_a_trusted_ca_resumes_sessions_and_checks_bodies() {
    let srv = tls_server(body(300_000));
    let run = Run::new(&srv, "localhost");
    let (out, v) = run.load(&["-p", "4", "-f", "100", "-checksum", "--cacert", &ca()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("code 200 -- 100"), "{stdout}");
    assert!(!stdout.contains("bad checksums"), "{stdout}");
    assert_eq!(v["bytes"], 100 * 300_000);
    // A connection per fetch: the first few handshakes are full, the rest resume
    // the sessions they left (the server saw the same).
    let (full, resumed) = (
        v["tls"]["full"].as_u64().unwrap(),
        v["tls"]["resumed"].as_u64().unwrap(),
    );
    assert_eq!(full + resumed, 100, "{}", v["tls"]);
    assert!(resumed >= 90, "{}", v["tls"]);
    assert_eq!(srv.connections.load(SeqCst), 100);
    assert_eq!(srv.resumed.load(SeqCst), resumed);
    assert!(
        stdout.contains(&format!("TLS handshakes: {full} full, {resumed} resumed")),
        "{stdout}"
    );
}

#[test]
fn no_resume_makes_every_handshake_full_and_keepalive_reuses_sessions() {
    let srv = tls_server(body(1000));
    let run = Run::new(&srv, "127.0.0.1");
    let (out, v) = run.load(&["-p", "2", "-f", "40", "--no-resume", "--cacert", &ca()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        (v["tls"]["full"].as_u64(), v["tls"]["resumed"].as_u64()),
        (Some(40), Some(0))
    );
    assert_eq!(srv.resumed.load(SeqCst), 0);

    let requests_before = srv.requests.load(SeqCst);
    let connections_before = srv.connections.load(SeqCst);
    let (out, v) = run.load(&["-p", "2", "-f", "200", "--keepalive", "--cacert", &ca()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(v["codes"]["200"], 200);
    assert_eq!(srv.requests.load(SeqCst) - requests_before, 200);
    assert_eq!(
        srv.connections.load(SeqCst) - connections_before,
        2,
        "two keep-alive connections"
    );
}

#[test]
fn an_untrusted_certificate_is_an_error_unless_insecure() {
    let srv = tls_server(body(1000));
    let run = Run::new(&srv, "localhost");
    // The server's own certificate is no CA: nothing it signs is trusted.
    let wrong = data("test-server.pem");
    let (out, v) = run.load(&["-p", "1", "-f", "3", "--cacert", wrong.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(err.contains("TLS: invalid peer certificate"), "{err}");
    assert_eq!(v["errors"], 3);

    let (out, v) = run.load(&["-p", "1", "-f", "3", "--insecure"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(v["codes"]["200"], 3);

    // A file with no certificate in it: one clear line, exit status 2 (bad input).
    let empty = write_file(run.dir.path(), "empty.pem", "");
    let (out, _) = run.load(&["-p", "1", "-f", "1", "--cacert", empty.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no usable certificate"), "{err}");
}
