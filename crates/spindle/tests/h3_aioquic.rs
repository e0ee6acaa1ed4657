//! HTTP/3 (`--http3`) against a second real client: aioquic (PyPI, a
//! Python QUIC and HTTP/3 stack), through tests/data/h3client.py, on every
//! backend that serves HTTP/3. What the gtlsclient tests (tests/h3.rs) do
//! not ask: ranges (one, a suffix, unsatisfiable, several as
//! multipart/byteranges), conditionals (If-None-Match, If-Modified-Since,
//! If-Range), HEAD, a POST, and 50 requests at once on one connection.
//! Each answer is compared with what curl gets over HTTP/2 from the same
//! server, and the bytes with the file's.

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};
use spindle::config::Cap;

/// One response: as h3client.py saw it over HTTP/3, or curl over HTTP/2.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Lowercased names, in order, without `date`.
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Fields that differ by protocol or by the moment: left out of the
/// comparison (RFC 9114 §4.2 forbids the connection-specific ones, and
/// HTTP/3 answers carry no Alt-Svc).
const PROTOCOL_OWN: &[&str] = &["date", "connection", "keep-alive", "alt-svc"];

/// `requests` (JSON objects: method, path, headers, body) sent at once on
/// one aioquic connection to the server's QUIC port.
fn h3(port: u16, requests: &[Value]) -> Vec<Answer> {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("python3")
        .arg(test_data("h3client.py"))
        .arg(port.to_string())
        .arg("--out")
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    serde_json::to_writer(child.stdin.take().unwrap(), &requests).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "h3client.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("h3client.py's JSON");
    let results = got["results"].as_array().expect("results");
    assert_eq!(results.len(), requests.len());
    results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert!(r["reset"].is_null(), "request {i} was reset: {r}");
            let fields = r["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f[0].as_str().unwrap(), f[1].as_str().unwrap()))
                .filter(|(n, _)| !PROTOCOL_OWN.contains(n))
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            Answer {
                status: r["status"].as_u64().expect("a status") as u16,
                fields,
                body: std::fs::read(dir.path().join(i.to_string())).unwrap(),
            }
        })
        .collect()
}

/// A GET of `path` with `headers`, as h3client.py takes it.
fn get(path: &str, headers: &[(&str, &str)]) -> Value {
    json!({"path": path, "headers": headers})
}

/// What curl gets over HTTP/2 (TLS, ALPN h2) from the HTTPS port for
/// `method path` with `headers` (and `body`, for a POST).
fn curl_h2(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "30", "--http2", "--cacert"])
        .arg(tls_data("ca.pem"))
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .arg("-D")
        .arg(&head);
    match method {
        "HEAD" => cmd.arg("-I"),
        "POST" => cmd.args(["--data-binary", "x=1"]),
        _ => cmd.args(["-X", method]),
    };
    for (n, v) in headers {
        cmd.arg("-H").arg(format!("{n}: {v}"));
    }
    let out = cmd
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {method} {path}: {out:?}");
    let text = std::fs::read_to_string(&head).unwrap();
    let mut lines = text.lines();
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/2 "), "{status_line}");
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let fields = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .filter(|(n, _)| !PROTOCOL_OWN.contains(&n.as_str()))
        .collect();
    let body = if method == "HEAD" {
        Vec::new()
    } else {
        out.stdout
    };
    Answer {
        status,
        fields,
        body,
    }
}

/// The fields and body with a multipart boundary (new for every response,
/// `response::boundary`) put as `BOUNDARY`.
fn without_boundary(r: &Answer) -> (Vec<(String, String)>, Vec<u8>) {
    let prefix = "multipart/byteranges; boundary=";
    let Some(b) = r.field("content-type").and_then(|c| c.strip_prefix(prefix)) else {
        return (r.fields.clone(), r.body.clone());
    };
    let fields = r
        .fields
        .iter()
        .map(|(n, v)| (n.clone(), v.replace(b, "BOUNDARY")))
        .collect();
    let mut body = Vec::with_capacity(r.body.len());
    let mut rest = &r.body[..];
    while !rest.is_empty() {
        if rest.starts_with(b.as_bytes()) {
            body.extend_from_slice(b"BOUNDARY");
            rest = &rest[b.len()..];
        } else {
            body.push(rest[0]);
            rest = &rest[1..];
        }
    }
    (fields, body)
}

