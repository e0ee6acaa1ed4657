//! The PROXY protocol on `--proxy-listen`: v1 and v2 headers from a
//! trusted proxy put the client they name in the access log; a missing,
//! malformed, oversized or slow header, or a connection from outside
//! `--proxy-from`, is closed without a byte of answer while the server
//! goes on serving; a plain `--listen` beside it is untouched; HAProxy's
//! own `send-proxy-v2` works end to end; bad flags are one error line.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// spindle with a plain listener (`srv.addr`) and a PROXY listener
/// trusting `trust`; the PROXY listener's address and the access log.
fn start(
    backend: &str,
    root: &DocRoot,
    trust: &str,
    extra: &[&str],
) -> (Server, SocketAddr, PathBuf) {
    let log = root.path("../").join(format!(
        "proxy-access-{}-{backend}-{}.log",
        std::process::id(),
        root.dir.file_name().unwrap().to_string_lossy()
    ));
    let _ = std::fs::remove_file(&log);
    let mut args = vec![
        "--proxy-listen",
        "127.0.0.1:0",
        "--proxy-from",
        trust,
        "--access-log",
        log.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let srv = Server::start(backend, &root.dir, &args);
    let proxy = proxy_addr(&srv.stderr());
    assert_ne!(proxy, srv.addr);
    (srv, proxy, log)
}

fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut h = V2_SIG.to_vec();
    h.push(0x20 | cmd);
    h.push(fam);
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(body);
    h
}

fn v2_ipv4(src: [u8; 4], sport: u16) -> Vec<u8> {
    let mut b = src.to_vec();
    b.extend_from_slice(&[127, 0, 0, 1]);
    b.extend_from_slice(&sport.to_be_bytes());
    b.extend_from_slice(&8080u16.to_be_bytes());
    v2(1, 0x11, &b)
}

fn v2_ipv6(src: &str, sport: u16) -> Vec<u8> {
    let mut b = src.parse::<Ipv6Addr>().unwrap().octets().to_vec();
    b.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    b.extend_from_slice(&sport.to_be_bytes());
    b.extend_from_slice(&8080u16.to_be_bytes());
    // A TLV (PP2_TYPE_UNIQUE_ID), which the server skips.
    b.extend_from_slice(&[0x05, 0, 4, 1, 2, 3, 4]);
    v2(1, 0x21, &b)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Everything the server sends until it closes, and how long that took.
fn read_to_close(s: &mut TcpStream) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e} after {:?} and {} bytes", t.elapsed(), out.len()),
        }
    }
    (out, t.elapsed())
}

