//! Who may fetch what (`[[rules]]`' `allow`, `deny`, `redirect` and
//! `fallback`), on every backend: the decision on the normalised path,
//! on the client behind a PROXY header, bad values refused at start and
//! kept out on reload.

mod common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const ACCESS: &str = r#"
[[rules]]
match = "/private/**"
allow = ["10.0.0.0/8", "::1"]

[[rules]]
match = "/open/**"
allow = ["127.0.0.0/8"]
deny = ["192.0.2.0/24"]

[[rules]]
match = "/closed/**"
deny = ["127.0.0.1"]
"#;

/// A root with `private/a.txt`, `open/a.txt`, `closed/a.txt`, and the
/// config file `toml` beside it.
fn access_root(toml_name: &str, toml: &str) -> (DocRoot, std::path::PathBuf) {
    let root = DocRoot::new(false);
    for d in ["private", "open", "closed", "app", "old"] {
        std::fs::create_dir_all(root.path(d)).unwrap();
        std::fs::write(root.path(&format!("{d}/a.txt")), format!("{d}\n")).unwrap();
    }
    std::fs::write(root.path("private/index.html"), "private index\n").unwrap();
    let path = root
        .dir
        .join(format!("../{toml_name}-{}.toml", std::process::id()));
    std::fs::write(&path, toml).unwrap();
    (root, path)
}

fn status_of(srv: &Server, target: &str) -> u16 {
    request(srv, &format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n")).status
}

fn curl_status(url: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--path-as-is",
        ])
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn allow_and_deny_by_client_address_on_every_backend() {
    let (root, toml) = access_root("access", ACCESS);
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        // The client is 127.0.0.1: outside `private`'s allow list.
        for target in [
            "/private/a.txt",
            "/%70rivate/a.txt",
            "//private/a.txt",
            "/private/./a.txt",
            "/private/",
            "/closed/a.txt",
        ] {
            assert_eq!(status_of(&srv, target), 403, "{b} {target}");
        }
        let r = request(&srv, "HEAD /private/a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!((r.status, r.closes()), (403, false), "{b}");
        assert_eq!(status_of(&srv, "/open/a.txt"), 200, "{b}");
        assert_eq!(status_of(&srv, "/page.txt"), 200, "{b}");
        // A refusal comes before the file is looked for.
        assert_eq!(status_of(&srv, "/private/missing"), 403, "{b}");
        assert_eq!(curl_status(&srv.url("/private/a.txt")), "403", "{b}");
        assert_eq!(curl_status(&srv.url("/open/a.txt")), "200", "{b}");
        // Keep-alive: the same connection goes on after a refusal.
        let mut c = srv.connect();
        c.write_all(b"GET /private/a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /open/a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut rd = std::io::BufReader::new(c);
        assert_eq!(read_response(&mut rd, false).unwrap().status, 403, "{b}");
        let r = read_response(&mut rd, false).unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"open\n"[..]), "{b}");
    }
}

#[test]
fn allow_and_deny_see_the_client_behind_a_proxy() {
    let (root, toml) = access_root("access-proxy", ACCESS);
    for b in backends() {
        let srv = Server::start(
            &b,
            &root.dir,
            &[
                "--config",
                toml.to_str().unwrap(),
                "--proxy-listen",
                "127.0.0.1:0",
                "--proxy-from",
                "127.0.0.1",
            ],
        );
        let proxy = proxy_addr(&srv.stderr());
        for (client, path, want) in [
            ("10.1.2.3", "/private/a.txt", 200),
            ("192.0.2.7", "/private/a.txt", 403),
            ("192.0.2.7", "/open/a.txt", 403),
            ("127.0.0.1", "/open/a.txt", 200),
            ("127.0.0.1", "/closed/a.txt", 403),
            ("10.1.2.3", "/closed/a.txt", 200),
        ] {
            let mut s = std::net::TcpStream::connect(proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(
                s,
                "PROXY TCP4 {client} 127.0.0.1 5000 80\r\nGET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut rd = std::io::BufReader::new(s);
            let r = read_response(&mut rd, false).unwrap();
            assert_eq!(r.status, want, "{b} {client} {path}");
        }
    }
}

#[test]
fn a_bad_address_block_stops_the_start() {
    startup_error(&["--rule", "/x/**; allow=10.0.0.0/33"], "prefix length");
    startup_error(&["--rule", "/x/**; deny=10.0.0.1/8"], "bits set");
    startup_error(
        &["--rule", "/x/**; allow=example.org"],
        "not an address block",
    );
    let root = DocRoot::new(false);
    let toml = root
        .dir
        .join(format!("../access-bad-{}.toml", std::process::id()));
    std::fs::write(
        &toml,
        "[[rules]]\nmatch = \"/x/**\"\ndeny = [\"300.0.0.0/8\"]\n",
    )
    .unwrap();
    startup_error(&["--config", toml.to_str().unwrap()], "deny");
}

/// Writes `text` to `toml` and sends SIGHUP.
fn rewrite_and_hup(srv: &Server, toml: &std::path::Path, text: &str) {
    std::fs::write(toml, text).unwrap();
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) };
}

