//! Several ranges in one request: `multipart/byteranges` on every backend,
//! merged when they overlap or touch, and capped (the "bytes=0-,0-,..."
//! denial of service costs nothing).

mod common;

use std::io::{BufReader, Write};
use std::process::Command;
use std::time::Instant;

use common::*;

/// The parts of a multipart/byteranges body: (Content-Range, bytes).
fn parts(r: &Resp) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").expect("content-type");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("not multipart: {ct}"));
    let delim = format!("--{boundary}");
    let body = &r.body[..];
    let mut out = Vec::new();
    let mut at = 0;
    // The body starts with the first delimiter; each part is a head, a
    // blank line, then exactly the range's bytes, then CRLF and the next
    // delimiter; the last delimiter ends in "--" CRLF.
    assert!(
        body.starts_with(delim.as_bytes()),
        "body starts with the delimiter"
    );
    loop {
        at += delim.len();
        if body[at..].starts_with(b"--\r\n") {
            assert_eq!(at + 4, body.len(), "bytes after the closing delimiter");
            return out;
        }
        assert!(body[at..].starts_with(b"\r\n"));
        at += 2;
        let head_end = at + find(&body[at..], b"\r\n\r\n").expect("part head");
        let head = std::str::from_utf8(&body[at..head_end]).unwrap();
        at = head_end + 4;
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: bytes "))
            .expect("Content-Range in part")
            .to_string();
        assert!(head.contains("Content-Type: "), "{head}");
        let (span, _) = cr.split_once('/').unwrap();
        let (a, b) = span.split_once('-').unwrap();
        let n = b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1;
        out.push((cr.clone(), body[at..at + n].to_vec()));
        at += n;
        assert!(body[at..].starts_with(b"\r\n"), "CRLF after part data");
        at += 2;
        assert!(body[at..].starts_with(delim.as_bytes()), "next delimiter");
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Path, `Range` value, the file's bytes, and the parts expected (first
/// and last byte of each).
type Case<'a> = (&'a str, &'a str, &'a [u8], Vec<(usize, usize)>);

fn ranged(srv: &Server, path: &str, range: &str) -> Resp {
    request(
        srv,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\nRange: {range}\r\n\r\n"),
    )
}

#[test]
fn several_ranges_get_multipart_on_every_backend() {
    let root = DocRoot::new(true);
    let mid = root.read("f1048583");
    let small = root.read("f4097");
    let big = root.read("big");
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &[]);
        // A small file twice, so the second answer comes from the cache's
        // copy in memory (the inline path); then a mid-size and a big one
        // (sendfile and read paths, parts far apart).
        let cases: [Case; 4] = [
            (
                "/f4097",
                "bytes=0-9, 20-29, -7",
                &small,
                vec![(0, 9), (20, 29), (4090, 4096)],
            ),
            (
                "/f4097",
                "bytes=0-9, 20-29, -7",
                &small,
                vec![(0, 9), (20, 29), (4090, 4096)],
            ),
            (
                "/f1048583",
                "bytes=1000000-, 5-600000",
                &mid,
                vec![(5, 600000), (1000000, 1048582)],
            ),
            (
                "/big",
                "bytes=0-0,33554432-34603007,67108000-",
                &big,
                vec![(0, 0), (33554432, 34603007), (67108000, 67108863)],
            ),
        ];
        for (path, range, file, want) in cases {
            let r = ranged(&srv, path, range);
            assert_eq!(r.status, 206, "{b} {path} {range}");
            assert_eq!(r.header("content-range"), None, "{b}");
            assert!(r.header("etag").is_some() && r.header("last-modified").is_some());
            let got = parts(&r);
            assert_eq!(got.len(), want.len(), "{b} {path} {range}");
            for ((cr, bytes), (a, z)) in got.iter().zip(&want) {
                assert_eq!(cr, &format!("{a}-{z}/{}", file.len()), "{b} {path}");
                assert!(bytes[..] == file[*a..=*z], "{b} {path} {cr}: wrong bytes");
            }
        }
        // Overlapping and adjacent ranges merge: one part is a plain 206.
        let r = ranged(&srv, "/f102400", "bytes=100-199, 150-299, 300-399");
        assert_eq!(r.status, 206, "{b}");
        assert_eq!(
            r.header("content-range"),
            Some("bytes 100-399/102400"),
            "{b}"
        );
        assert_eq!(r.body, root.read("f102400")[100..400], "{b}");
        // HEAD: Range is for GET only (RFC 9110 §14.2): the whole file's head.
        let r = request(
            &srv,
            "HEAD /f102400 HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0,9-9\r\n\r\n",
        );
        assert_eq!(
            (r.status, r.header("content-length")),
            (200, Some("102400")),
            "{b}"
        );
        // Pipelined: two multipart answers and a plain one on one
        // connection, each whole.
        let mut s = srv.connect();
        let req = "GET /f102400 HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1,10-11\r\n\r\n";
        s.write_all(format!("{req}{req}GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let mut rd = BufReader::new(s);
        for _ in 0..2 {
            let r = read_response(&mut rd, false).unwrap();
            assert_eq!(parts(&r).len(), 2, "{b}");
        }
        assert_eq!(
            read_response(&mut rd, false).unwrap().body,
            root.read("f1"),
            "{b}"
        );
    }
}

#[test]
fn a_thousand_ranges_cost_nothing() {
    let root = DocRoot::new(false);
    for b in backends() {
        // A head large enough for 1,000 disjoint ranges.
        let srv = Server::start(&b, &root.dir, &["--max-header-size", "65536"]);
        let disjoint: Vec<String> = (0..1000).map(|i| format!("{}-{}", 3 * i, 3 * i)).collect();
        let overlapping = "0-,".repeat(1000);
        let within_cap: Vec<String> = (0..200).map(|i| format!("{}-{}", i, i)).collect();
        for range in [
            format!("bytes={}", disjoint.join(",")),
            format!("bytes={overlapping}"),
        ] {
            let t = Instant::now();
            let r = ranged(&srv, "/f102400", &range);
            // Ignored: the whole file, once.
            assert_eq!(r.status, 200, "{b}");
            assert_eq!(r.body.len(), 102400, "{b}");
            assert!(t.elapsed().as_secs() < 2, "{b}: {:?}", t.elapsed());
        }
        // Under the spec cap, 200 touching ranges merge into one.
        let r = ranged(
            &srv,
            "/f102400",
            &format!("bytes={}", within_cap[..60].join(",")),
        );
        assert_eq!(r.status, 206, "{b}");
        assert_eq!(r.header("content-range"), Some("bytes 0-59/102400"), "{b}");
        // Past the head limit: 431, as any oversized head.
        let r = ranged(
            &srv,
            "/f102400",
            &format!("bytes={}", "0-0,".repeat(20_000)),
        );
        assert_eq!(r.status, 431, "{b}");
    }
}

#[test]
fn curl_reads_a_multipart_answer() {
    let root = DocRoot::new(false);
    let srv = Server::start("io-uring", &root.dir, &[]);
    let out = Command::new("curl")
        .args(["-sS", "-r", "0-3,100-103", "-D", "-"])
        .arg(srv.url("/f102400"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = out.stdout;
    let head_end = find(&text, b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&text[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 206"), "{head}");
    assert!(
        head.contains("content-type: multipart/byteranges; boundary="),
        "{head}"
    );
    let body = &text[head_end + 4..];
    let f = root.read("f102400");
    assert!(find(body, &f[0..4]).is_some() && find(body, &f[100..104]).is_some());
    assert!(find(body, b"Content-Range: bytes 100-103/102400").is_some());
}