/// The HTTP/3 answer is HTTP/2's: status, every field but the protocol's
/// own, and the body byte for byte (but for a multipart boundary).
#[track_caller]
fn same(what: &str, h3: &Answer, h2: &Answer) {
    assert_eq!(
        h3.status, h2.status,
        "{what}: status, HTTP/3 against HTTP/2"
    );
    let (h3_fields, h3_body) = without_boundary(h3);
    let (h2_fields, h2_body) = without_boundary(h2);
    assert_eq!(
        h3_fields, h2_fields,
        "{what}: fields, HTTP/3 against HTTP/2"
    );
    assert!(
        h3_body == h2_body,
        "{what}: body, {} bytes over HTTP/3, {} over HTTP/2",
        h3.body.len(),
        h2.body.len()
    );
}

/// Runs `test` against a server with `--http3` on every backend that
/// serves HTTP/3.
fn on_every_backend(test: fn(&DocRoot, u16)) {
    if !have_aioquic() {
        return;
    }
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        let (_srv, port) = start_with_https(b, &root.dir, None, &["--http3"]);
        test(&root, port);
    }
}

/// The parts of a multipart/byteranges body: (Content-Range, bytes).
fn parts(content_type: &str, body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let boundary = content_type
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("not multipart: {content_type}"));
    let delim = format!("--{boundary}");
    let find = |from: usize, what: &[u8]| {
        body[from..]
            .windows(what.len())
            .position(|w| w == what)
            .map(|p| p + from)
    };
    let mut out = Vec::new();
    let mut at = find(0, delim.as_bytes()).expect("a first delimiter");
    loop {
        at += delim.len();
        if body[at..].starts_with(b"--") {
            return out;
        }
        let head_end = find(at, b"\r\n\r\n").expect("a part's head");
        let head = std::str::from_utf8(&body[at..head_end]).unwrap();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .expect("a part's Content-Range")
            .to_string();
        let next = find(head_end, format!("\r\n{delim}").as_bytes()).expect("a delimiter");
        out.push((range, body[head_end + 4..next].to_vec()));
        at = next + 2;
    }
}

#[test]
fn ranges_over_http3_as_over_http2() {
    on_every_backend(ranges_on);
}

fn ranges_on(root: &DocRoot, port: u16) {
    let file = root.read("f102400");
    let len = file.len();
    let cases: &[(&str, u16, Option<&[u8]>)] = &[
        ("bytes=0-0", 206, Some(&file[..1])),
        ("bytes=100-199", 206, Some(&file[100..200])),
        ("bytes=-10", 206, Some(&file[len - 10..])),
        ("bytes=200000-", 416, None),
        ("bytes=0-9,100-199,-10", 206, None),
    ];
    let requests: Vec<Value> = cases
        .iter()
        .map(|(r, ..)| get("/f102400", &[("range", r)]))
        .collect();
    let got = h3(port, &requests);
    for ((range, status, slice), h3r) in cases.iter().zip(&got) {
        let h2r = curl_h2(port, "GET", "/f102400", &[("range", range)]);
        same(range, h3r, &h2r);
        assert_eq!(h3r.status, *status, "{range}");
        if let Some(slice) = slice {
            assert!(h3r.body == *slice, "{range}: not the file's bytes");
        }
    }
    assert_eq!(got[0].field("content-range"), Some("bytes 0-0/102400"));
    assert_eq!(got[1].field("content-range"), Some("bytes 100-199/102400"));
    assert_eq!(
        got[2].field("content-range"),
        Some("bytes 102390-102399/102400")
    );
    assert_eq!(got[3].field("content-range"), Some("bytes */102400"));
    let multi = &got[4];
    let ct = multi.field("content-type").expect("a content-type");
    let want = [
        ("bytes 0-9/102400", &file[..10]),
        ("bytes 100-199/102400", &file[100..200]),
        ("bytes 102390-102399/102400", &file[len - 10..]),
    ];
    let parts = parts(ct, &multi.body);
    assert_eq!(parts.len(), want.len(), "{ct}");
    for ((range, bytes), (want_range, want_bytes)) in parts.iter().zip(want) {
        assert_eq!(range, want_range);
        assert!(bytes == want_bytes, "{range}: not the file's bytes");
    }
}