/// Waits (at most 3 s: workers take a reload on their next tick) until
/// `done` holds.
fn until(srv: &Server, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(3), "{}", srv.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reload_with_a_bad_address_block_keeps_the_running_rules() {
    let (root, toml) = access_root("access-reload", ACCESS);
    let srv = Server::start(
        "io-uring",
        &root.dir,
        &["--config", toml.to_str().unwrap(), "--workers", "1"],
    );
    assert_eq!(status_of(&srv, "/private/a.txt"), 403);
    let bad = "[[rules]]\nmatch = \"/private/**\"\nallow = [\"127.0.0.0/33\"]\n";
    rewrite_and_hup(&srv, &toml, bad);
    until(&srv, || {
        srv.stderr().contains("keeping the running configuration")
    });
    assert!(srv.stderr().contains("prefix length"), "{}", srv.stderr());
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(status_of(&srv, "/private/a.txt"), 403);
    assert_eq!(status_of(&srv, "/open/a.txt"), 200);

    // A good file applies, also to a connection opened while no rule
    // named addresses.
    rewrite_and_hup(&srv, &toml, "");
    until(&srv, || status_of(&srv, "/private/a.txt") == 200);
    let mut c = srv.connect();
    let mut rd = std::io::BufReader::new(c.try_clone().unwrap());
    let mut ask = || {
        c.write_all(b"GET /open/a.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        read_response(&mut rd, false).unwrap().status
    };
    assert_eq!(ask(), 200);
    let allow = "[[rules]]\nmatch = \"/open/**\"\nallow = [\"127.0.0.1\"]\n";
    rewrite_and_hup(&srv, &toml, allow);
    until(&srv, || {
        srv.stderr().matches("configuration reloaded").count() >= 2
    });
    std::thread::sleep(Duration::from_millis(400));
    // The old connection's client is known now: allowed, not refused.
    assert_eq!(ask(), 200);
    rewrite_and_hup(&srv, &toml, &allow.replace("allow", "deny"));
    until(&srv, || ask() == 403);
}

const REDIRECTS: &str = r#"
[[rules]]
match = "/old/**"
redirect = "301 https://example.org{path}?{query}"

[[rules]]
match = "/old/temp/*"
redirect = "307 /new/"

[[rules]]
match = "/evil.example/**"
redirect = "302 {path}"

[[rules]]
match = "/evil.example"
redirect = "302 {path}"
"#;

#[test]
fn redirects_on_every_backend() {
    let (root, toml) = access_root("redirect", REDIRECTS);
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        for (target, status, reason, location) in [
            (
                "/old/a.txt",
                301,
                "Moved Permanently",
                "https://example.org/old/a.txt",
            ),
            // Not looked for: a missing file is redirected the same.
            (
                "/old/x%20y?q=1&r",
                301,
                "Moved Permanently",
                "https://example.org/old/x%20y?q=1&r",
            ),
            ("/old//temp/a", 307, "Temporary Redirect", "/new/"),
            // `//evil.example` cannot become the location's host.
            ("//evil.example/x", 302, "Found", "/evil.example/x"),
            ("//evil.example", 302, "Found", "/evil.example"),
            // Encoded CR/LF stays encoded: no header is split.
            (
                "/old/a%0D%0ASet-Cookie:%20x=1",
                301,
                "Moved Permanently",
                "https://example.org/old/a%0D%0ASet-Cookie:%20x=1",
            ),
        ] {
            let mut c = srv.connect();
            write!(
                c,
                "GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut raw = Vec::new();
            c.read_to_end(&mut raw).unwrap();
            let text = String::from_utf8_lossy(&raw);
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status} {reason}\r\n")),
                "{b} {target}: {text}"
            );
            let head = text.split("\r\n\r\n").next().unwrap();
            let locations: Vec<&str> = head
                .lines()
                .filter_map(|l| l.strip_prefix("Location: "))
                .collect();
            assert_eq!(locations, [location], "{b} {target}: {head}");
            assert!(
                !head
                    .lines()
                    .any(|l| l.to_ascii_lowercase().starts_with("set-cookie")),
                "{b}: {head}"
            );
        }
        // A raw CR or LF in the target never reaches a response header:
        // the request is refused.
        for raw in [
            "GET /old/a\rSet-Cookie: x=1 HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /old/a\nSet-Cookie: x=1 HTTP/1.1\r\nHost: t\r\n\r\n",
        ] {
            let mut c = srv.connect();
            c.write_all(raw.as_bytes()).unwrap();
            let mut got = Vec::new();
            let _ = c.read_to_end(&mut got);
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 400 "), "{b} {raw:?}: {text}");
            assert!(!text.contains("Location:"), "{b}: {text}");
        }
        // curl sees the redirect (and HEAD gets it without a body).
        let out = Command::new("curl")
            .args([
                "-sI",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{redirect_url}",
            ])
            .arg(srv.url("/old/a.txt?v=2"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "301 https://example.org/old/a.txt?v=2",
            "{b}"
        );
        assert_eq!(status_of(&srv, "/page.txt"), 200, "{b}");
    }
}

#[test]
fn a_bad_redirect_stops_the_start() {
    for (rule, needle) in [
        ("/x/**; redirect=200 /y", "STATUS one of 301"),
        ("/x/**; redirect=303 /y", "STATUS one of 301"),
        ("/x/**; redirect=301 example.org/y", "TARGET https://host"),
        (
            "/x/**; redirect=301 //evil.example{path}",
            "TARGET https://host",
        ),
        ("/x/**; redirect=301 https://{path}", "TARGET https://host"),
        ("/x/**; redirect=301", "STATUS TARGET"),
    ] {
        startup_error(&["--rule", rule], needle);
    }
}

const FALLBACK: &str = r#"
[[rules]]
match = "/app/**"
fallback = "/app/index.html"

[[rules]]
match = "/nofile/**"
fallback = "/no/such.html"
"#;

#[test]
fn fallback_serves_a_page_for_missing_paths_on_every_backend() {
    let (root, toml) = access_root("fallback", FALLBACK);
    std::fs::write(root.path("app/index.html"), "<p>app</p>\n").unwrap();
    std::fs::write(root.path("app/.env"), "secret\n").unwrap();
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        for target in ["/app/users/7", "/app/", "/%61pp/deep/route?x=1"] {
            let r = get(&srv, target);
            assert_eq!(
                (r.status, &r.body[..]),
                (200, &b"<p>app</p>\n"[..]),
                "{b} {target}"
            );
            assert_eq!(
                r.header("content-type"),
                Some("text/html; charset=utf-8"),
                "{b}"
            );
        }
        // An existing file is itself; a hidden one stays hidden.
        assert_eq!(get(&srv, "/app/a.txt").body, b"app\n", "{b}");
        assert_eq!(status_of(&srv, "/app/.env"), 404, "{b}");
        // HEAD and a range apply to the fallback's bytes.
        let r = request(&srv, "HEAD /app/route HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(
            (r.status, r.header("content-length")),
            (200, Some("11")),
            "{b}"
        );
        let r = request(
            &srv,
            "GET /app/route HTTP/1.1\r\nHost: t\r\nRange: bytes=0-2\r\n\r\n",
        );
        assert_eq!((r.status, &r.body[..]), (206, &b"<p>"[..]), "{b}");
        // Outside the glob, and a missing fallback: 404.
        assert_eq!(status_of(&srv, "/missing"), 404, "{b}");
        assert_eq!(status_of(&srv, "/nofile/x"), 404, "{b}");
        assert_eq!(curl_status(&srv.url("/app/some/route")), "200", "{b}");
    }
}

