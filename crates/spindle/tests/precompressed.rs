//! `--precompressed`: `file.br`, `file.zst` and `file.gz` beside `file`,
//! chosen by `Accept-Encoding`, on every backend.

mod common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::*;

/// A document root with `app.js` (300 KiB, so its sidecars take the
/// sendfile/read paths, not the small-file cache), its sidecars, and the
/// odd cases. Sidecar bytes are distinct markers except `.gz`, which is
/// real gzip (so curl can decode it).
fn site() -> DocRoot {
    let root = DocRoot::new(false);
    let text: String = random_bytes(300 * 1024, 7)
        .iter()
        .map(|b| char::from(b'a' + b % 26))
        .collect();
    std::fs::write(root.path("app.js"), &text).unwrap();
    let st = Command::new("gzip")
        .args(["-k", "-n", "-1"])
        .arg(root.path("app.js"))
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(root.path("app.js.br"), random_bytes(70_000, 8)).unwrap();
    std::fs::write(root.path("app.js.zst"), random_bytes(90_000, 9)).unwrap();
    // A stale sidecar: older than its source.
    std::fs::write(root.path("old.css"), "body { color: red }\n").unwrap();
    let gz = std::fs::File::create(root.path("old.css.gz")).unwrap();
    gz.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(gz);
    // A "sidecar" that is a directory.
    std::fs::write(root.path("dir.svg"), "<svg/>").unwrap();
    std::fs::create_dir(root.path("dir.svg.br")).unwrap();
    // A sidecar without its source.
    std::fs::write(root.path("orphan.js.br"), "x").unwrap();
    root
}

fn with_ae(srv: &Server, method: &str, path: &str, extra: &str) -> Resp {
    request(
        srv,
        &format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n"),
    )
}

#[test]
fn sidecars_by_accept_encoding_on_every_backend() {
    let root = site();
    let js = root.read("app.js");
    let br = root.read("app.js.br");
    let zst = root.read("app.js.zst");
    let gz = root.read("app.js.gz");
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--precompressed", "br,zstd,gzip"]);
        let cases: [(&str, Option<&str>, &[u8]); 9] = [
            ("gzip, deflate, br, zstd", Some("br"), &br),
            ("gzip, zstd", Some("zstd"), &zst),
            ("br;q=0.5, gzip", Some("gzip"), &gz),
            ("br;q=0, zstd;q=0, gzip", Some("gzip"), &gz),
            ("*", Some("br"), &br),
            ("*;q=0", None, &js),
            ("identity", None, &js),
            ("br;q=2, gzip;;;q=x, =, ;;, zstd;q=0.0001", None, &js),
            ("", None, &js),
        ];
        for (ae, coding, body) in cases {
            let extra = if ae.is_empty() {
                String::new()
            } else {
                format!("Accept-Encoding: {ae}\r\n")
            };
            let r = with_ae(&srv, "GET", "/app.js", &extra);
            assert_eq!(r.status, 200, "{b} {ae:?}");
            assert_eq!(r.header("content-encoding"), coding, "{b} {ae:?}");
            assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{b} {ae:?}");
            assert_eq!(
                r.header("content-type"),
                Some("text/javascript; charset=utf-8"),
                "{b} {ae:?}"
            );
            assert!(r.body == body, "{b} {ae:?}: wrong bytes");
        }
        // HEAD, ranges and conditionals apply to the encoded bytes.
        let h = with_ae(&srv, "HEAD", "/app.js", "Accept-Encoding: br\r\n");
        assert_eq!(h.header("content-length"), Some("70000"), "{b}");
        let r = with_ae(
            &srv,
            "GET",
            "/app.js",
            "Accept-Encoding: br\r\nRange: bytes=100-199\r\n",
        );
        assert_eq!(r.status, 206, "{b}");
        assert_eq!(
            r.header("content-range"),
            Some("bytes 100-199/70000"),
            "{b}"
        );
        assert_eq!(r.body, br[100..200], "{b}");
        // Several ranges: parts of the encoded bytes, each naming the
        // coding; the multipart body itself carries none.
        let r = with_ae(
            &srv,
            "GET",
            "/app.js",
            "Accept-Encoding: br\r\nRange: bytes=0-9,100-199\r\n",
        );
        assert_eq!(r.status, 206, "{b}");
        assert_eq!(r.header("content-encoding"), None, "{b}");
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(text.matches("Content-Encoding: br\r\n").count(), 2, "{b}");
        assert!(text.contains("Content-Range: bytes 100-199/70000"), "{b}");
        let tail = &r.body[r.body.windows(4).rposition(|w| w == b"\r\n\r\n").unwrap() + 4..];
        assert!(tail.starts_with(&br[100..200]), "{b}");
        let tag_br = h.header("etag").unwrap().to_string();
        let tag_id = with_ae(&srv, "HEAD", "/app.js", "")
            .header("etag")
            .unwrap()
            .to_string();
        assert_ne!(tag_br, tag_id, "{b}: one tag for two representations");
        let inm = format!("Accept-Encoding: br\r\nIf-None-Match: {tag_br}\r\n");
        let r = with_ae(&srv, "GET", "/app.js", &inm);
        assert_eq!(r.status, 304, "{b}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{b}");
        // The same tag does not match the identity representation.
        let r = with_ae(
            &srv,
            "GET",
            "/app.js",
            &format!("If-None-Match: {tag_br}\r\n"),
        );
        assert_eq!((r.status, r.body.len()), (200, js.len()), "{b}");
        // A stale sidecar, a directory, a sidecar without its source.
        let r = with_ae(&srv, "GET", "/old.css", "Accept-Encoding: gzip\r\n");
        assert_eq!(
            r.header("content-encoding"),
            None,
            "{b}: stale sidecar served"
        );
        assert_eq!(r.body, root.read("old.css"), "{b}");
        let r = with_ae(&srv, "GET", "/dir.svg", "Accept-Encoding: br\r\n");
        assert_eq!((r.status, r.header("content-encoding")), (200, None), "{b}");
        let r = with_ae(&srv, "GET", "/orphan.js", "Accept-Encoding: br\r\n");
        assert_eq!(r.status, 404, "{b}");
        // A sidecar asked for by name is just a file.
        let r = with_ae(&srv, "GET", "/app.js.gz", "Accept-Encoding: gzip\r\n");
        assert_eq!(r.header("content-encoding"), None, "{b}");
        assert_eq!(r.header("content-type"), Some("application/gzip"), "{b}");
        // Several requests on one connection, sidecar and not.
        let mut s = srv.connect();
        let reqs = "GET /app.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\n\r\n\
                    GET /app.js HTTP/1.1\r\nHost: t\r\n\r\n\
                    GET /old.css HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n";
        s.write_all(reqs.as_bytes()).unwrap();
        let mut rd = std::io::BufReader::new(s);
        for want in [&br, &js, &root.read("old.css")] {
            let r = read_response(&mut rd, false).unwrap();
            assert!(&r.body == want, "{b}: pipelined");
        }
    }
}

