//! HTTPS on the io-uring backend, with real clients: curl (OpenSSL) for files
//! of every size class, ranges, HEAD, conditionals and keep-alive; raw TCP for
//! bad input on the HTTPS port; and the start-up errors. The certificates are
//! the test ones in tests/data/tls (a test CA; p256 names localhost and
//! 127.0.0.1). spindle-load's HTTPS run against spindle is in
//! crates/spindle-load/tests/spindle.rs.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// spindle with a plain listener and an HTTPS one serving the test P-256
/// certificate; the HTTPS port.
fn start_https(backend: &str, root: &DocRoot, extra: &[&str]) -> (Server, u16) {
    start_https_with(
        backend,
        root,
        &tls_data("p256.pem"),
        &tls_data("p256.key"),
        extra,
    )
}

/// [`start_https`] with the certificate and key at these paths.
fn start_https_with(
    backend: &str,
    root: &DocRoot,
    cert: &Path,
    key: &Path,
    extra: &[&str],
) -> (Server, u16) {
    start_with_https(backend, &root.dir, Some((cert, key)), extra)
}

/// curl over HTTPS/1.1, verifying against the test CA; returns (status line
/// fields written by -w, body). HTTP/2 over TLS has its tests in h2.rs.
fn curl(port: u16, args: &[&str]) -> (String, Vec<u8>) {
    let ca = tls_data("ca.pem");
    let out = Command::new("curl")
        .args(["-sS", "--http1.1", "--max-time", "20", "--cacert"])
        .arg(&ca)
        .args([
            "--resolve",
            &format!("localhost:{port}:127.0.0.1"),
            "-w",
            "\n%{http_code} %{num_connects} %{ssl_verify_result}",
        ])
        .args(args)
        .output()
        .expect("curl is needed for this test");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut body = out.stdout;
    let cut = body.iter().rposition(|&b| b == b'\n').unwrap();
    let meta = String::from_utf8_lossy(&body[cut + 1..]).into_owned();
    body.truncate(cut);
    (meta, body)
}

#[test]
fn files_of_every_size_come_out_byte_for_byte_over_https() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let (srv, port) = start_https(b, &root, &[]);
        // The kernel TLS probe says which path HTTPS takes.
        let err = srv.stderr();
        assert!(
            err.contains("HTTPS: no kernel TLS")
                || err.contains("kernel TLS is available but not used"),
            "{err}"
        );
        for size in SIZES {
            let name = format!("f{size}");
            let (meta, body) = curl(port, &[&format!("https://localhost:{port}/{name}")]);
            assert!(meta.starts_with("200 1 0"), "{name}: {meta}");
            assert!(
                body == root.read(&name),
                "{name}: bytes differ ({} of {size})",
                body.len()
            );
        }
        // Several requests on one connection: keep-alive, one handshake.
        let urls: Vec<String> = ["f4096", "f102400", "f1048583"]
            .iter()
            .map(|n| format!("https://localhost:{port}/{n}"))
            .collect();
        let mut args: Vec<&str> = Vec::new();
        for u in &urls {
            args.extend(["-o", "/dev/null", u.as_str()]);
        }
        let (meta, _) = curl(port, &args);
        assert!(
            meta.ends_with("200 0 0"),
            "the last request reused the connection: {meta}"
        );
        // HTTP/1.0 (curl -0 offers ALPN http/1.0 only): served, then closed.
        let url = format!("https://localhost:{port}/f1048583");
        let (meta, body) = curl(port, &["-0", &url]);
        assert!(meta.starts_with("200"), "{b}: HTTP/1.0: {meta}");
        assert!(body == root.read("f1048583"), "{b}: HTTP/1.0 bytes");
    }
}

#[test]
fn ranges_head_and_conditionals_work_over_https() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let (_srv, port) = start_https(b, &root, &[]);
        let url = format!("https://localhost:{port}/f1048583");
        let all = root.read("f1048583");
        let (meta, body) = curl(port, &["-r", "1000-524999", &url]);
        assert!(meta.starts_with("206"), "{meta}");
        assert!(body == all[1000..525000], "range bytes");
        let (meta, body) = curl(port, &["-I", &url]);
        assert!(meta.starts_with("200"), "{meta}");
        let head = String::from_utf8_lossy(&body);
        assert!(head.contains("Content-Length: 1048583"), "{head}");
        let etag = head
            .lines()
            .find_map(|l| l.strip_prefix("ETag: "))
            .expect("ETag")
            .trim()
            .to_string();
        let (meta, body) = curl(port, &["-H", &format!("If-None-Match: {etag}"), &url]);
        assert!(meta.starts_with("304") && body.is_empty(), "{meta}");
    }
}

