//! Basic authentication (`[[rules]]`' `auth = "htpasswd:PATH"` and
//! `realm`) on every backend: files written by Debian's `htpasswd`
//! (apache2-utils) in each format spindle takes, checked with curl and raw
//! requests, over HTTP/1.1 and HTTP/2; bad credentials answered with 401
//! on a connection that lives on; weak or broken files refused at start
//! and kept out on reload; the user in the access log; the warning for a
//! plain listener other machines reach; and REDbot on a 401.

mod common;

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const REALM: &str = "Staff only";
/// Users, the `htpasswd` flag that writes each one's hash, and passwords.
const USERS: [(&str, &str, &str); 4] = [
    ("alice", "-B", "alice's pw"),
    ("bob", "-m", "bob:pw"),
    ("carol", "-2", "carol pw"),
    ("dave", "-5", "dävé"),
];

/// Runs `htpasswd -b FLAG FILE USER PW` (`-c` to create the file).
/// `false`: htpasswd is missing (said, or a failure under CI).
fn htpasswd(file: &Path, flag: &str, user: &str, pw: &str, create: bool) -> bool {
    let mut cmd = Command::new("htpasswd");
    cmd.arg("-b");
    if create {
        cmd.arg("-c");
    }
    match cmd.arg(flag).arg(file).arg(user).arg(pw).output() {
        Ok(o) => {
            assert!(o.status.success(), "htpasswd {flag}: {o:?}");
            true
        }
        Err(e) => {
            test_skip::skip_or_fail(format!(
                "htpasswd not run ({e}): apt-get install apache2-utils"
            ));
            false
        }
    }
}

/// A root with `private/a.txt`, `private/index.html` and `open.txt`; an
/// htpasswd file with [`USERS`]; a config file whose rule asks for them
/// over `/private/**`.
struct Site {
    root: DocRoot,
    users: PathBuf,
    toml: PathBuf,
}

impl Site {
    fn new(name: &str) -> Option<Site> {
        let root = DocRoot::new(false);
        std::fs::create_dir_all(root.path("private")).unwrap();
        std::fs::write(root.path("private/a.txt"), "private\n").unwrap();
        std::fs::write(root.path("private/index.html"), "private index\n").unwrap();
        std::fs::write(root.path("open.txt"), "open\n").unwrap();
        let pid = std::process::id();
        let users = root.dir.join(format!("../{name}-{pid}.htpasswd"));
        for (i, (user, flag, pw)) in USERS.iter().enumerate() {
            if !htpasswd(&users, flag, user, pw, i == 0) {
                return None;
            }
        }
        let toml = root.dir.join(format!("../{name}-{pid}.toml"));
        std::fs::write(&toml, rule_text(&users)).unwrap();
        Some(Site { root, users, toml })
    }

    fn start(&self, backend: &str, extra: &[&str]) -> Server {
        let mut args = vec!["--config", self.toml.to_str().unwrap()];
        args.extend_from_slice(extra);
        Server::start(backend, &self.root.dir, &args)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.users);
        let _ = std::fs::remove_file(&self.toml);
    }
}

fn rule_text(users: &Path) -> String {
    format!(
        "[[rules]]\nmatch = \"/private/**\"\nauth = \"htpasswd:{}\"\nrealm = \"{REALM}\"\n",
        users.display()
    )
}

/// curl's status and body (its final newline cut) for `url` with `args`
/// (e.g. `-u user:pw`).
fn curl(url: &str, args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "--path-as-is", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_string(), body.trim_end().to_string())
}