/// Request fields: (name, value).
type Fields<'a> = Vec<(&'a str, &'a str)>;

#[test]
fn conditionals_over_http3_as_over_http2() {
    on_every_backend(conditionals_on);
}

fn conditionals_on(root: &DocRoot, port: u16) {
    let first = h3(port, &[get("/f4097", &[])]).remove(0);
    assert_eq!(first.status, 200);
    let etag = first.field("etag").expect("an etag").to_string();
    let future = "Fri, 01 Jan 2100 00:00:00 GMT";
    let cases: &[(&str, Fields, u16)] = &[
        ("If-None-Match", vec![("if-none-match", &etag)], 304),
        (
            "If-Modified-Since",
            vec![("if-modified-since", future)],
            304,
        ),
        (
            "If-Range",
            vec![("if-range", "\"stale\""), ("range", "bytes=0-9")],
            200,
        ),
    ];
    let requests: Vec<Value> = cases.iter().map(|(_, h, _)| get("/f4097", h)).collect();
    let got = h3(port, &requests);
    for ((what, headers, status), h3r) in cases.iter().zip(&got) {
        let h2r = curl_h2(port, "GET", "/f4097", headers);
        same(what, h3r, &h2r);
        assert_eq!(h3r.status, *status, "{what}");
        if *status == 304 {
            assert!(h3r.body.is_empty(), "{what}: a body on a 304");
            assert_eq!(h3r.field("etag"), Some(etag.as_str()), "{what}");
        } else {
            assert!(h3r.body == root.read("f4097"), "{what}: not the file");
            assert_eq!(h3r.field("content-range"), None, "{what}");
        }
    }
}

#[test]
fn head_and_post_over_http3_as_over_http2() {
    on_every_backend(head_and_post_on);
}

fn head_and_post_on(root: &DocRoot, port: u16) {
    let requests = [
        get("/page.txt", &[]),
        json!({"method": "HEAD", "path": "/page.txt"}),
        json!({"method": "POST", "path": "/page.txt", "body": "x=1",
               "headers": [["content-type", "application/x-www-form-urlencoded"]]}),
    ];
    let got = h3(port, &requests);
    let (get_r, head, post) = (&got[0], &got[1], &got[2]);
    assert_eq!(get_r.status, 200);
    assert!(get_r.body == root.read("page.txt"));
    assert_eq!(head.status, 200);
    assert_eq!(head.fields, get_r.fields, "HEAD's fields are GET's");
    assert!(head.body.is_empty(), "HEAD with a body");
    same("HEAD", head, &curl_h2(port, "HEAD", "/page.txt", &[]));
    let h2_post = curl_h2(port, "POST", "/page.txt", &[]);
    same("POST", post, &h2_post);
    assert_eq!(post.status, 405, "POST to a file");
    assert_eq!(post.field("allow"), Some("GET, HEAD"));
}

#[test]
fn fifty_requests_at_once_on_one_http3_connection() {
    on_every_backend(fifty_at_once_on);
}

fn fifty_at_once_on(root: &DocRoot, port: u16) {
    let names: Vec<String> = (0..50)
        .map(|i| format!("f{}", SIZES[i % SIZES.len()]))
        .collect();
    let requests: Vec<Value> = names.iter().map(|n| get(&format!("/{n}"), &[])).collect();
    let got = h3(port, &requests);
    for (name, r) in names.iter().zip(&got) {
        let want = root.read(name);
        assert_eq!(r.status, 200, "/{name}");
        assert_eq!(
            r.field("content-length"),
            Some(want.len().to_string().as_str())
        );
        assert!(
            r.body == want,
            "/{name}: {} bytes, want {}",
            r.body.len(),
            want.len()
        );
    }
}