#[test]
fn a_bad_fallback_stops_the_start() {
    for f in ["index.html", "/app/", "/../x", "/a%20b", "/"] {
        startup_error(&["--rule", &format!("/x/**; fallback={f}")], "fallback");
    }
}

const REFERERS: &str = r#"
[[rules]]
match = "/private/**"
referers = ["none", "*.example.org", "site.test/gallery/"]

[[rules]]
match = "/open/**"
referers = ["blocked"]
"#;

#[test]
fn referers_on_every_backend() {
    let (root, toml) = access_root("referers", REFERERS);
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        for (path, referer, want) in [
            ("/private/a.txt", None, 200),
            ("/private/a.txt", Some("https://www.example.org/page"), 200),
            ("/private/a.txt", Some("http://A.EXAMPLE.ORG:8080/"), 200),
            (
                "/private/a.txt",
                Some("https://site.test/gallery/x.html"),
                200,
            ),
            ("/private/a.txt", Some("https://site.test/other/"), 403),
            ("/private/a.txt", Some("https://example.org/"), 403),
            (
                "/private/a.txt",
                Some("https://www.example.org@evil.test/"),
                403,
            ),
            ("/private/a.txt", Some("https://evil.test/"), 403),
            ("/private/a.txt", Some("XXXXXXXXXXXXXXXXXXXX"), 403),
            ("/%70rivate/a.txt", Some("https://evil.test/"), 403),
            ("/open/a.txt", Some("XXXXXXXXXXXXXXXXXXXX"), 200),
            ("/open/a.txt", None, 403),
            ("/open/a.txt", Some("https://www.example.org/"), 403),
            ("/page.txt", Some("https://evil.test/"), 200),
        ] {
            let field = referer.map_or(String::new(), |r| format!("Referer: {r}\r\n"));
            let r = request(
                &srv,
                &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{field}\r\n"),
            );
            assert_eq!(r.status, want, "{b} {path} {referer:?}");
        }
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-e"])
            .arg("https://evil.test/")
            .arg(srv.url("/private/a.txt"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "403", "{b}");
    }
}

