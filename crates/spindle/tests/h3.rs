//! HTTP/3 (`--http3`) against a real client: `gtlsclient`, Debian's
//! ngtcp2-client (ngtcp2, nghttp3, GnuTLS), on every backend that serves
//! it. Bodies byte for byte, the access log's `HTTP/3`, the same answers
//! as over HTTP/1.1 and HTTP/2 (curl), `Alt-Svc` on HTTPS, and the flag's
//! errors.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use spindle::config::Cap;

/// gtlsclient is installed; under CI its absence fails the test.
#[track_caller]
fn have_gtlsclient() -> bool {
    let ok = Command::new("gtlsclient").arg("--version").output().is_ok();
    if !ok {
        test_skip::skip_or_fail("gtlsclient is not installed (Debian ngtcp2-client)");
    }
    ok
}

/// gtlsclient fetching `paths` over one connection (concurrent streams);
/// `download`: where bodies go (each by its path's last part); `verbose`:
/// its log, which names each response field, is returned.
fn gtlsclient(port: u16, paths: &[&str], download: Option<&Path>, verbose: bool) -> String {
    let mut cmd = Command::new("gtlsclient");
    cmd.args(["--exit-on-all-streams-close", "--timeout=30s"]);
    if !verbose {
        cmd.arg("--quiet");
    }
    if let Some(d) = download {
        cmd.arg(format!("--download={}", d.display()));
    }
    cmd.args(["127.0.0.1", &port.to_string()]);
    for p in paths {
        cmd.arg(format!("https://localhost:{port}{p}"));
    }
    let out = cmd.output().expect("gtlsclient runs");
    assert!(
        out.status.success(),
        "gtlsclient {paths:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Fields that differ by protocol or by the moment: left out of the
/// comparison (RFC 9114 §4.2 forbids the connection-specific ones).
const PROTOCOL_OWN: &[&str] = &["date", "connection", "keep-alive", "alt-svc"];

/// The status and the fields (lowercased, in order) of the response to a
/// single request in gtlsclient's verbose log.
fn h3_head(log: &str) -> (u16, Vec<(String, String)>) {
    let mut status = 0;
    let mut fields = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("http: stream 0x0 [") else {
            continue;
        };
        let rest = rest.strip_suffix(']').expect("a field line");
        let (n, v) = rest.split_once(": ").expect("name: value");
        if n == ":status" {
            status = v.parse().unwrap();
        } else if !PROTOCOL_OWN.contains(&n) {
            fields.push((n.to_string(), v.to_string()));
        }
    }
    (status, fields)
}

/// curl's status, fields and body for `url` over `version` (`--http1.1`,
/// `--http2`) on the HTTPS port.
fn curl_head(port: u16, version: &str, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", version, "--cacert"])
        .arg(tls_data("ca.pem"))
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .arg("-D")
        .arg(&head)
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {path}");
    let text = std::fs::read_to_string(&head).unwrap();
    let mut lines = text.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let fields = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .filter(|(n, _)| !PROTOCOL_OWN.contains(&n.as_str()))
        .collect();
    (status, fields, out.stdout)
}

#[test]
fn files_of_every_size_over_http3_byte_for_byte() {
    if !have_gtlsclient() {
        return;
    }
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        files_of_every_size_over_http3_on(b);
    }
}