/// Reads until the server closes, or `limit`; true if it closed.
fn closed_within(s: &mut TcpStream, limit: Duration) -> (bool, Vec<u8>) {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while t.elapsed() < limit {
        match s.read(&mut b) {
            Ok(0) => return (true, got),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (true, got),
        }
    }
    (false, got)
}

#[test]
fn plain_http_garbage_and_stalled_handshakes_are_closed() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let (srv, port) = start_https(b, &root, &["--header-timeout", "1"]);
        // Plain HTTP to the HTTPS port: closed (at most a TLS alert first), no HTTP.
        for bytes in [
            &b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n"[..],
            &[0xffu8; 300][..],
        ] {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(bytes).unwrap();
            let (closed, got) = closed_within(&mut s, Duration::from_secs(5));
            assert!(closed, "not closed after {:?}", &bytes[..8]);
            assert!(!String::from_utf8_lossy(&got).contains("HTTP/"), "{got:?}");
        }
        // The start of a ClientHello, then nothing: --header-timeout (1 s) closes it.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])
            .unwrap();
        let t = Instant::now();
        let (closed, _) = closed_within(&mut s, Duration::from_secs(10));
        assert!(closed, "a stalled handshake was not closed");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "closed after {:?}",
            t.elapsed()
        );
        // The server still serves.
        let (meta, _) = curl(port, &[&format!("https://localhost:{port}/f1")]);
        assert!(meta.starts_with("200"), "{meta}");
        drop(srv);
    }
}

#[test]
fn bad_tls_settings_give_one_line_and_exit_1() {
    let cert = tls_data("p256.pem");
    let key = tls_data("p256.key");
    let other_key = tls_data("rsa.key");
    let (c, k, o) = (
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        other_key.to_str().unwrap(),
    );
    let l = ["--listen", "127.0.0.1:0"];
    let tl = ["--tls-listen", "127.0.0.1:0"];
    startup_error(
        &[&l[..], &tl[..], &["--tls-cert", c, "--tls-key", o]].concat(),
        "does not belong to certificate",
    );
    startup_error(
        &[
            &l[..],
            &tl[..],
            &["--tls-cert", "/nonexistent.pem", "--tls-key", k],
        ]
        .concat(),
        "/nonexistent.pem",
    );
    startup_error(
        &[&l[..], &tl[..]].concat(),
        "tls-listen needs a certificate",
    );
    startup_error(
        &[&l[..], &["--tls-cert", c, "--tls-key", k]].concat(),
        "tls-cert and tls-key are used by tls-listen",
    );
    startup_error(
        &[&l[..], &tl[..], &["--tls-cert", c]].concat(),
        "tls-cert needs tls-key",
    );
    startup_error(
        &[
            &l[..],
            &tl[..],
            &[
                "--tls-cert",
                c,
                "--tls-key",
                k,
                "--backend",
                "linux-sendfile",
            ],
        ]
        .concat(),
        "served by the io-uring and posix-aio backends",
    );
}

/// curl's view of the certificate a name gets: verified against the test CA, the
/// subject line of `-v`.
fn cert_subject(port: u16, name: &str) -> Option<String> {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-v",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "--cacert",
        ])
        .arg(tls_data("ca.pem"))
        .arg("--resolve")
        .arg(format!("{name}:{port}:127.0.0.1"))
        .arg(format!("https://{name}:{port}/f1"))
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines()
        .find_map(|l| l.split("subject: ").nth(1))
        .map(str::to_string)
}

