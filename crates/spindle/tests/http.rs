//! HTTP/1.1 behaviour over raw TCP, curl and an HTTP client library,
//! against every backend.

mod common;

use std::io::{BufReader, Read, Write};
use std::time::Duration;

use common::*;

fn each_backend(f: impl Fn(&str, &DocRoot, &Server)) {
    for b in backends() {
        let root = DocRoot::new(false);
        let srv = Server::start(&b, &root.dir, &[]);
        f(&b, &root, &srv);
    }
}

#[test]
fn every_size_is_served_byte_exact() {
    each_backend(|b, root, srv| {
        for &size in SIZES {
            let name = format!("f{size}");
            let r = get(srv, &format!("/{name}"));
            assert_eq!(r.status, 200, "{b} {name}");
            assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
            assert!(r.body == root.read(&name), "{b}: body of {name} differs");
            let h = request(srv, &format!("HEAD /{name} HTTP/1.1\r\nHost: t\r\n\r\n"));
            assert_eq!(h.status, 200);
            assert_eq!(h.header("content-length"), Some(size.to_string().as_str()));
            assert!(h.body.is_empty());
        }
    });
}

#[test]
fn response_headers() {
    each_backend(|b, root, srv| {
        let r = get(srv, "/page.txt");
        assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{b}");
        assert_eq!(r.header("server"), Some("spindle"));
        let date = r.header("date").expect("Date");
        assert!(httpdate_ok(date), "Date {date:?}");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        let lm = r.header("last-modified").expect("Last-Modified");
        assert!(httpdate_ok(lm));
        let etag = r.header("etag").expect("ETag");
        assert!(etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"));
        assert_eq!(
            get(srv, "/style.css").header("content-type"),
            Some("text/css; charset=utf-8")
        );
        assert_eq!(
            get(srv, "/f1").header("content-type"),
            Some("application/octet-stream")
        );
        // The ETag changes when the file does.
        std::thread::sleep(Duration::from_millis(10));
        std::fs::write(root.path("page.txt"), "changed text\n").unwrap();
        let r2 = get(srv, "/page.txt");
        assert_ne!(r2.header("etag"), Some(etag));
        assert_eq!(r2.body, b"changed text\n");
    });
}

fn httpdate_ok(s: &str) -> bool {
    s.ends_with(" GMT") && s.len() == 29 && s.as_bytes()[3] == b','
}

#[test]
fn keep_alive_and_pipelining() {
    each_backend(|b, root, srv| {
        // Three pipelined requests in one write, answered in order.
        let mut s = srv.connect();
        s.write_all(
            b"GET /f4097 HTTP/1.1\r\nHost: t\r\n\r\nHEAD /f1 HTTP/1.1\r\nHost: t\r\n\r\nGET /f102400 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let a = read_response(&mut r, false).unwrap();
        let h = read_response(&mut r, true).unwrap();
        let c = read_response(&mut r, false).unwrap();
        assert_eq!((a.status, h.status, c.status), (200, 200, 200), "{b}");
        assert_eq!(a.body, root.read("f4097"));
        assert_eq!(h.header("content-length"), Some("1"));
        assert_eq!(c.body, root.read("f102400"));
        // Still open: a fourth request on the same connection.
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let d = read_response(&mut r, false).unwrap();
        assert_eq!(d.body, root.read("f1"));
        assert!(d.closes());
        assert!(
            closed_by_server(&mut r, Duration::from_secs(5)),
            "{b}: Connection: close not honoured"
        );

        // HTTP/1.0: closes by default, stays open with keep-alive.
        let mut s = srv.connect();
        s.write_all(b"GET /f1 HTTP/1.0\r\n\r\n").unwrap();
        let mut r = BufReader::new(s);
        assert_eq!(read_response(&mut r, false).unwrap().status, 200);
        assert!(
            closed_by_server(&mut r, Duration::from_secs(5)),
            "{b}: 1.0 without keep-alive stayed open"
        );
        let mut s = srv.connect();
        s.write_all(b"GET /f1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let x = read_response(&mut r, false).unwrap();
        assert_eq!(x.header("connection"), Some("keep-alive"));
        s.write_all(b"GET /f4096 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        assert_eq!(
            read_response(&mut r, false).unwrap().body,
            root.read("f4096")
        );

        // A request split across many small writes (a slow sender).
        let mut s = srv.connect();
        for chunk in b"GET /f4095 HTTP/1.1\r\nHost: t\r\n\r\n".chunks(3) {
            s.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = read_response(&mut BufReader::new(s), false).unwrap();
        assert_eq!(r.body, root.read("f4095"));
    });
}

#[test]
fn request_bodies_are_discarded() {
    each_backend(|b, root, srv| {
        // A Content-Length body is read and dropped; the next request works.
        let mut s = srv.connect();
        s.write_all(b"POST /f1 HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello=worldGET /f4096 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let p = read_response(&mut r, false).unwrap();
        assert_eq!(p.status, 405, "{b}");
        assert_eq!(p.header("allow"), Some("GET, HEAD"));
        let g = read_response(&mut r, false).unwrap();
        assert_eq!(g.body, root.read("f4096"));
        // A GET with a body that arrives late, in pieces.
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n\r\nab")
            .unwrap();
        let g = read_response(&mut r, false).unwrap();
        assert_eq!(g.body, root.read("f1"));
        s.write_all(b"cdefGET /f4097 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(
            read_response(&mut r, false).unwrap().body,
            root.read("f4097")
        );
        // A chunked body is not parsed: answer, then close.
        let mut s = srv.connect();
        s.write_all(b"PUT /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /f1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut r = BufReader::new(s);
        let p = read_response(&mut r, false).unwrap();
        assert_eq!(p.status, 405);
        assert!(p.closes());
        assert!(closed_by_server(&mut r, Duration::from_secs(5)));
    });
}

/// Sends `raw` and expects `status` followed by a closed connection.
fn expect_reject(srv: &Server, raw: &[u8], status: u16) {
    let mut s = srv.connect();
    s.write_all(raw).unwrap();
    let mut r = BufReader::new(s);
    let resp = read_response(&mut r, false).unwrap_or_else(|e| {
        panic!(
            "no response to {:?}: {e}",
            String::from_utf8_lossy(&raw[..raw.len().min(60)])
        )
    });
    assert_eq!(
        resp.status,
        status,
        "for {:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(60)])
    );
    assert!(resp.closes(), "status {status} must close");
    assert!(
        closed_by_server(&mut r, Duration::from_secs(5)),
        "connection left open after {status}"
    );
}

#[test]
fn malformed_and_oversized_requests() {
    each_backend(|_b, _root, srv| {
        expect_reject(srv, b"GET / HTTP/1.1\r\n\r\n", 400); // no Host
        expect_reject(srv, b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
        expect_reject(srv, b"GET/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
        expect_reject(srv, b"GET / HTTP/1.1\r\nHost a\r\n\r\n", 400);
        expect_reject(
            srv,
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            400,
        ); // TLS hello
        expect_reject(srv, b"GET / HTTP/9.9\r\nHost: a\r\n\r\n", 505);
        expect_reject(srv, b"GET /a%00b HTTP/1.1\r\nHost: a\r\n\r\n", 400);
        expect_reject(srv, b"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400);
        expect_reject(srv, b"GET /a% HTTP/1.1\r\nHost: a\r\n\r\n", 400);
        expect_reject(srv, b"GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", 400);
        expect_reject(
            srv,
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        );
        expect_reject(
            srv,
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            400,
        );
        let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(10_000));
        expect_reject(srv, long.as_bytes(), 414);
        let big = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
            "b".repeat(9000)
        );
        expect_reject(srv, big.as_bytes(), 431);
        let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
        expect_reject(
            srv,
            format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").as_bytes(),
            431,
        );
        // An endless header that never finishes also gets 431.
        let mut s = srv.connect();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nX: ").unwrap();
        let filler = vec![b'x'; 1024];
        let mut got = None;
        for _ in 0..64 {
            if s.write_all(&filler).is_err() {
                break;
            }
        }
        let mut r = BufReader::new(s);
        if let Ok(resp) = read_response(&mut r, false) {
            got = Some(resp.status);
        }
        assert_eq!(got, Some(431));
    });
}

#[test]
fn methods() {
    each_backend(|_b, _root, srv| {
        for m in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "BREW"] {
            let r = request(srv, &format!("{m} /f1 HTTP/1.1\r\nHost: t\r\n\r\n"));
            assert_eq!(r.status, 405, "{m}");
            assert_eq!(r.header("allow"), Some("GET, HEAD"));
        }
        let r = request(
            srv,
            "GET http://example.test/f1 HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        assert_eq!(r.status, 200, "absolute-form target");
    });
}

#[test]
fn conditional_requests() {
    each_backend(|b, root, srv| {
        let r = get(srv, "/f4096");
        let etag = r.header("etag").unwrap().to_string();
        let lm = r.header("last-modified").unwrap().to_string();
        let cond = |h: &str| {
            request(
                srv,
                &format!("GET /f4096 HTTP/1.1\r\nHost: t\r\n{h}\r\n\r\n"),
            )
        };
        let nm = cond(&format!("If-None-Match: \"x\", {etag}"));
        assert_eq!(nm.status, 304, "{b}");
        assert_eq!(nm.header("etag"), Some(etag.as_str()));
        assert!(nm.body.is_empty());
        assert_eq!(cond("If-None-Match: *").status, 304);
        assert_eq!(cond("If-None-Match: \"other\"").status, 200);
        assert_eq!(cond(&format!("If-Modified-Since: {lm}")).status, 304);
        assert_eq!(
            cond("If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT").status,
            200
        );
        assert_eq!(cond("If-Modified-Since: not a date").status, 200);
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            cond(&format!("If-None-Match: \"x\"\r\nIf-Modified-Since: {lm}")).status,
            200
        );
        assert_eq!(cond(&format!("If-Match: {etag}")).status, 200);
        assert_eq!(cond("If-Match: \"nope\"").status, 412);
        assert_eq!(cond(&format!("If-Match: W/{etag}")).status, 412);
        assert_eq!(
            cond("If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT").status,
            412
        );
        assert_eq!(cond(&format!("If-Unmodified-Since: {lm}")).status, 200);
        let full = cond(&format!("If-Match: {etag}"));
        assert_eq!(full.body, root.read("f4096"));
    });
}

#[test]
fn byte_ranges() {
    each_backend(|b, root, srv| {
        let data = root.read("f102400");
        let size = data.len();
        let range = |spec: &str, extra: &str| {
            request(
                srv,
                &format!("GET /f102400 HTTP/1.1\r\nHost: t\r\nRange: {spec}\r\n{extra}\r\n"),
            )
        };
        let r = range("bytes=0-0", "");
        assert_eq!(r.status, 206, "{b}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes 0-0/{size}").as_str())
        );
        assert_eq!(r.body, &data[..1]);
        let r = range("bytes=1000-50999", "");
        assert_eq!(r.body, &data[1000..51000]);
        assert_eq!(r.header("content-length"), Some("50000"));
        let r = range("bytes=100000-", "");
        assert_eq!(r.body, &data[100000..]);
        let r = range("bytes=-100", "");
        assert_eq!(r.body, &data[size - 100..]);
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {}-{}/{size}", size - 100, size - 1).as_str())
        );
        let r = range("bytes=-999999", "");
        assert_eq!((r.status, r.body.len()), (206, size));
        let r = range("bytes=50-999999", "");
        assert_eq!(r.body, &data[50..]);
        let r = range(&format!("bytes={size}-"), "");
        assert_eq!(r.status, 416);
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes */{size}").as_str())
        );
        let r = request(
            srv,
            "GET /f0 HTTP/1.1\r\nHost: t\r\nRange: bytes=0-\r\n\r\n",
        );
        assert_eq!(r.status, 416);
        assert_eq!(r.header("content-range"), Some("bytes */0"));
        // Multiple ranges: multipart (tests/multirange.rs); overlapping
        // ones merge into one.
        let r = range("bytes=0-1,5-6", "");
        assert_eq!(r.status, 206);
        assert!(r
            .header("content-type")
            .unwrap()
            .starts_with("multipart/byteranges; boundary="));
        let r = range("bytes=0-5,5-6", "");
        assert_eq!((r.status, &r.body[..]), (206, &data[..7]));
        // Syntax we do not understand is ignored.
        assert_eq!(range("bytes=5-1", "").status, 200);
        assert_eq!(range("lines=1-2", "").status, 200);
        // If-Range.
        let etag = get(srv, "/f102400").header("etag").unwrap().to_string();
        let lm = get(srv, "/f102400")
            .header("last-modified")
            .unwrap()
            .to_string();
        assert_eq!(
            range("bytes=0-9", &format!("If-Range: {etag}\r\n")).status,
            206
        );
        assert_eq!(range("bytes=0-9", "If-Range: \"stale\"\r\n").status, 200);
        assert_eq!(
            range("bytes=0-9", &format!("If-Range: {lm}\r\n")).status,
            206
        );
        assert_eq!(
            range("bytes=0-9", "If-Range: Sun, 06 Nov 1994 08:49:37 GMT\r\n").status,
            200
        );
        // HEAD ignores Range.
        let h = request(
            srv,
            "HEAD /f102400 HTTP/1.1\r\nHost: t\r\nRange: bytes=0-9\r\n\r\n",
        );
        assert_eq!(h.status, 200);
        // A range of the large file, across chunk boundaries.
        let big = root.read("f1048583");
        let r = request(
            srv,
            "GET /f1048583 HTTP/1.1\r\nHost: t\r\nRange: bytes=524000-1048582\r\n\r\n",
        );
        assert_eq!(r.body, &big[524000..]);
    });
}

#[test]
fn directories() {
    each_backend(|b, root, srv| {
        let r = get(srv, "/");
        assert_eq!(
            (r.status, r.body.clone()),
            (200, root.read("index.html")),
            "{b}"
        );
        assert_eq!(get(srv, "/sub/").body, root.read("sub/index.html"));
        let r = get(srv, "/sub");
        assert_eq!(r.status, 301);
        assert_eq!(r.header("location"), Some("/sub/"));
        let r = get(srv, "/sub?a=1");
        assert_eq!(r.header("location"), Some("/sub/?a=1"));
        assert_eq!(get(srv, "/noindex/").status, 404);
        assert_eq!(get(srv, "/noindex/file.txt").status, 200);
        assert_eq!(get(srv, "/name%20with%20spaces.txt").body, b"spaces\n");
    });
}

#[test]
fn traversal_and_hidden_paths() {
    each_backend(|b, root, srv| {
        for (path, want) in [
            ("/../etc/passwd", 400),
            ("/sub/../../etc/passwd", 400),
            ("/sub/../f1", 400),
            ("/%2e%2e/etc/passwd", 400),
            ("/%2E%2E/%2e%2e/etc/passwd", 400),
            ("/sub%2f..%2f..%2fetc%2fpasswd", 400),
            ("/sub%2Findex.html", 400),
            ("/..%2fetc/passwd", 400),
            ("/escape", 404),
            ("/updir/etc/passwd", 404),
            ("/.hidden", 404),
            ("/.git/config", 404),
            ("/sub/.%2e/f1", 400),
            ("/fifo", 404),
            ("/missing", 404),
            ("/f1/", 404),
        ] {
            let r = get(srv, path);
            assert_eq!(r.status, want, "{b}: {path}");
            assert!(
                !String::from_utf8_lossy(&r.body).contains("root:"),
                "{path} leaked /etc/passwd"
            );
        }
        // RFC 8615's directory is served without --dotfiles; dot-names
        // beneath it are not.
        let wk = root.dir.join(".well-known/acme-challenge");
        std::fs::create_dir_all(&wk).unwrap();
        std::fs::write(wk.join("tok"), "proof\n").unwrap();
        std::fs::write(wk.join(".secret"), "no\n").unwrap();
        let r = get(srv, "/.well-known/acme-challenge/tok");
        assert_eq!((r.status, &r.body[..]), (200, &b"proof\n"[..]), "{b}");
        assert_eq!(
            get(srv, "/.well-known/acme-challenge/.secret").status,
            404,
            "{b}"
        );
        // A symlink that stays inside the root is followed.
        assert_eq!(get(srv, "/inside").body, root.read("f1"));
        // Double slashes are merged, as nginx does.
        assert_eq!(
            get(srv, "//sub//index.html").body,
            root.read("sub/index.html")
        );
    });
}

#[test]
fn dotfiles_can_be_enabled() {
    for b in backends() {
        let root = DocRoot::new(false);
        let srv = Server::start(&b, &root.dir, &["--dotfiles"]);
        assert_eq!(get(&srv, "/.hidden").body, b"secret\n", "{b}");
        assert_eq!(get(&srv, "/%2e%2e/x").status, 400);
    }
}

#[test]
fn curl_and_a_client_library_agree() {
    let have_curl = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok();
    assert!(
        have_curl,
        "curl is required by this test (apt-get install curl)"
    );
    each_backend(|b, root, srv| {
        for name in ["f1048583", "f0", "f4097", "index.html"] {
            let out = std::process::Command::new("curl")
                .args(["-sS", "--fail", "-o", "-", &srv.url(&format!("/{name}"))])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{b}: curl {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stdout == root.read(name),
                "{b}: curl body of {name} differs"
            );
            let mut body = Vec::new();
            ureq::get(&srv.url(&format!("/{name}")))
                .call()
                .expect("ureq GET")
                .into_body()
                .into_reader()
                .read_to_end(&mut body)
                .unwrap();
            assert!(body == root.read(name), "{b}: ureq body of {name} differs");
        }
        let out = std::process::Command::new("curl")
            .args(["-sS", "-r", "100-199", &srv.url("/f102400")])
            .output()
            .unwrap();
        assert_eq!(out.stdout, &root.read("f102400")[100..200]);
        let out = std::process::Command::new("curl")
            .args(["-sS", "-I", &srv.url("/f4096")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        assert!(text.contains("Content-Length: 4096"));
        // curl keeps the connection alive across URLs on one command line.
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "-v",
                "-o",
                "/dev/null",
                "-o",
                "/dev/null",
                &srv.url("/f1"),
                &srv.url("/f4096"),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Re-using existing connection") || err.contains("Reusing existing"),
            "{err}"
        );
    });
}

#[test]
fn replaced_files_are_noticed() {
    for b in backends() {
        let root = DocRoot::new(false);
        // With the open-file cache off, a file renamed over the old one is
        // served at once; with it on, too, because a replaced file's link
        // count drops to 0. One worker, so every request meets one cache.
        for extra in [
            &["--workers", "1", "--open-file-cache", "0"][..],
            &["--workers", "1"][..],
        ] {
            let srv = Server::start(&b, &root.dir, extra);
            std::fs::write(root.path("swap.txt"), "old version\n").unwrap();
            assert_eq!(get(&srv, "/swap.txt").body, b"old version\n", "{b}");
            std::fs::write(root.path("swap.tmp"), "new version, longer\n").unwrap();
            std::fs::rename(root.path("swap.tmp"), root.path("swap.txt")).unwrap();
            let r = get(&srv, "/swap.txt");
            assert_eq!(r.body, b"new version, longer\n", "{b} {extra:?}");
            std::fs::remove_file(root.path("swap.txt")).unwrap();
            assert_eq!(get(&srv, "/swap.txt").status, 404, "{b} {extra:?}");
        }
    }
}

#[test]
fn a_path_naming_another_file_is_noticed_once_the_cache_entry_expires() {
    // inotify watches the file, not its path: a renamed parent directory
    // goes unreported, and the open-file cache goes on serving the file it
    // has open until --open-file-cache-valid runs out. Then the path is
    // opened again: the same file keeps its entry (revalidated), and
    // another file replaces it. A small file (contents in memory) and a
    // large one (served from its descriptor) go through each step together.
    const VALID: Duration = Duration::from_millis(1500);
    const PAST_VALID: Duration = Duration::from_millis(1700);
    let sizes = [1000u64, 100 * 1024];
    for b in backends() {
        let root = DocRoot::new(false);
        let valid = format!("{}", VALID.as_secs_f64());
        let srv = Server::start(
            &b,
            &root.dir,
            &["--workers", "1", "--open-file-cache-valid", &valid],
        );
        let url = |size: u64| format!("/dir-{size}/f");
        for size in sizes {
            std::fs::create_dir(root.path(&format!("dir-{size}"))).unwrap();
            let v1 = random_bytes(size, 1);
            std::fs::write(root.path(&format!("dir-{size}/f")), &v1).unwrap();
            assert_eq!(get(&srv, &url(size)).body, v1, "{b} {size}");
            assert_eq!(get(&srv, &url(size)).body, v1, "{b} {size}: cached");
        }
        std::thread::sleep(PAST_VALID);
        for size in sizes {
            let v1 = random_bytes(size, 1);
            assert_eq!(get(&srv, &url(size)).body, v1, "{b} {size}: revalidated");
            let dir = format!("dir-{size}");
            std::fs::rename(root.path(&dir), root.path(&format!("{dir}-old"))).unwrap();
            std::fs::create_dir(root.path(&dir)).unwrap();
            std::fs::write(root.path(&format!("{dir}/f")), random_bytes(size, 2)).unwrap();
            assert_eq!(
                get(&srv, &url(size)).body,
                v1,
                "{b} {size}: still the file the cache holds open (valid for {VALID:?} after the revalidation)"
            );
        }
        std::thread::sleep(PAST_VALID);
        for size in sizes {
            let v2 = random_bytes(size, 2);
            assert_eq!(get(&srv, &url(size)).body, v2, "{b} {size}: the new file");
            assert_eq!(
                get(&srv, &url(size)).body,
                v2,
                "{b} {size}: the new file, cached"
            );
        }
    }
}

#[test]
fn files_changed_in_place_are_noticed_at_once() {
    // The open-file cache trusts its metadata and small-file contents only
    // as long as inotify reports no change (see filecache.rs). Every change
    // below is complete before the next request is written, on the same
    // keep-alive connection to one worker, so each response must show it:
    // for a small file (served from memory) and a large one (from its
    // descriptor).
    for b in backends() {
        let root = DocRoot::new(false);
        let srv = Server::start(&b, &root.dir, &["--workers", "1"]);
        let mut s = srv.connect();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut get = |path: &str| {
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                .unwrap();
            read_response(&mut r, false).unwrap()
        };
        for size in [1000u64, 100 * 1024] {
            let name = format!("live-{size}.bin");
            let url = format!("/{name}");
            let path = root.path(&name);
            let v1 = random_bytes(size, 1);
            std::fs::write(&path, &v1).unwrap();
            // Twice: the second is answered from the cache.
            assert_eq!(get(&url).body, v1, "{b} {size}");
            let first = get(&url);
            assert_eq!(first.body, v1, "{b} {size}");

            // Rewritten in place, same length.
            let v2 = random_bytes(size, 2);
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(&v2).unwrap();
            drop(f);
            assert_eq!(get(&url).body, v2, "{b} {size}: rewrite in place");

            // Appended to.
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(b"0123456789").unwrap();
            drop(f);
            let mut v3 = v2.clone();
            v3.extend_from_slice(b"0123456789");
            assert_eq!(get(&url).body, v3, "{b} {size}: append");

            // Truncated.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(size / 2)
                .unwrap();
            assert_eq!(
                get(&url).body,
                &v2[..size as usize / 2],
                "{b} {size}: truncate"
            );

            // Touched: a new Last-Modified and a new ETag.
            let before = get(&url);
            let when = std::time::UNIX_EPOCH + Duration::from_secs(978_307_200);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(when)
                .unwrap();
            let after = get(&url);
            assert_eq!(
                after.header("last-modified"),
                Some("Mon, 01 Jan 2001 00:00:00 GMT"),
                "{b} {size}: touch"
            );
            assert_ne!(after.header("etag"), before.header("etag"), "{b} {size}");

            // Replaced by a rename, then deleted.
            let v4 = random_bytes(size, 4);
            std::fs::write(root.path("live.tmp"), &v4).unwrap();
            std::fs::rename(root.path("live.tmp"), &path).unwrap();
            assert_eq!(get(&url).body, v4, "{b} {size}: rename over");
            std::fs::remove_file(&path).unwrap();
            assert_eq!(get(&url).status, 404, "{b} {size}: unlink");
        }
    }
}

#[test]
fn deep_pipelining_is_answered_in_order() {
    each_backend(|b, root, srv| {
        // 2,000 requests (about 80 KB, ten times the head limit) written
        // before a single response is read: the server must apply
        // backpressure rather than buffer without bound, and answer every
        // one, in order.
        let names = ["f1", "f4095", "f0", "index.html"];
        let mut s = srv.connect();
        let mut reqs = Vec::new();
        for i in 0..2000 {
            reqs.extend_from_slice(
                format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", names[i % 4]).as_bytes(),
            );
        }
        let writer = {
            let mut w = s.try_clone().unwrap();
            std::thread::spawn(move || w.write_all(&reqs).unwrap())
        };
        let mut r = BufReader::new(s.try_clone().unwrap());
        for i in 0..2000 {
            let resp =
                read_response(&mut r, false).unwrap_or_else(|e| panic!("{b}: response {i}: {e}"));
            assert_eq!(resp.status, 200, "{b}: response {i}");
            assert!(
                resp.body == root.read(names[i % 4]),
                "{b}: response {i} out of order"
            );
        }
        writer.join().unwrap();
        s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut r, false).unwrap().body, root.read("f1"));
    });
}

/// A client that sends bytes after its last request (`Connection: close`)
/// still gets the whole response: the server must not close over unread
/// input, which sends a reset and throws away what the socket still holds
/// of the response. The io-uring backend no longer keeps a receive armed
/// during a last response, so it checks for such bytes at the close.
#[test]
fn bytes_after_the_last_request_do_not_cut_the_response_short() {
    for b in backends() {
        let root = DocRoot::new(true);
        let srv = Server::start(&b, &root.dir, &[]);
        let mut s = srv.connect();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(b"stray bytes after the last request").unwrap();
        let mut r = BufReader::new(s);
        let resp =
            read_response(&mut r, false).unwrap_or_else(|e| panic!("{b}: response cut short: {e}"));
        assert_eq!(resp.status, 200, "{b}");
        assert!(resp.body == root.read("big"), "{b}: body differs");
        assert!(resp.closes(), "{b}");
    }
}