fn files_of_every_size_over_http3_on(backend: &str) {
    let root = DocRoot::new(true);
    let log = root.path("../access-h3.log");
    let (srv, port) = start_with_https(
        backend,
        &root.dir,
        None,
        &["--http3", "--access-log", log.to_str().unwrap()],
    );
    let mut names: Vec<String> = SIZES.iter().map(|s| format!("f{s}")).collect();
    names.push("big".into());
    let paths: Vec<String> = names.iter().map(|n| format!("/{n}")).collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    gtlsclient(port, &paths, Some(dir.path()), false);
    for name in &names {
        let got = std::fs::read(dir.path().join(name)).unwrap_or_default();
        let want = root.read(name);
        assert!(
            got == want,
            "{name}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
    drop(srv);
    let lines = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    for name in &names {
        let line = lines
            .lines()
            .find(|l| l.contains(&format!("\"GET /{name} HTTP/3\" 200 ")))
            .unwrap_or_else(|| panic!("no HTTP/3 line for /{name} in {lines}"));
        let size = root.read(name).len();
        assert!(line.contains(&format!(" 200 {size} ")), "{line}");
    }
}

#[test]
fn http3_answers_as_http_1_1_and_http2_do() {
    if !have_gtlsclient() {
        return;
    }
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        http3_answers_as_the_others_on(b);
    }
}

fn http3_answers_as_the_others_on(backend: &str) {
    let root = DocRoot::new(false);
    let (_srv, port) = start_with_https(backend, &root.dir, None, &["--http3"]);
    let paths = [
        "/index.html",
        "/f4097",
        "/page.txt",
        "/nope",
        "/sub",
        "/sub/",
        "/.hidden",
        "/escape",
        "/name%20with%20spaces.txt",
    ];
    for path in paths {
        let dir = tempfile::tempdir().unwrap();
        let log = gtlsclient(port, &[path], Some(dir.path()), true);
        let (status, fields) = h3_head(&log);
        for version in ["--http1.1", "--http2"] {
            let (s, f, body) = curl_head(port, version, path);
            assert_eq!(status, s, "{path}: HTTP/3 against {version}");
            assert_eq!(fields, f, "{path}: fields, HTTP/3 against {version}");
            let name = path.rsplit('/').next().unwrap();
            if !name.is_empty() {
                // gtlsclient names the file as the path has it.
                let got = std::fs::read(dir.path().join(name)).unwrap_or_default();
                assert!(got == body, "{path}: body, HTTP/3 against {version}");
            }
        }
    }
}

#[test]
fn alt_svc_advertises_http3_on_https_only() {
    let root = DocRoot::new(false);
    let (srv, port) = start_with_https("io-uring", &root.dir, None, &["--http3"]);
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-D", "-", "--cacert"])
        .arg(tls_data("ca.pem"))
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .arg(format!("https://localhost:{port}/index.html"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        head.contains(&format!("alt-svc: h3=\":{port}\"; ma=86400")),
        "{head}"
    );
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-D", "-"])
        .arg(srv.url("/index.html"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(!head.contains("alt-svc"), "plain HTTP: {head}");
    if have_gtlsclient() {
        let log = gtlsclient(port, &["/index.html"], None, true);
        assert!(log.contains("http: stream 0x0 [:status: 200]"), "{log}");
        assert!(!log.contains("[alt-svc:"), "HTTP/3: {log}");
    }
}

#[test]
fn http3_flag_errors_are_one_line() {
    let root = DocRoot::new(false);
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["--http3", "--listen", "127.0.0.1:0"])
        .arg(&root.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--http3 needs an HTTPS listener"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_download_in_flight_finishes_through_the_drain() {
    if !have_gtlsclient() {
        return;
    }
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        a_download_finishes_through_the_drain_on(b);
    }
}

/// SIGTERM half a second into a 64 MiB download paced at 32 MB/s (two
/// seconds): the download ends whole, and the server exits once it is
/// acknowledged, long before QUIC's 30 s idle timeout.
fn a_download_finishes_through_the_drain_on(backend: &str) {
    let root = DocRoot::new(true);
    let (mut srv, port) = start_with_https(
        backend,
        &root.dir,
        None,
        &["--http3", "--limit-rate", "32m"],
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let client = std::thread::spawn(move || gtlsclient(port, &["/big"], Some(&d), false));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let t0 = std::time::Instant::now();
    let status = srv.terminate();
    let took = t0.elapsed();
    client.join().unwrap();
    assert!(status.success(), "{status:?}");
    let got = std::fs::read(dir.path().join("big")).unwrap_or_default();
    assert!(
        got == root.read("big"),
        "{} bytes of {}",
        got.len(),
        BIG_SIZE
    );
    assert!(
        took < std::time::Duration::from_secs(8),
        "the server took {took:?} to exit after the download"
    );
}