#[test]
fn sighup_reloads_certificates_and_a_bad_file_keeps_the_old_ones() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let dir = root
            .path("../")
            .join(format!("certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::copy(tls_data("p256.pem"), &cert).unwrap();
        std::fs::copy(tls_data("p256.key"), &key).unwrap();
        let (srv, port) = start_https_with(b, &root, &cert, &key, &[]);
        let hup_and_wait = |needle: &str, count: usize| {
            // SAFETY: kill(2) on our child's pid.
            unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) };
            let t = Instant::now();
            while srv.stderr().matches(needle).count() < count {
                assert!(t.elapsed() < Duration::from_secs(5), "{}", srv.stderr());
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        assert!(cert_subject(port, "localhost")
            .unwrap()
            .contains("CN=localhost"));
        assert_eq!(
            cert_subject(port, "rsa.test"),
            None,
            "no certificate for rsa.test yet"
        );

        std::fs::copy(tls_data("rsa.pem"), &cert).unwrap();
        std::fs::copy(tls_data("rsa.key"), &key).unwrap();
        hup_and_wait("TLS certificates reloaded", 1);
        assert!(cert_subject(port, "rsa.test")
            .unwrap()
            .contains("CN=rsa.test"));

        // A key that is no key: one error line, and the running certificate stays.
        std::fs::write(&key, "not a key\n").unwrap();
        hup_and_wait("keeping the certificates in use", 1);
        assert!(
            srv.stderr().contains("no PEM private key"),
            "{}",
            srv.stderr()
        );
        assert!(cert_subject(port, "rsa.test")
            .unwrap()
            .contains("CN=rsa.test"));
        drop(srv);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn certificates_are_chosen_by_sni_from_the_config_file() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let conf = root
            .path("../")
            .join(format!("sni-{}.toml", std::process::id()));
        let d = |n: &str| tls_data(n).display().to_string();
        std::fs::write(
            &conf,
            format!(
                "tls-listen = [\"127.0.0.1:0\"]\ntls-cert = \"{}\"\ntls-key = \"{}\"\n\
                 tls-certificates = [\n  {{ names = [\"rsa.test\"], cert = \"{}\", key = \"{}\" }},\n  \
                 {{ names = [\"ed25519.test\"], cert = \"{}\", key = \"{}\" }},\n]\n",
                d("p256.pem"),
                d("p256.key"),
                d("rsa.pem"),
                d("rsa.key"),
                d("ed25519.pem"),
                d("ed25519.key")
            ),
        )
        .unwrap();
        let srv = Server::start(b, &root.dir, &["--config", conf.to_str().unwrap()]);
        let port = https_port(&srv);
        for (name, cn) in [
            ("localhost", "CN=localhost"),
            ("rsa.test", "CN=rsa.test"),
            ("ed25519.test", "CN=ed25519.test"),
        ] {
            let subject =
                cert_subject(port, name).unwrap_or_else(|| panic!("{name}: no verified answer"));
            assert!(subject.contains(cn), "{name}: {subject}");
        }
        drop(srv);
        let _ = std::fs::remove_file(&conf);
    }
}

/// A client that starts an HTTPS download and stops reading: --send-timeout
/// drops it, and the worker lets go of everything it held (the SEND of TLS
/// records waiting for socket space is cancelled).
#[test]
fn a_stalled_https_reader_is_dropped_after_the_send_timeout() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        // 64 MiB: more than the socket buffers on both sides hold.
        let root = DocRoot::new(true);
        let (srv, port) = start_https(b, &root, &["--send-timeout", "1"]);
        let pid = srv.child.id();
        let idle = sockets(pid);
        // curl with a 1-byte/s rate limit reads almost nothing of the body.
        let _curl = Killed(
            Command::new("curl")
                .args(["-sS", "--limit-rate", "1", "-o", "/dev/null", "--cacert"])
                .arg(tls_data("ca.pem"))
                .arg("--resolve")
                .arg(format!("localhost:{port}:127.0.0.1"))
                .arg(format!("https://localhost:{port}/big"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        connected_then_dropped(pid, idle, b);
        let (meta, _) = curl_get(port, "f1");
        assert!(meta.starts_with("200"), "{meta}");
    }
}

fn curl_get(port: u16, name: &str) -> (String, Vec<u8>) {
    curl(port, &[&format!("https://localhost:{port}/{name}")])
}

/// `openssl s_client` output (stdout and stderr) for one connection, which
/// sends an HTTP/1.0 GET and reads until the server closes (so that a
/// TLS 1.3 ticket, sent after the handshake, is read too).
fn s_client(port: u16, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(format!("127.0.0.1:{port}"))
        .arg("-ign_eof")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET /f1 HTTP/1.0\r\n\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// openssl's client: a close by the server ends with close_notify; the
/// server's order of suites wins (AES-128-GCM over a
/// client that lists ChaCha20 first, as testssl.sh asks), and sessions are
/// resumed with TLS 1.2 session IDs (`-reconnect`) and TLS 1.3 tickets.
#[test]
fn openssl_s_client_sees_server_order_and_resumption() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let (_srv, port) = start_https(b, &root, &[]);
        let out = s_client(
            port,
            &[
                "-brief",
                "-tls1_3",
                "-ciphersuites",
                "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256",
            ],
        );
        assert!(out.contains("Ciphersuite: TLS_AES_128_GCM_SHA256"), "{out}");
        // The HTTP/1.0 response ends with close_notify, not a bare FIN.
        assert!(out.contains("HTTP/1.1 200 OK"), "{out}");
        assert!(!out.contains("unexpected eof"), "no close_notify: {out}");
        let out = s_client(
            port,
            &[
                "-brief",
                "-tls1_2",
                "-cipher",
                "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256",
            ],
        );
        assert!(
            out.contains("Ciphersuite: ECDHE-ECDSA-AES128-GCM-SHA256"),
            "{out}"
        );
        // -reconnect: one full handshake, then five on the same session.
        let out = s_client(port, &["-tls1_2", "-reconnect"]);
        let reused = out.lines().filter(|l| l.starts_with("Reused")).count();
        assert_eq!(reused, 5, "{out}");
        let sess = root.dir.join("../s_client.sess");
        s_client(port, &["-tls1_3", "-sess_out", sess.to_str().unwrap()]);
        let out = s_client(port, &["-tls1_3", "-sess_in", sess.to_str().unwrap()]);
        assert!(out.contains("Reused, TLSv1.3"), "{out}");
        let _ = std::fs::remove_file(&sess);
    }
}