#[test]
fn a_bad_referer_list_stops_the_start() {
    for (rule, needle) in [
        ("/x/**; referers=server_names", "server_names"),
        ("/x/**; referers=~google", "regular expressions"),
        ("/x/**; referers=http://example.org/", "host name"),
        ("/x/**; referers=", "host name"),
    ] {
        startup_error(&["--rule", rule], needle);
    }
    let root = DocRoot::new(false);
    let toml = root
        .dir
        .join(format!("../referers-empty-{}.toml", std::process::id()));
    std::fs::write(&toml, "[[rules]]\nmatch = \"/x/**\"\nreferers = []\n").unwrap();
    startup_error(&["--config", toml.to_str().unwrap()], "empty list");
}

/// The README's recipe: the signature of `path` until `expires`, made by
/// `openssl dgst -hmac` with the secret file's text. `None` without
/// openssl.
fn openssl_sig(secret_file: &std::path::Path, path: &str, expires: &str) -> Option<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(
            "printf '%s\\n%s' \"$1\" \"$2\" | openssl dgst -sha256 -hmac \"$(cat \"$3\")\" -binary | openssl base64 -A | tr '+/' '-_' | tr -d '='",
        )
        .args(["sh", path, expires])
        .arg(secret_file)
        .output()
        .ok()?;
    let sig = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && sig.len() == 43).then_some(sig)
}