#[test]
fn off_by_default_and_curl_decodes_what_it_gets() {
    let root = site();
    for b in backends() {
        // Compression on the fly off: only the sidecars are at stake.
        let srv = Server::start(&b, &root.dir, &["--compress", "off"]);
        let r = with_ae(&srv, "GET", "/app.js", "Accept-Encoding: br, gzip\r\n");
        assert_eq!(
            (r.header("content-encoding"), r.header("vary")),
            (None, None)
        );
        assert_eq!(r.body, root.read("app.js"), "{b}");
    }
    let srv = Server::start("io-uring", &root.dir, &["--precompressed", "gzip"]);
    let out = Command::new("curl")
        .args(["-sS", "--compressed", "-D", "-", "-o", "/dev/null"])
        .arg(srv.url("/app.js"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let out = Command::new("curl")
        .args(["-sS", "--compressed"])
        .arg(srv.url("/app.js"))
        .output()
        .unwrap();
    assert!(out.stdout == root.read("app.js"), "curl's decoding differs");
}

#[test]
fn sidecars_appearing_and_going_are_seen_at_once() {
    let root = site();
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--precompressed", "br"]);
        std::fs::write(root.path("late.js"), "late").unwrap();
        let ask = || with_ae(&srv, "GET", "/late.js", "Accept-Encoding: br\r\n");
        assert_eq!(ask().header("content-encoding"), None, "{b}");
        std::fs::write(root.path("late.js.br"), "LATE").unwrap();
        let r = ask();
        assert_eq!(
            (r.header("content-encoding"), &r.body[..]),
            (Some("br"), &b"LATE"[..]),
            "{b}"
        );
        std::fs::remove_file(root.path("late.js.br")).unwrap();
        let r = ask();
        assert_eq!(
            (r.header("content-encoding"), &r.body[..]),
            (None, &b"late"[..]),
            "{b}"
        );
        std::fs::remove_file(root.path("late.js")).unwrap();
    }
}

#[test]
fn bad_precompressed_lists_give_one_line_and_exit_1() {
    startup_error(
        &["--listen", "127.0.0.1:0", "--precompressed", "br,lzma"],
        "unknown coding",
    );
    startup_error(
        &["--listen", "127.0.0.1:0", "--precompressed", "gzip,gz"],
        "named twice",
    );
    let dir = std::env::temp_dir().join(format!("spindle-pc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("bad.toml");
    std::fs::write(&toml, "precompressed = [\"deflate\"]\n").unwrap();
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            toml.to_str().unwrap(),
        ],
        "unknown coding",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn redbot_finds_nothing_bad_on_a_precompressed_asset() {
    let root = site();
    let srv = Server::start("io-uring", &root.dir, &["--precompressed", "br,gzip"]);
    for path in ["/app.js", "/old.css"] {
        if let Some(bad) = redbot_bad_notes(&srv.url(path)) {
            assert!(bad.is_empty(), "{path}: {bad:#?}");
        }
    }
}
