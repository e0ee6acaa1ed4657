//! Files changed in place while they are being sent: the client must be
//! able to tell. A response either carries exactly the bytes of the version
//! its head names, or ends short of its `Content-Length`.
//!
//! Two kernel facts shape these tests. A change in place (a write, a
//! truncation) alters page-cache pages, and bytes that `sendfile` queued are
//! those very pages until the peer has read them (on loopback, until the
//! client's `read`): so with `sendfile` on, a change can still reach bytes
//! the server handed over before it. What the server can do, on every
//! backend, is check the file before the body's last bytes and drop the
//! connection instead (`last_bytes_ok`); with `--no-sendfile`, every byte
//! is a copy made before that check, and nothing can reach it afterwards.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::*;

/// Sends a GET for `/name` and reads its head: the `Content-Length`.
fn get_head(r: &mut BufReader<TcpStream>, name: &str) -> u64 {
    r.get_ref()
        .write_all(format!("GET /{name} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let mut len = None;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = Some(v.trim().parse().unwrap());
        }
    }
    len.expect("Content-Length")
}

/// Reads the body until the server closes or `len` bytes have come.
fn read_body(r: &mut BufReader<TcpStream>, len: u64) -> Vec<u8> {
    let mut body = Vec::new();
    let _ = r.take(len).read_to_end(&mut body);
    body
}

/// The server stays well: a fresh file is served whole.
fn still_serves(srv: &Server, dir: &Path, b: &str) {
    std::fs::write(dir.join("ok"), "fine\n").unwrap();
    assert_eq!(
        get(srv, "/ok").body,
        b"fine\n",
        "{b}: server unwell after a change"
    );
}

/// A large file rewritten in place, same size, while its body is being
/// sent: the response must end short (the bytes already out may come from
/// either version, but the client sees the length broken), and the server
/// says why. Without the check before the last bytes, every backend sent
/// the full length, a mix of the two versions.
#[test]
fn a_file_rewritten_in_place_mid_response_ends_short() {
    const SIZE: u64 = 24 << 20;
    let dir = std::env::temp_dir().join(format!("spindle-rewrite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut runs: Vec<(String, Vec<&str>)> = backends().into_iter().map(|b| (b, vec![])).collect();
    for b in backends_with(Cap::Buffers) {
        runs.push((b, vec!["--no-sendfile"]));
    }
    for (b, flags) in &runs {
        let original = random_bytes(SIZE, 5);
        let path = dir.join("big");
        std::fs::write(&path, &original).unwrap();
        let srv = Server::start(b, &dir, flags);
        let s = srv.connect();
        small_rcvbuf(&s);
        let mut r = BufReader::with_capacity(4096, s);
        let len = get_head(&mut r, "big");
        assert_eq!(len, SIZE);
        let mut body = vec![0u8; 1 << 20];
        r.read_exact(&mut body).unwrap();
        // The second half, new bytes in place (same size).
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&random_bytes(SIZE / 2, 6), SIZE / 2)
            .unwrap();
        drop(f);
        body.extend(read_body(&mut r, SIZE - body.len() as u64));
        assert!(
            (body.len() as u64) < SIZE,
            "{b} {flags:?}: a file rewritten in place mid-response was sent at full length"
        );
        assert!(
            srv.stderr().contains("changed while being sent"),
            "{b} {flags:?}: the change was not noticed:\n{}",
            srv.stderr()
        );
        still_serves(&srv, &dir, b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The soak's finding: a cached file whose whole body is already queued in
/// the sockets, then truncated in place. With `sendfile` the queued bytes
/// are page-cache pages, and the truncation zeroes them under the promised
/// length (nginx and lighttpd do the same); with `--no-sendfile` they are
/// copies, so the client receives exactly the version its head names.
#[test]
fn without_sendfile_a_truncation_cannot_reach_queued_bytes() {
    const SIZE: u64 = 4 << 20;
    let dir = std::env::temp_dir().join(format!("spindle-trunc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for b in &backends_with(Cap::Buffers) {
        let original = random_bytes(SIZE, 8);
        let path = dir.join("f");
        std::fs::write(&path, &original).unwrap();
        let srv = Server::start(b, &dir, &["--no-sendfile"]);
        // Cached (and in the open-file cache) before the test fetch.
        assert_eq!(get(&srv, "/f").body, original, "{b}");
        let mut r = BufReader::with_capacity(4096, srv.connect());
        let len = get_head(&mut r, "f");
        assert_eq!(len, SIZE);
        // Let the server queue what the socket buffers take.
        std::thread::sleep(Duration::from_millis(500));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1_000_001)
            .unwrap();
        let body = read_body(&mut r, SIZE);
        assert!(
            body[..] == original[..body.len()],
            "{b}: bytes other than the file's under its Content-Length (first difference at {})",
            body.iter()
                .zip(&original)
                .position(|(x, y)| x != y)
                .unwrap_or(0)
        );
        still_serves(&srv, &dir, b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The seed's sendfile backends cannot send from a copy: they refuse the
/// option instead of ignoring it.
#[test]
fn no_sendfile_is_refused_by_the_sendfile_backends() {
    let without: Vec<BackendKind> = BackendKind::ALL
        .into_iter()
        .filter(|b| !b.has(Cap::Buffers))
        .collect();
    assert!(
        !without.is_empty(),
        "a backend that cannot send from a copy"
    );
    for b in without {
        startup_error(
            &[
                "--listen",
                "127.0.0.1:0",
                "--backend",
                b.name(),
                "--no-sendfile",
            ],
            "is built on sendfile(2)",
        );
    }
}

/// A file appended to while it is sent (a growing log, a recording) is not
/// a change of the bytes promised: the response goes out whole, the bytes
/// of the length its head gave.
#[test]
fn a_file_appended_to_mid_response_is_served_whole() {
    const SIZE: u64 = 24 << 20;
    let dir = std::env::temp_dir().join(format!("spindle-append-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for b in backends() {
        let original = random_bytes(SIZE, 9);
        let path = dir.join("growing");
        std::fs::write(&path, &original).unwrap();
        let srv = Server::start(&b, &dir, &[]);
        let s = srv.connect();
        small_rcvbuf(&s);
        let mut r = BufReader::with_capacity(4096, s);
        assert_eq!(get_head(&mut r, "growing"), SIZE);
        let mut body = vec![0u8; 1 << 20];
        r.read_exact(&mut body).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&random_bytes(1 << 20, 10)).unwrap();
        drop(f);
        body.extend(read_body(&mut r, SIZE - body.len() as u64));
        assert!(
            body == original,
            "{b}: {} bytes, not the file's first {SIZE}",
            body.len()
        );
        assert!(
            !srv.stderr().contains("changed while being sent"),
            "{b}: {}",
            srv.stderr()
        );
        still_serves(&srv, &dir, &b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