#[test]
fn secure_links_on_every_backend() {
    let toml_text = |secret: &std::path::Path| {
        format!(
            "[[rules]]\nmatch = \"/private/**\"\nsecure-link = {:?}\n",
            secret.to_str().unwrap()
        )
    };
    let (root, toml) = access_root("secure-link", "");
    let secret = root
        .dir
        .join(format!("../secure-link-{}.key", std::process::id()));
    std::fs::write(&secret, "correct horse battery\n").unwrap();
    std::fs::write(&toml, toml_text(&secret)).unwrap();
    let Some(probe) = openssl_sig(&secret, "/x", "1") else {
        test_skip::skip_or_fail("openssl is not installed: it makes the README's signed links");
        return;
    };
    assert_eq!(probe.len(), 43);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let future = (now + 3600).to_string();
    let past = (now - 10).to_string();
    let sig = |path: &str, expires: &str| openssl_sig(&secret, path, expires).unwrap();
    let good = sig("/private/a.txt", &future);
    let dir = sig("/private/index.html", &future);
    let old = sig("/private/a.txt", &past);
    let far = sig("/private/a.txt", "9999999999999999999");
    let long = sig("/private/a.txt", "99999999999999999999");
    let nan = sig("/private/a.txt", "soon");
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        for (target, want) in [
            (format!("/private/a.txt?expires={future}&sig={good}"), 200),
            // The path as rules see it: decoded and normalised.
            (
                format!("//%70rivate/./a.txt?sig={good}&expires={future}"),
                200,
            ),
            (format!("/private/?expires={future}&sig={dir}"), 200),
            (
                format!("/private/a.txt?expires={future}&sig={good}&x=1"),
                200,
            ),
            ("/private/a.txt".to_string(), 403),
            (format!("/private/a.txt?expires={future}"), 403),
            (format!("/private/a.txt?sig={good}"), 403),
            (
                format!("/private/index.html?expires={future}&sig={good}"),
                403,
            ),
            (format!("/private/a.txt?expires={now}&sig={good}"), 403),
            (
                format!("/private/a.txt?expires={future}&sig={}", &good[..42]),
                403,
            ),
            (format!("/private/a.txt?expires={future}&sig={good}A"), 403),
            (format!("/private/a.txt?expires={future}&sig={good}="), 403),
            (
                format!("/private/a.txt?expires={future}&sig=%{}", &good[1..]),
                403,
            ),
            (format!("/private/a.txt?expires={past}&sig={old}"), 410),
            (
                format!("/private/a.txt?expires=9999999999999999999&sig={far}"),
                200,
            ),
            (
                format!("/private/a.txt?expires=99999999999999999999&sig={long}"),
                403,
            ),
            (format!("/private/a.txt?expires=soon&sig={nan}"), 403),
            ("/page.txt".to_string(), 200),
        ] {
            let r = request(&srv, &format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n"));
            assert_eq!(r.status, want, "{b} {target}");
        }
        // A 410's status line, and curl's view of a link.
        let r = request(
            &srv,
            &format!("HEAD /private/a.txt?expires={past}&sig={old} HTTP/1.1\r\nHost: t\r\n\r\n"),
        );
        assert_eq!((r.status, r.closes()), (410, false), "{b}");
        assert_eq!(
            curl_status(&srv.url(&format!("/private/a.txt?expires={future}&sig={good}"))),
            "200",
            "{b}"
        );
        assert_eq!(
            curl_status(&srv.url(&format!("/private/a.txt?expires={past}&sig={old}"))),
            "410",
            "{b}"
        );
    }
    // SIGHUP reads the secret again: links made with the old one stop.
    let srv = Server::start("io-uring", &root.dir, &["--config", toml.to_str().unwrap()]);
    let link = format!("/private/a.txt?expires={future}&sig={good}");
    assert_eq!(status_of(&srv, &link), 200);
    std::fs::write(&secret, "a new secret\n").unwrap();
    rewrite_and_hup(&srv, &toml, &toml_text(&secret));
    until(&srv, || status_of(&srv, &link) == 403);
    let new = sig("/private/a.txt", &future);
    assert_eq!(
        status_of(&srv, &format!("/private/a.txt?expires={future}&sig={new}")),
        200
    );
}

#[test]
fn a_bad_secure_link_stops_the_start() {
    startup_error(
        &["--rule", "/x/**; secure-link=/no/such/secret"],
        "secure-link /no/such/secret",
    );
    let root = DocRoot::new(false);
    let empty = root
        .dir
        .join(format!("../secure-link-empty-{}.key", std::process::id()));
    std::fs::write(&empty, "\n").unwrap();
    startup_error(
        &["--rule", &format!("/x/**; secure-link={}", empty.display())],
        "the secret is empty",
    );
}

fn tls_file(name: &str) -> String {
    tls_data(name).display().to_string()
}