/// The first field of the log line for `target`.
fn logged_client(lines: &[String], target: &str) -> String {
    let needle = format!("\"GET {target} HTTP/1.1\"");
    let line = lines
        .iter()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no log line for {target}: {lines:#?}"));
    line.split(' ').next().unwrap().to_string()
}

#[test]
fn headers_put_the_client_in_the_access_log() {
    for b in backends() {
        let root = DocRoot::new(false);
        let (srv, proxy, log) = start(&b, &root, "127.0.0.0/8", &[]);
        let want = root.read("f4097");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"PROXY TCP4 192.0.2.7 127.0.0.1 56324 8080\r\n".to_vec(),
                "192.0.2.7",
            ),
            (
                b"PROXY TCP6 2001:db8::7 ::1 56324 8080\r\n".to_vec(),
                "2001:db8::7",
            ),
            (b"PROXY UNKNOWN\r\n".to_vec(), "127.0.0.1"),
            (v2_ipv4([198, 51, 100, 9], 40_000), "198.51.100.9"),
            (v2_ipv6("2001:db8:1::9", 40_001), "2001:db8:1::9"),
            // LOCAL (a balancer's health check): the peer is the client.
            (v2(0, 0x00, &[]), "127.0.0.1"),
        ];
        for (n, (header, _)) in cases.iter().enumerate() {
            let mut s = connect(proxy);
            // The header in two pieces, the request after it: the server
            // must wait for the rest and then read both.
            let (a, rest) = header.split_at(header.len() / 2);
            s.write_all(a).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            s.write_all(rest).unwrap();
            write!(s, "GET /f4097?k={n}a HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut r = BufReader::new(s);
            let resp = read_response(&mut r, false).unwrap();
            assert_eq!(resp.status, 200, "{b} case {n}");
            assert_eq!(resp.body, want, "{b} case {n}");
            // Kept alive: the next request is from the same client, and
            // has no header of its own.
            write!(
                r.get_mut(),
                "GET /f1?k={n}b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let resp = read_response(&mut r, false).unwrap();
            assert_eq!(resp.status, 200, "{b} case {n}");
            assert!(closed_by_server(&mut r, Duration::from_secs(5)), "{b}");
        }
        let lines = wait_log_lines(&log, 2 * cases.len());
        for (n, (_, client)) in cases.iter().enumerate() {
            assert_eq!(
                logged_client(&lines, &format!("/f4097?k={n}a")),
                *client,
                "{b} case {n}"
            );
            assert_eq!(
                logged_client(&lines, &format!("/f1?k={n}b")),
                *client,
                "{b} case {n}"
            );
        }
        drop(srv);
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn missing_bad_or_slow_headers_close_without_an_answer() {
    for b in backends() {
        let root = DocRoot::new(false);
        let (srv, proxy, log) = start(&b, &root, "127.0.0.1", &["--header-timeout", "1"]);
        let mut oversize = v2(1, 0x11, &[0; 600]);
        oversize.truncate(16);
        let bad: [(&str, Vec<u8>); 6] = [
            ("no header", b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n".to_vec()),
            ("garbage", b"HELLO\r\n\r\n".to_vec()),
            (
                "v1 with LF only",
                b"PROXY TCP4 192.0.2.7 127.0.0.1 1 2\nGET /f1 HTTP/1.1\r\n\r\n".to_vec(),
            ),
            (
                "v1 over 107 bytes",
                [&b"PROXY UNKNOWN "[..], &[b'x'; 120]].concat(),
            ),
            ("v2 UDP", {
                let mut h = v2_ipv4([192, 0, 2, 7], 1);
                h[13] = 0x12;
                h
            }),
            ("v2 longer than the cap", oversize),
        ];
        for (what, input) in bad {
            let mut s = connect(proxy);
            s.write_all(&input).unwrap();
            let (got, took) = read_to_close(&mut s);
            assert!(
                got.is_empty(),
                "{b} {what}: {:?}",
                String::from_utf8_lossy(&got)
            );
            assert!(
                took < Duration::from_millis(900),
                "{b} {what}: closed after {took:?}, not at once"
            );
        }
        // Part of a header, then silence: closed at the header timeout.
        for (what, input) in [
            ("truncated v1", b"PROXY TCP4 192.0.2".to_vec()),
            ("truncated v2", v2_ipv4([192, 0, 2, 7], 1)[..20].to_vec()),
            ("nothing", Vec::new()),
        ] {
            let mut s = connect(proxy);
            s.write_all(&input).unwrap();
            let (got, took) = read_to_close(&mut s);
            assert!(
                got.is_empty(),
                "{b} {what}: {:?}",
                String::from_utf8_lossy(&got)
            );
            assert!(
                took >= Duration::from_millis(900) && took < Duration::from_secs(5),
                "{b} {what}: closed after {took:?}; the header timeout is 1 s"
            );
        }
        // The server goes on serving, on both listeners.
        let mut s = connect(proxy);
        s.write_all(b"PROXY TCP4 192.0.2.8 127.0.0.1 1 2\r\nGET /f1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(
            read_response(&mut BufReader::new(s), false).unwrap().status,
            200,
            "{b}"
        );
        assert_eq!(get(&srv, "/f1").status, 200, "{b}");
        // Only those two were answered, so only those two are logged.
        let lines = wait_log_lines(&log, 2);
        std::thread::sleep(Duration::from_millis(200));
        let lines_now = wait_log_lines(&log, 2);
        assert_eq!(lines.len(), 2, "{b}: {lines:#?}");
        assert_eq!(lines_now.len(), 2, "{b}: {lines_now:#?}");
        assert!(
            lines[0].starts_with("192.0.2.8 ") || lines[1].starts_with("192.0.2.8 "),
            "{b}: {lines:#?}"
        );
        drop(srv);
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn connections_from_untrusted_addresses_are_closed_at_once() {
    for b in backends() {
        let root = DocRoot::new(false);
        // Only 10.0.0.0/8 may send headers; the test connects from 127.0.0.1.
        let (srv, proxy, log) = start(&b, &root, "10.0.0.0/8", &[]);
        for _ in 0..3 {
            let mut s = connect(proxy);
            // The server may have closed already (a reset then fails the
            // write): what counts is that nothing comes back.
            let _ = s.write_all(
                b"PROXY TCP4 192.0.2.7 127.0.0.1 1 2\r\nGET /f1 HTTP/1.1\r\nHost: t\r\n\r\n",
            );
            let (got, took) = read_to_close(&mut s);
            assert!(got.is_empty(), "{b}: {:?}", String::from_utf8_lossy(&got));
            // Not the header timeout (20 s by default): at once.
            assert!(took < Duration::from_secs(2), "{b}: closed after {took:?}");
        }
        assert_eq!(get(&srv, "/f1").status, 200, "{b}");
        let err = srv.stderr();
        assert_eq!(
            err.matches("refused a connection from 127.0.0.1 on a PROXY listener")
                .count(),
            1,
            "{b}: said once\n{err}"
        );
        let lines = wait_log_lines(&log, 1);
        assert_eq!(lines.len(), 1, "{b}: {lines:#?}");
        assert!(lines[0].starts_with("127.0.0.1 "), "{b}: {lines:#?}");
        drop(srv);
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn a_plain_listener_beside_it_takes_proxy_lines_for_bad_requests() {
    for b in backends() {
        let root = DocRoot::new(false);
        let (srv, _proxy, log) = start(&b, &root, "127.0.0.1", &[]);
        // What a plain listener always answered to a PROXY line: httparse
        // finds `192.0.2.7` where the HTTP version belongs, so 505.
        let r = request(
            &srv,
            "PROXY TCP4 192.0.2.7 127.0.0.1 1 2\r\nGET /f1 HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        assert_eq!(r.status, 505, "{b}");
        assert!(r.closes(), "{b}");
        let mut s = srv.connect();
        s.write_all(&v2_ipv4([192, 0, 2, 7], 1)).unwrap();
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let r = read_response(&mut BufReader::new(s), false).unwrap();
        assert_eq!(r.status, 400, "{b}");
        let r = get(&srv, "/f1?plain");
        assert_eq!(r.status, 200, "{b}");
        let lines = wait_log_lines(&log, 3);
        assert_eq!(logged_client(&lines, "/f1?plain"), "127.0.0.1", "{b}");
        assert!(
            lines.iter().all(|l| l.starts_with("127.0.0.1 ")),
            "{b}: {lines:#?}"
        );
        drop(srv);
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn bad_proxy_flags_give_one_line_and_exit_1() {
    for (args, needle) in [
        (
            &["--proxy-listen", "127.0.0.1:0"][..],
            "proxy-listen needs proxy-from",
        ),
        (
            &["--listen", "127.0.0.1:0", "--proxy-from", "10.0.0.0/8"][..],
            "proxy-from is used by proxy-listen",
        ),
        (
            &[
                "--proxy-listen",
                "127.0.0.1:0",
                "--proxy-from",
                "10.0.0.0/33",
            ],
            "prefix length",
        ),
        (
            &[
                "--proxy-listen",
                "127.0.0.1:0",
                "--proxy-from",
                "10.1.2.3/8",
            ],
            "did you mean 10.0.0.0/8",
        ),
        (
            &[
                "--proxy-listen",
                "127.0.0.1:0",
                "--proxy-from",
                "proxy.example",
            ],
            "not an address block",
        ),
    ] {
        startup_error(args, needle);
    }
}

/// HAProxy in front, `send-proxy-v2` from source address 127.0.0.3, the
/// only one spindle trusts: a fetch through it is served and logged with
/// the client's address (127.0.0.1), not HAProxy's; HAProxy's health
/// checks (`check-send-proxy`: a v2 `LOCAL` header) are logged with
/// HAProxy's own.
#[test]
fn haproxy_send_proxy_v2_end_to_end() {
    if Command::new("haproxy").arg("-v").output().is_err() {
        test_skip::skip_or_fail("no haproxy (apt-get install haproxy)");
        return;
    }
    for b in backends() {
        let root = DocRoot::new(false);
        let (srv, proxy, log) = start(&b, &root, "127.0.0.3/32", &[]);
        let front = free_port();
        let cfg = root
            .path("../")
            .join(format!("haproxy-{}-{b}.cfg", std::process::id()));
        std::fs::write(
            &cfg,
            format!(
                "global\n    maxconn 100\n\
                 defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\
                 frontend fe\n    bind 127.0.0.4:{front}\n    default_backend be\n\
                 backend be\n    option httpchk GET /page.txt\n    \
                 server s1 {proxy} send-proxy-v2 source 127.0.0.3 check check-send-proxy inter 200ms\n"
            ),
        )
        .unwrap();
        let hap_err = cfg.with_extension("err");
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&hap_err).unwrap())
            .spawn()
            .expect("start haproxy");
        let mut haproxy = Killed(child);
        let front: SocketAddr = format!("127.0.0.4:{front}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match TcpStream::connect(front) {
                Ok(s) => break s,
                Err(e) => {
                    let exited = haproxy.0.try_wait().unwrap();
                    let err = std::fs::read_to_string(&hap_err).unwrap_or_default();
                    assert!(
                        exited.is_none() && Instant::now() < deadline,
                        "{b}: haproxy does not listen: {e}\n{err}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut s = stream;
        s.write_all(b"GET /f1048583?via=haproxy HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let r = read_response(&mut BufReader::new(s), false).unwrap();
        assert_eq!(r.status, 200, "{b}");
        assert_eq!(r.body, root.read("f1048583"), "{b}");
        // Health checks come every 200 ms; wait for two.
        let deadline = Instant::now() + Duration::from_secs(10);
        let lines = loop {
            let lines = wait_log_lines(&log, 1);
            let checks = lines
                .iter()
                .filter(|l| l.contains("\"GET /page.txt "))
                .count();
            if checks >= 2 || Instant::now() > deadline {
                break lines;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            logged_client(&lines, "/f1048583?via=haproxy"),
            "127.0.0.1",
            "{b}: {lines:#?}"
        );
        let checks: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("\"GET /page.txt "))
            .collect();
        assert!(
            checks.len() >= 2,
            "{b}: no health checks logged: {lines:#?}"
        );
        assert!(
            checks.iter().all(|l| l.starts_with("127.0.0.3 ")),
            "{b}: {checks:#?}"
        );
        drop(srv);
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&cfg);
        let _ = std::fs::remove_file(&hap_err);
    }
}
