//! `[[rules]]` (Cache-Control, header fields and Content-Type by path
//! glob), `--charset` and `--error-page`, on every backend.

mod common;

use common::*;

const RULES: &str = r#"
[[rules]]
match = "/**"
cache-control = "no-cache"

[[rules]]
match = "/assets/**"
cache-control = "public, max-age=31536000, immutable"
headers = ["Access-Control-Allow-Origin: *", "X-Content-Type-Options: nosniff"]

[[rules]]
match = "/assets/*.zzz"
content-type = "application/x-test"
"#;

#[test]
fn rules_set_headers_by_path_on_every_backend() {
    let root = DocRoot::new(false);
    std::fs::create_dir_all(root.path("assets/deep")).unwrap();
    std::fs::write(root.path("assets/app.zzz"), random_bytes(30_000, 3)).unwrap();
    std::fs::write(root.path("assets/deep/x.zzz"), b"wasm").unwrap();
    let toml = root.dir.join("../rules.toml");
    std::fs::write(&toml, RULES).unwrap();
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        let r = get(&srv, "/assets/app.zzz");
        assert_eq!(r.status, 200, "{b}");
        assert_eq!(
            r.header("cache-control"),
            Some("public, max-age=31536000, immutable"),
            "{b}"
        );
        assert_eq!(r.header("content-type"), Some("application/x-test"), "{b}");
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "{b}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{b}");
        // The same headers on a 304 and a 206.
        let etag = r.header("etag").unwrap().to_string();
        for (extra, status) in [
            (format!("If-None-Match: {etag}\r\n"), 304),
            ("Range: bytes=0-9\r\n".to_string(), 206),
        ] {
            let r = request(
                &srv,
                &format!("GET /assets/app.zzz HTTP/1.1\r\nHost: t\r\n{extra}\r\n"),
            );
            assert_eq!(r.status, status, "{b}");
            assert_eq!(
                r.header("access-control-allow-origin"),
                Some("*"),
                "{b} {status}"
            );
            assert_eq!(
                r.header("cache-control"),
                Some("public, max-age=31536000, immutable"),
                "{b} {status}"
            );
        }
        // `*` stays within a segment; the general rule still applies.
        let r = get(&srv, "/assets/deep/x.zzz");
        assert_eq!(
            r.header("content-type"),
            Some("application/octet-stream"),
            "{b}"
        );
        let r = get(&srv, "/page.txt");
        assert_eq!(r.header("cache-control"), Some("no-cache"), "{b}");
        assert_eq!(r.header("access-control-allow-origin"), None, "{b}");
        // A directory's index is matched by its own path.
        assert_eq!(
            get(&srv, "/").header("cache-control"),
            Some("no-cache"),
            "{b}"
        );
        // Errors get none of it.
        let r = get(&srv, "/assets/missing.zzz");
        assert_eq!((r.status, r.header("cache-control")), (404, None), "{b}");
    }
    let _ = std::fs::remove_file(&toml);
}

#[test]
fn charset_on_text_types() {
    let root = DocRoot::new(false);
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--charset", "ISO-8859-1"]);
        assert_eq!(
            get(&srv, "/page.txt").header("content-type"),
            Some("text/plain; charset=iso-8859-1"),
            "{b}"
        );
        assert_eq!(
            get(&srv, "/f1").header("content-type"),
            Some("application/octet-stream")
        );
        let srv = Server::start(&b, &root.dir, &["--charset", ""]);
        assert_eq!(
            get(&srv, "/index.html").header("content-type"),
            Some("text/html"),
            "{b}"
        );
    }
}