#[test]
fn redirect_https_on_every_backend() {
    for b in backends() {
        eprintln!("backend {b}");
        let root = DocRoot::new(false);
        std::fs::create_dir_all(root.path(".well-known/acme-challenge")).unwrap();
        std::fs::write(root.path(".well-known/acme-challenge/tok"), "tok\n").unwrap();
        // The seed backends serve no HTTPS: TLS ends in front of them
        // (443). io-uring and posix-aio redirect to their own listener.
        let tls_port = free_port();
        let tls_addr = format!("127.0.0.1:{tls_port}");
        let (cert, key) = (tls_file("p256.pem"), tls_file("p256.key"));
        let serves_tls = has(&b, Cap::Https);
        let mut args = vec!["--redirect-https"];
        if serves_tls {
            args.extend([
                "--tls-listen",
                &tls_addr,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
            ]);
        }
        let srv = Server::start(&b, &root.dir, &args);
        let want_port = if serves_tls {
            format!(":{tls_port}")
        } else {
            String::new()
        };
        // A plain request: 308 to the same host (without its port), the
        // same target, query included.
        let r = request(
            &srv,
            "GET /f1?a=1&b=%20 HTTP/1.1\r\nHost: example.org:8080\r\n\r\n",
        );
        assert_eq!(r.status, 308, "{b}: {}", r.status_line);
        assert_eq!(
            r.header("location"),
            Some(format!("https://example.org{want_port}/f1?a=1&b=%20").as_str()),
            "{b}"
        );
        let r = request(&srv, "HEAD /sub/ HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
        assert_eq!(r.status, 308, "{b}: {}", r.status_line);
        assert_eq!(
            r.header("location"),
            Some(format!("https://[::1]{want_port}/sub/").as_str())
        );
        // ACME's HTTP-01 challenge stays on plain HTTP, however spelled.
        for t in [
            "/.well-known/acme-challenge/tok",
            "/.well-known/%61cme-challenge/tok",
            "//.well-known/acme-challenge/tok",
        ] {
            let r = request(
                &srv,
                &format!("GET {t} HTTP/1.1\r\nHost: example.org\r\n\r\n"),
            );
            assert_eq!(r.status, 200, "{b} {t}: {}", r.status_line);
        }
        // No redirect to a host that is not a host: 400 answers first, or
        // the file is served.
        let r = request(&srv, "GET /f1 HTTP/1.1\r\nHost: a/b\r\n\r\n");
        assert_ne!(r.status, 308, "{b}: {}", r.status_line);
        assert!(r.header("location").is_none(), "{b}");
        // Over HTTPS (and HTTP/2 over TLS on io-uring): served.
        if serves_tls {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
                .arg(tls_file("ca.pem"))
                .arg("--resolve")
                .arg(format!("localhost:{tls_port}:127.0.0.1"))
                .arg(format!("https://localhost:{tls_port}/f1"))
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "200",
                "{b} over HTTPS"
            );
        }
        if has(&b, Cap::Http2) {
            // h2c is plain: redirected too.
            let out = Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code} %{redirect_url}",
                ])
                .arg("--http2-prior-knowledge")
                .arg(srv.url("/f1"))
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("308 https://127.0.0.1{want_port}/f1")
            );
        }
    }
}