fn basic(user_pw: &[u8]) -> String {
    use std::fmt::Write;
    // Standard base64 (RFC 4648 §4), padded.
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in user_pw.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = out.write_char(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn every_htpasswd_format_authenticates_on_every_backend() {
    let Some(site) = Site::new("auth-formats") else {
        return;
    };
    let challenge = format!("Basic realm=\"{REALM}\", charset=\"UTF-8\"");
    for b in backends() {
        let srv = site.start(&b, &[]);
        // No credentials: asked for them, on every spelling of the path,
        // and whatever would answer it (an index, a range, a HEAD).
        for target in [
            "/private/a.txt",
            "/%70rivate/a.txt",
            "//private/a.txt",
            "/private/./a.txt",
            "/private/",
        ] {
            let r = get(&srv, target);
            assert_eq!(r.status, 401, "{b} {target}");
            assert_eq!(
                r.header("www-authenticate"),
                Some(challenge.as_str()),
                "{b}"
            );
        }
        // `/private/**` does not cover `/private` itself, which redirects
        // to the directory, which asks (as nginx's `location /private/`).
        let r = get(&srv, "/private");
        assert_eq!(
            (r.status, r.header("location")),
            (301, Some("/private/")),
            "{b}"
        );
        let r = request(
            &srv,
            "HEAD /private/a.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\n\r\n",
        );
        assert_eq!(r.status, 401, "{b}");
        // Each format's user gets the file; a wrong password does not.
        for (user, flag, pw) in USERS {
            let cred = format!("{user}:{pw}");
            let (code, body) = curl(&srv.url("/private/a.txt"), &["-u", &cred]);
            assert_eq!(
                (code.as_str(), body.as_str()),
                ("200", "private"),
                "{b} {flag}"
            );
            let wrong = format!("{user}:{pw}x");
            let (code, _) = curl(&srv.url("/private/a.txt"), &["-u", &wrong]);
            assert_eq!(code, "401", "{b} {flag}");
        }
        let (code, body) = curl(&srv.url("/private/"), &["-u", "bob:bob:pw"]);
        assert_eq!(
            (code.as_str(), body.as_str()),
            ("200", "private index"),
            "{b}"
        );
        let (code, body) = curl(
            &srv.url("/private/a.txt"),
            &["-u", "alice:alice's pw", "-r", "1-3"],
        );
        assert_eq!((code.as_str(), body.as_str()), ("206", "riv"), "{b}");
        // Outside the rule: no question asked.
        assert_eq!(curl(&srv.url("/open.txt"), &[]).0, "200", "{b}");
        // HTTP/2 streams ask and check the same way.
        if has(&b, Cap::Http2) {
            let h2 = ["--http2-prior-knowledge", "-u", "carol:carol pw"];
            let (code, body) = curl(&srv.url("/private/a.txt"), &h2);
            assert_eq!((code.as_str(), body.as_str()), ("200", "private"), "{b} h2");
            let (code, _) = curl(&srv.url("/private/a.txt"), &["--http2-prior-knowledge"]);
            assert_eq!(code, "401", "{b} h2");
        }
    }
}

#[test]
fn bad_credentials_get_401_on_a_connection_that_lives_on() {
    let Some(site) = Site::new("auth-bad") else {
        return;
    };
    for b in backends() {
        let srv = site.start(&b, &["--max-header-size", "16384"]);
        let mut s = srv.connect();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let long = format!("alice:{}", "x".repeat(10_000));
        let cases = [
            "Basic".to_string(),
            "Basic !!!!".to_string(),
            "Basic YWxpY2U".to_string(),
            "Bearer YWxpY2U6eA==".to_string(),
            format!("Basic {}", basic(b"alice")),
            format!("Basic {}", basic(b":alice's pw")),
            format!("Basic {}", basic(b"alice\x01:alice's pw")),
            // The user ends at the first colon: user "alice's pw" is none.
            format!("Basic {}", basic(b"alice:alice's pw:")),
            format!("Basic {}", basic(long.as_bytes())),
        ];
        for auth in &cases {
            let t = Instant::now();
            write!(
                s,
                "GET /private/a.txt HTTP/1.1\r\nHost: t\r\nAuthorization: {auth}\r\n\r\n"
            )
            .unwrap();
            let resp = read_response(&mut r, false).expect("response");
            assert_eq!(resp.status, 401, "{b} {auth:.40}");
            assert!(!resp.closes(), "{b} {auth:.40}");
            assert!(resp.header("www-authenticate").is_some(), "{b}");
            // The 10 KB password is refused unhashed.
            assert!(t.elapsed() < Duration::from_secs(2), "{b} {auth:.40}");
        }
        // The same connection then gets its file.
        write!(
            s,
            "GET /private/a.txt HTTP/1.1\r\nHost: t\r\nAuthorization: Basic {}\r\n\r\n",
            basic("alice:alice's pw".as_bytes())
        )
        .unwrap();
        assert_eq!(read_response(&mut r, false).unwrap().status, 200, "{b}");
        // Granted once on this connection, another password is still
        // checked and refused, and the granted one granted again.
        for (user_pw, want) in [("alice:wrong", 401), ("alice:alice's pw", 200)] {
            write!(
                s,
                "GET /private/a.txt HTTP/1.1\r\nHost: t\r\nAuthorization: Basic {}\r\n\r\n",
                basic(user_pw.as_bytes())
            )
            .unwrap();
            assert_eq!(
                read_response(&mut r, false).unwrap().status,
                want,
                "{b} {user_pw}"
            );
        }
        // Two Authorization fields: a malformed request, closed.
        let resp = request(
            &srv,
            "GET /private/a.txt HTTP/1.1\r\nHost: t\r\nAuthorization: Basic YTpi\r\nAuthorization: Basic YTpi\r\n\r\n",
        );
        assert_eq!((resp.status, resp.closes()), (400, true), "{b}");
    }
}

#[test]
fn weak_or_broken_htpasswd_files_stop_the_start() {
    let dir = DocRoot::new(false);
    let file = |name: &str| dir.dir.join(format!("../{name}-{}", std::process::id()));
    let mut made = Vec::new();
    for (flag, needle) in [("-p", "plain text"), ("-d", "DES"), ("-s", "SHA-1")] {
        let f = file(&format!("weak{flag}"));
        if !htpasswd(&f, flag, "u", "pw", true) {
            return;
        }
        let rule = format!("/p/**; auth=htpasswd:{}", f.display());
        startup_error(&["--rule", &rule], needle);
        made.push(f);
    }
    let missing = format!("/p/**; auth=htpasswd:{}", file("none").display());
    startup_error(&["--rule", &missing], "No such file");
    startup_error(
        &["--rule", "/p/**; auth=basic:/etc/passwd"],
        "htpasswd:PATH",
    );
    startup_error(&["--rule", "/p/**; realm=x"], "realm without auth");
    let f = &made[0];
    let rule = format!("/p/**; auth=htpasswd:{}; realm=a\u{7}b", f.display());
    startup_error(&["--rule", &rule], "realm");
    for f in made {
        let _ = std::fs::remove_file(f);
    }
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

fn hup(srv: &Server) {
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) };
}

#[test]
fn sighup_rereads_the_file_and_a_bad_one_keeps_the_running_rules() {
    let Some(site) = Site::new("auth-reload") else {
        return;
    };
    let metrics = format!("127.0.0.1:{}", free_port());
    let srv = site.start("io-uring", &["--metrics", &metrics]);
    let url = srv.url("/private/a.txt");
    assert_eq!(curl(&url, &["-u", "alice:alice's pw"]).0, "200");
    // A new password: the old one, remembered as a success, is forgotten
    // with the file it was checked against.
    assert!(htpasswd(&site.users, "-B", "alice", "new pw", false));
    hup(&srv);
    until(&srv, || curl(&url, &["-u", "alice:new pw"]).0 == "200");
    assert_eq!(curl(&url, &["-u", "alice:alice's pw"]).0, "401");
    // A file that is refused: the running users stay.
    std::fs::write(&site.users, "alice:plaintext\n").unwrap();
    hup(&srv);
    until(&srv, || {
        srv.stderr().contains("keeping the running configuration")
    });
    assert!(srv.stderr().contains("plain text"), "{}", srv.stderr());
    assert_eq!(curl(&url, &["-u", "alice:new pw"]).0, "200");
    // Wrong passwords are counted as refusals.
    let text = curl(&format!("http://{metrics}/metrics"), &[]).1;
    let count: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("spindle_refusals_total{reason=\"password\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(count >= 1, "{text}");
}

#[test]
fn the_access_log_names_the_user() {
    let Some(site) = Site::new("auth-log") else {
        return;
    };
    for format in ["combined", "json"] {
        let log = site
            .root
            .dir
            .join(format!("../auth-{format}-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let srv = site.start(
            "posix-aio",
            &[
                "--access-log",
                log.to_str().unwrap(),
                "--log-format",
                format,
            ],
        );
        assert_eq!(
            curl(&srv.url("/private/a.txt"), &["-u", "dave:dävé"]).0,
            "200"
        );
        assert_eq!(curl(&srv.url("/private/a.txt"), &["-u", "dave:x"]).0, "401");
        let lines = wait_log_lines(&log, 2);
        let _ = std::fs::remove_file(&log);
        if format == "combined" {
            assert!(lines[0].starts_with("127.0.0.1 - dave ["), "{lines:?}");
            assert!(lines[1].starts_with("127.0.0.1 - - ["), "{lines:?}");
        } else {
            let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
            let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
            assert_eq!(first["user"], "dave", "{lines:?}");
            assert!(second["user"].is_null(), "{lines:?}");
        }
    }
}

#[test]
fn a_plain_listener_other_machines_reach_gets_a_warning() {
    let Some(site) = Site::new("auth-warn") else {
        return;
    };
    let srv = site.start("io-uring", &["--listen", "0.0.0.0:0"]);
    let err = srv.stderr();
    assert!(
        err.contains("[warn]") && err.contains("rules with auth are reachable over plain HTTP"),
        "{err}"
    );
    // Loopback only, or redirected to HTTPS: nothing to warn of.
    let quiet = site.start("io-uring", &[]);
    assert!(
        !quiet.stderr().contains("rules with auth"),
        "{}",
        quiet.stderr()
    );
}

#[test]
fn redbot_finds_nothing_bad_in_a_401() {
    let Some(site) = Site::new("auth-redbot") else {
        return;
    };
    let srv = site.start("io-uring", &[]);
    let url = srv.url("/private/a.txt");
    assert_eq!(get(&srv, "/private/a.txt").status, 401);
    if let Some(bad) = redbot_bad_notes(&url) {
        assert!(bad.is_empty(), "{url}: {bad:#?}");
    }
}

fn tls_file(name: &str) -> String {
    tls_data(name).display().to_string()
}

#[test]
fn over_https_behind_a_proxy_and_in_a_virtual_host() {
    let Some(site) = Site::new("auth-where") else {
        return;
    };
    let vroot = DocRoot::new(false);
    std::fs::create_dir_all(vroot.path("private")).unwrap();
    std::fs::write(vroot.path("private/a.txt"), "vhost private\n").unwrap();
    let vhost = format!("v.test={}", vroot.dir.display());
    for b in &backends_with(Cap::Https) {
        let tls_port = free_port();
        let tls_addr = format!("127.0.0.1:{tls_port}");
        let (cert, key) = (tls_file("p256.pem"), tls_file("p256.key"));
        let srv = site.start(
            b,
            &[
                "--tls-listen",
                &tls_addr,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--proxy-listen",
                "127.0.0.1:0",
                "--proxy-from",
                "127.0.0.1",
                "--vhost",
                &vhost,
            ],
        );
        // HTTPS, over HTTP/1.1 and HTTP/2 (ALPN).
        let ca = tls_file("ca.pem");
        let resolve = format!("localhost:{tls_port}:127.0.0.1");
        let url = format!("https://localhost:{tls_port}/private/a.txt");
        for http in ["--http1.1", "--http2"] {
            let tls = ["--cacert", &ca, "--resolve", &resolve, http];
            assert_eq!(curl(&url, &tls).0, "401", "{b} {http}");
            let mut with = tls.to_vec();
            with.extend(["-u", "alice:alice's pw"]);
            assert_eq!(
                curl(&url, &with),
                ("200".into(), "private".into()),
                "{b} {http}"
            );
        }
        // Behind a PROXY header.
        let proxy = proxy_addr(&srv.stderr());
        for (auth, want) in [
            ("", 401),
            ("Authorization: Basic Ym9iOmJvYjpwdw==\r\n", 200),
        ] {
            let mut s = std::net::TcpStream::connect(proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(
                s,
                "PROXY TCP4 10.1.2.3 127.0.0.1 5000 80\r\nGET /private/a.txt HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n"
            )
            .unwrap();
            let r = read_response(&mut BufReader::new(s), false).unwrap();
            assert_eq!(r.status, want, "{b} proxied {auth}");
        }
        // A virtual host: the rule covers its paths too.
        let url = srv.url("/private/a.txt");
        assert_eq!(curl(&url, &["-H", "Host: v.test"]).0, "401", "{b}");
        let (code, body) = curl(&url, &["-H", "Host: v.test", "-u", "carol:carol pw"]);
        assert_eq!(
            (code.as_str(), body.as_str()),
            ("200", "vhost private"),
            "{b}"
        );
    }
}