#[test]
fn error_pages_on_every_backend() {
    let root = DocRoot::new(false);
    std::fs::create_dir_all(root.path("errors")).unwrap();
    let page = "<!doctype html><title>Not here</title><p>Try the <a href=/>index</a>.\n";
    std::fs::write(root.path("errors/404.html"), page).unwrap();
    for b in backends() {
        let srv = Server::start(
            &b,
            &root.dir,
            &[
                "--error-page",
                "404=/errors/404.html",
                "--error-page",
                "500=/errors/missing-500.html",
            ],
        );
        for path in ["/no-such-file", "/.hidden", "/noindex/", "/fifo"] {
            let r = get(&srv, path);
            assert_eq!(r.status, 404, "{b} {path}");
            assert_eq!(r.body, page.as_bytes(), "{b} {path}");
            assert_eq!(
                r.header("content-type"),
                Some("text/html; charset=utf-8"),
                "{b}"
            );
            assert_eq!(r.header("etag"), None, "{b}");
            assert!(!r.closes(), "{b}: the connection stays open");
        }
        let r = request(&srv, "HEAD /nope HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 404, "{b}");
        assert_eq!(
            r.header("content-length"),
            Some(page.len().to_string().as_str())
        );
        // Keep-alive: an error page, then a file, on one connection.
        let mut s = srv.connect();
        std::io::Write::write_all(
            &mut s,
            b"GET /x HTTP/1.1\r\nHost: t\r\n\r\nGET /f1 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
        let mut rd = std::io::BufReader::new(s);
        assert_eq!(read_response(&mut rd, false).unwrap().body, page.as_bytes());
        assert_eq!(read_response(&mut rd, false).unwrap().body, root.read("f1"));
        // The page itself is still a file.
        assert_eq!(get(&srv, "/errors/404.html").status, 200, "{b}");
    }
}

#[test]
fn bad_rules_and_pages_give_one_line_and_exit_1() {
    let dir = std::env::temp_dir().join(format!("spindle-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (toml, needle) in [
        (
            "[[rules]]\nmatch = \"/a/[z-\"\ncache-control = \"x\"\n",
            "bad match",
        ),
        ("[[rules]]\nmatch = \"assets/*\"\n", "must start with /"),
        (
            "[[rules]]\nmatch = \"/a\"\nheaders = [\"Content-Length: 1\"]\n",
            "set by spindle itself",
        ),
        (
            "[[rules]]\nmatch = \"/a\"\ncache-control = \"a\\u0001b\"\n",
            "control character",
        ),
        (
            "[[rules]]\nmatch = \"/a\"\nexpires = \"1d\"\n",
            "unknown field",
        ),
        (
            "error-pages = { 418 = \"/teapot.html\" }\n",
            "must be 403, 404, 500 or 503",
        ),
    ] {
        let f = dir.join("bad.toml");
        std::fs::write(&f, toml).unwrap();
        startup_error(
            &["--listen", "127.0.0.1:0", "--config", f.to_str().unwrap()],
            needle,
        );
    }
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--error-page",
            "404=../etc/passwd",
        ],
        "a file's path from the root",
    );
    startup_error(
        &["--listen", "127.0.0.1:0", "--charset", "utf 8"],
        "charset",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rules_on_the_command_line() {
    let root = DocRoot::new(false);
    let srv = Server::start(
        "io-uring",
        &root.dir,
        &[
            "--rule",
            "/*.txt; cache-control=max-age=60; header=Content-Security-Policy: default-src 'self'; img-src *; header=X-A: 1",
            "--rule",
            "/**/*.css; content-type=text/x-test",
        ],
    );
    let r = get(&srv, "/page.txt");
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    assert_eq!(
        r.header("content-security-policy"),
        Some("default-src 'self'; img-src *")
    );
    assert_eq!(r.header("x-a"), Some("1"));
    assert_eq!(
        get(&srv, "/style.css").header("content-type"),
        Some("text/x-test")
    );
    assert_eq!(get(&srv, "/f1").header("cache-control"), None);
    startup_error(
        &["--listen", "127.0.0.1:0", "--rule", "/a; expires=1d"],
        "write it as",
    );
    startup_error(
        &["--listen", "127.0.0.1:0", "--rule", "/a/[z-"],
        "bad match",
    );
}