/// `spindle_refusals_total{reason}` on `--metrics`, polled until it shows
/// `want` for every reason (a worker counts a response as it finishes).
fn refusals_reach(metrics: std::net::SocketAddr, want: &[(&str, u64)]) -> String {
    let t = Instant::now();
    loop {
        let mut s = std::net::TcpStream::connect(metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let ok = want.iter().all(|(reason, n)| {
            text.lines()
                .any(|l| l == format!("spindle_refusals_total{{reason=\"{reason}\"}} {n}"))
        });
        if ok || t.elapsed() > Duration::from_secs(10) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A root (as [`access_root`]) whose rules refuse `/closed/**` to
/// 127.0.0.1 and sign `/private/**` with a secret, plus `more` rules; and
/// the signature of an expired link to `/private/a.txt`. `None`: openssl
/// is missing (said).
fn refusing_root(name: &str, more: &str) -> Option<(DocRoot, std::path::PathBuf, String)> {
    let (root, toml) = access_root(name, "");
    let secret = root
        .dir
        .join(format!("../{name}-{}.key", std::process::id()));
    std::fs::write(&secret, "correct horse battery\n").unwrap();
    std::fs::write(
        &toml,
        format!(
            "[[rules]]\nmatch = \"/closed/**\"\ndeny = [\"127.0.0.1\"]\n\n\
             [[rules]]\nmatch = \"/private/**\"\nsecure-link = {:?}\n\n{more}",
            secret.to_str().unwrap()
        ),
    )
    .unwrap();
    let Some(expired) = openssl_sig(&secret, "/private/a.txt", "1") else {
        test_skip::skip_or_fail("openssl is not installed: it signs the expired link");
        return None;
    };
    Some((root, toml, expired))
}

#[test]
fn refusals_are_counted_by_reason_on_every_backend() {
    let Some((root, toml, expired)) = refusing_root(
        "refusals",
        "[[rules]]\nmatch = \"/open/**\"\nreferers = [\"none\"]\n",
    ) else {
        return;
    };
    for b in backends() {
        eprintln!("backend {b}");
        let srv = Server::start(
            &b,
            &root.dir,
            &[
                "--config",
                toml.to_str().unwrap(),
                "--metrics",
                "127.0.0.1:0",
            ],
        );
        let log = srv.stderr();
        let metrics: std::net::SocketAddr = log
            .lines()
            .find_map(|l| l.split("]: metrics on http://").nth(1))
            .expect("metrics line")
            .trim_end_matches("/metrics")
            .parse()
            .unwrap();
        for (target, referer, want) in [
            ("/closed/a.txt", "", 403),
            ("/closed/a.txt", "", 403),
            ("/open/a.txt", "Referer: https://evil.test/\r\n", 403),
            ("/private/a.txt?expires=99999999999&sig=AAAA", "", 403),
            (
                &format!("/private/a.txt?expires=1&sig={expired}")[..],
                "",
                410,
            ),
            ("/page.txt", "", 200),
        ] {
            let r = request(
                &srv,
                &format!("GET {target} HTTP/1.1\r\nHost: t\r\n{referer}\r\n"),
            );
            assert_eq!(r.status, want, "{b} {target}");
        }
        let want = [
            ("address", 2),
            ("referer", 1),
            ("signature", 1),
            ("expired", 1),
        ];
        let text = refusals_reach(metrics, &want);
        for (reason, n) in want {
            let line = format!("spindle_refusals_total{{reason=\"{reason}\"}} {n}");
            assert!(
                text.lines().any(|l| l == line),
                "{b}: no `{line}` in\n{text}"
            );
        }
    }
}

/// REDbot, the HTTP linter, finds nothing BAD in a refusal (403), an
/// expired signed link (410), a rule's redirect (301) and
/// `--redirect-https`'s (308).
#[test]
fn redbot_finds_nothing_bad_in_refusals_and_redirects() {
    let Some((root, toml, expired)) = refusing_root(
        "redbot-access",
        "[[rules]]\nmatch = \"/old/**\"\nredirect = \"301 /open/{path}\"\n",
    ) else {
        return;
    };
    let srv = Server::start("io-uring", &root.dir, &["--config", toml.to_str().unwrap()]);
    let tls_port = free_port();
    let tls_addr = format!("127.0.0.1:{tls_port}");
    let (cert, key) = (tls_file("p256.pem"), tls_file("p256.key"));
    let redirecting = Server::start(
        "io-uring",
        &root.dir,
        &[
            "--redirect-https",
            "--tls-listen",
            &tls_addr,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ],
    );
    for (url, want) in [
        (srv.url("/closed/a.txt"), 403),
        (
            srv.url(&format!("/private/a.txt?expires=1&sig={expired}")),
            410,
        ),
        (srv.url("/old/a.txt"), 301),
        (redirecting.url("/f1"), 308),
    ] {
        let path = url.split_once("//").unwrap().1;
        let path = &path[path.find('/').unwrap()..];
        let status = if url.starts_with(&srv.url("")) {
            request(&srv, &format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n")).status
        } else {
            request(
                &redirecting,
                &format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"),
            )
            .status
        };
        assert_eq!(status, want, "{url}");
        if let Some(bad) = redbot_bad_notes(&url) {
            assert!(bad.is_empty(), "{url} ({want}): {bad:#?}");
        }
    }
}
