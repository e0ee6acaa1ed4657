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