/// A client that offers only TLS 1.0, or only RSA key exchange with CBC, gets
/// a handshake failure and no HTTP; the server goes on serving.
#[test]
fn old_protocols_and_weak_suites_are_refused() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let (_srv, port) = start_https(b, &root, &[]);
        for args in [
            &["-tls1", "-cipher", "DEFAULT@SECLEVEL=0"][..],
            &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"][..],
            &["-tls1_2", "-cipher", "AES128-SHA:AES256-SHA:DES-CBC3-SHA"][..],
        ] {
            let out = s_client(port, args);
            // A handshake failure alert, no cipher, no HTTP.
            assert!(
                !out.contains("HTTP/1.1") && out.contains("Cipher is (NONE)"),
                "{b} {args:?}: a session was made: {out}"
            );
            assert!(out.contains("alert"), "{b} {args:?}: {out}");
        }
        let (meta, _) = curl_get(port, "f1");
        assert!(meta.starts_with("200"), "{b}: {meta}");
    }
}

/// SIGHUP with a new certificate while a download runs on the old one: the
/// download finishes byte for byte, and the next connection gets the new
/// certificate.
#[test]
fn a_download_across_a_certificate_reload_gets_every_byte() {
    for b in &backends_with(Cap::Https) {
        eprintln!("backend {b}");
        let root = DocRoot::new(true);
        let dir = root
            .path("../")
            .join(format!("certs-dl-{b}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::copy(tls_data("p256.pem"), &cert).unwrap();
        std::fs::copy(tls_data("p256.key"), &key).unwrap();
        let (srv, port) = start_https_with(b, &root, &cert, &key, &[]);
        let out = dir.join("big.out");
        // 64 MiB at 16 MB/s: about 4 s, the reload lands in the middle.
        let mut dl = Killed(
            Command::new("curl")
                .args(["-sS", "--limit-rate", "16M", "-o"])
                .arg(&out)
                .arg("--cacert")
                .arg(tls_data("ca.pem"))
                .arg("--resolve")
                .arg(format!("localhost:{port}:127.0.0.1"))
                .arg(format!("https://localhost:{port}/big"))
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(1000));
        std::fs::copy(tls_data("rsa.pem"), &cert).unwrap();
        std::fs::copy(tls_data("rsa.key"), &key).unwrap();
        // SAFETY: kill(2) on our child's pid.
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) };
        let t = Instant::now();
        while !srv.stderr().contains("TLS certificates reloaded") {
            assert!(t.elapsed() < Duration::from_secs(5), "{}", srv.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(cert_subject(port, "rsa.test")
            .unwrap()
            .contains("CN=rsa.test"));
        let st = dl.0.wait().unwrap();
        assert!(st.success(), "{b}: the download failed across the reload");
        assert!(
            std::fs::read(&out).unwrap() == root.read("big"),
            "{b}: the download's bytes differ"
        );
        drop(srv);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn access_rules_see_the_client_over_https() {
    let root = DocRoot::new(false);
    for b in &backends_with(Cap::Https) {
        let (_srv, port) = start_https(
            b,
            &root,
            &[
                "--rule",
                "/sub/**; allow=10.0.0.0/8",
                "--rule",
                "/noindex/**; allow=127.0.0.1",
            ],
        );
        // One connection for both (keep-alive): a refusal, then a file
        // its client may fetch (the peer is known on an HTTPS connection).
        let (meta, body) = curl(
            port,
            &[
                &format!("https://localhost:{port}/sub/"),
                "-o",
                "/dev/null",
                &format!("https://localhost:{port}/noindex/file.txt"),
            ],
        );
        assert_eq!(body, b"\n403 1 0file\n", "{b}: {meta}");
        assert_eq!(meta, "200 0 0", "{b}");
    }
}
