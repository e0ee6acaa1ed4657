//! `--max-connections-per-ip`: the connections past the limit get 503 and
//! a close, on every backend, and a closed connection gives its place back.

mod common;

use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use common::*;

fn ask(s: &std::net::TcpStream) -> Resp {
    (&*s)
        .write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

#[test]
fn connections_per_ip_are_limited_on_every_backend() {
    let root = DocRoot::new(false);
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--max-connections-per-ip", "2"]);
        let first = srv.connect();
        let second = srv.connect();
        assert_eq!(ask(&first).status, 200, "{b}");
        assert_eq!(ask(&second).status, 200, "{b}");
        let third = srv.connect();
        let r = ask(&third);
        assert_eq!(r.status, 503, "{b}");
        assert_eq!(r.header("retry-after"), Some("1"), "{b}");
        assert!(r.closes(), "{b}");
        assert!(closed_by_server(&mut &third, Duration::from_secs(5)), "{b}");
        // The first two go on being served.
        assert_eq!(ask(&first).status, 200, "{b}");
        // One closes: its place is given back (once the server has seen
        // the close).
        drop(second);
        let t = Instant::now();
        loop {
            let s = srv.connect();
            let r = ask(&s);
            if r.status == 200 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{b}: place never given back"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn no_limit_by_default() {
    let root = DocRoot::new(false);
    let srv = Server::start("io-uring", &root.dir, &[]);
    let conns: Vec<_> = (0..50).map(|_| srv.connect()).collect();
    for c in &conns {
        assert_eq!(ask(c).status, 200);
    }
}

/// Seconds to fetch `path` whole on a fresh connection, and its bytes.
fn timed_get(srv: &Server, path: &str) -> (f64, Vec<u8>) {
    let t = Instant::now();
    let r = get(srv, path);
    assert_eq!(r.status, 200);
    (t.elapsed().as_secs_f64(), r.body)
}

#[test]
fn limit_rate_paces_each_response_on_every_backend() {
    let root = DocRoot::new(false);
    let want = root.read("f1048583");
    for b in backends() {
        // 1 MiB at 1 MiB/s: about 0.75 s (the first tick's worth goes at
        // once), every byte right.
        let srv = Server::start(&b, &root.dir, &["--limit-rate", "1m"]);
        let (secs, body) = timed_get(&srv, "/f1048583");
        assert!(body == want, "{b}: wrong bytes");
        assert!((0.6..3.0).contains(&secs), "{b}: {secs:.2} s at 1 MiB/s");
        // Two at once: each has its own allowance.
        let h: Vec<_> = (0..2)
            .map(|_| {
                let url = srv.url("/f1048583");
                std::thread::spawn(move || {
                    let t = Instant::now();
                    let out = std::process::Command::new("curl")
                        .args(["-sS", "-o", "/dev/null", &url])
                        .status()
                        .unwrap();
                    assert!(out.success());
                    t.elapsed().as_secs_f64()
                })
            })
            .collect();
        for t in h {
            let secs = t.join().unwrap();
            assert!((0.6..3.0).contains(&secs), "{b}: {secs:.2} s side by side");
        }
        // Small files are not held back, and --limit-rate-after lets the
        // first bytes go at full speed.
        let (secs, _) = timed_get(&srv, "/f4097");
        assert!(secs < 0.1, "{b}: a small file took {secs:.2} s");
        let srv = Server::start(
            &b,
            &root.dir,
            &["--limit-rate", "64k", "--limit-rate-after", "2m"],
        );
        let (secs, body) = timed_get(&srv, "/f1048583");
        assert!(
            body == want && secs < 0.5,
            "{b}: {secs:.2} s under limit-rate-after"
        );
    }
}
