//! `--autoindex`: directory listings (HTML and JSON), their ETags, the
//! cache's invalidation, a directory of 100,000 entries beside a small
//! file's client, on every backend.

mod common;

use std::io::{BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// Names that need escaping, as bytes: `<`, `"`, `&`, `%`, a space, a
/// newline, invalid UTF-8, a `:` (a scheme, if a link left it bare).
const ODD: &[&[u8]] = &[
    b"a<b.txt",
    b"q\"uote",
    b"x&y",
    b"50%",
    b"sp ace",
    b"new\nline",
    b"bad\xff\xfe",
    b"c:d",
];

fn site() -> DocRoot {
    let root = DocRoot::new(false);
    // The root is listed too.
    std::fs::remove_file(root.path("index.html")).unwrap();
    let d = root.path("d");
    std::fs::create_dir(&d).unwrap();
    for (i, name) in ODD.iter().enumerate() {
        let p = d.join(std::ffi::OsStr::from_bytes(name));
        std::fs::write(p, format!("odd {i}\n")).unwrap();
    }
    std::fs::write(d.join(".secret"), "dot\n").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/inner"), "inner\n").unwrap();
    root
}

/// `%XX` for every byte but letters, digits and `-._~`.
fn pct(name: &[u8]) -> String {
    name.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn get_with(srv: &Server, method: &str, path: &str, extra: &str) -> Resp {
    request(
        srv,
        &format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n"),
    )
}

fn json(srv: &Server, path: &str) -> (Resp, Vec<serde_json::Value>) {
    let r = get_with(srv, "GET", path, "Accept: application/json\r\n");
    assert_eq!(r.status, 200, "{path}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("listing is JSON");
    (r, v.as_array().expect("an array").clone())
}

#[test]
fn listings_escape_and_link_on_every_backend() {
    let root = site();
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--autoindex"]);
        let r = get(&srv, "/d/");
        assert_eq!(r.status, 200, "{b}");
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{b}"
        );
        assert_eq!(r.header("vary"), Some("Accept, Accept-Encoding"), "{b}");
        let html = String::from_utf8(r.body.clone()).expect("HTML is UTF-8");
        assert!(html.contains("<title>Index of /d/</title>"), "{b}");
        assert!(html.contains("<a href=\"../\">../</a>"), "{b}");
        assert!(html.contains("<a href=\"sub/\">sub/</a>"), "{b}");
        assert!(
            html.contains("<a href=\"a%3Cb.txt\">a&lt;b.txt</a>"),
            "{b}: {html}"
        );
        assert!(html.contains("<a href=\"q%22uote\">q&quot;uote</a>"), "{b}");
        assert!(html.contains("<a href=\"x%26y\">x&amp;y</a>"), "{b}");
        assert!(html.contains("<a href=\"50%25\">50%</a>"), "{b}");
        assert!(
            html.contains("<a href=\"new%0Aline\">new\u{FFFD}line</a>"),
            "{b}"
        );
        assert!(
            html.contains("<a href=\"bad%FF%FE\">bad\u{FFFD}\u{FFFD}</a>"),
            "{b}"
        );
        assert!(html.contains("<a href=\"c%3Ad\">c:d</a>"), "{b}");
        assert!(!html.contains("secret"), "{b}: a dotfile listed");
        // Nothing unescaped: every `<` starts a tag of the page's own.
        for part in html.split('<').skip(1) {
            let tag = part.split(|c: char| !c.is_ascii_alphanumeric() && c != '/' && c != '!');
            let tag = tag.into_iter().next().unwrap();
            assert!(
                [
                    "!DOCTYPE", "html", "/html", "head", "/head", "meta", "title", "/title",
                    "body", "/body", "h1", "/h1", "table", "/table", "tr", "/tr", "th", "/th",
                    "td", "/td", "a", "/a"
                ]
                .contains(&tag),
                "{b}: stray <{tag}"
            );
        }
        // Directories first, then by bytes.
        let pos = |s: &str| html.find(s).unwrap();
        assert!(pos("href=\"sub/\"") < pos("href=\"50%25\""), "{b}");
        assert!(pos("href=\"50%25\"") < pos("href=\"a%3Cb.txt\""), "{b}");
        // Every link leads to its file, by a raw request.
        for (i, name) in ODD.iter().enumerate() {
            let r = get(&srv, &format!("/d/{}", pct(name)));
            assert_eq!(r.status, 200, "{b} {name:?}");
            assert_eq!(r.body, format!("odd {i}\n").as_bytes(), "{b} {name:?}");
        }
        // JSON lists exactly the entries.
        let (_, arr) = json(&srv, "/d/");
        let mut got: Vec<(String, String, String)> = arr
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["type"].as_str().unwrap().to_string(),
                    e["href"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let mut want: Vec<(String, String, String)> = ODD
            .iter()
            .map(|n| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    "file".to_string(),
                    pct(n),
                )
            })
            .collect();
        want.push(("sub".into(), "directory".into(), "sub/".into()));
        got.sort();
        want.sort();
        assert_eq!(got, want, "{b}");
        for e in &arr {
            if e["type"] == "file" {
                assert_eq!(e["size"].as_u64(), Some(6), "{b} {e}");
            }
            assert!(e["mtime"].as_i64().unwrap() > 1_600_000_000, "{b} {e}");
        }
        // HEAD: the head alone; the root has no ../ and hides .git,
        // .hidden; a symlink out of the root, a FIFO and `..` are left out.
        let h = get_with(&srv, "HEAD", "/d/", "");
        assert_eq!(
            h.header("content-length"),
            r.header("content-length"),
            "{b}"
        );
        let (_, top) = json(&srv, "/");
        let names: Vec<&str> = top.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert!(
            names.contains(&"inside") && names.contains(&"d"),
            "{b}: {names:?}"
        );
        for n in ["escape", "updir", "fifo", ".git", ".hidden"] {
            assert!(!names.contains(&n), "{b}: {n} in {names:?}");
        }
        // A directory with an index is served its index, not listed; a
        // missing one is 404; the one without a slash is redirected.
        assert_eq!(get(&srv, "/sub/").body, b"sub index\n", "{b}");
        assert_eq!(get(&srv, "/nope/").status, 404, "{b}");
        assert_eq!(
            get(&srv, "/d/50%25/").status,
            404,
            "{b}: a file as a directory"
        );
        assert_eq!(get(&srv, "/d").status, 301, "{b}");
        assert_eq!(get(&srv, "/.git/").status, 404, "{b}: a hidden directory");
        // Several listings on one keep-alive connection, pipelined.
        let mut s = srv.connect();
        s.write_all(
            b"GET /d/ HTTP/1.1\r\nHost: t\r\n\r\nGET /d/sub/ HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\nGET /f1 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
        let mut rd = BufReader::new(s);
        let a = read_response(&mut rd, false).unwrap();
        let c = read_response(&mut rd, false).unwrap();
        let f = read_response(&mut rd, false).unwrap();
        assert_eq!(a.body, r.body, "{b}");
        assert!(
            String::from_utf8_lossy(&c.body).contains("\"inner\""),
            "{b}"
        );
        assert_eq!(f.body, root.read("f1"), "{b}");
        // With --dotfiles the dotfile is listed.
        drop(srv);
        let srv = Server::start(&b, &root.dir, &["--autoindex", "--dotfiles"]);
        let html = String::from_utf8(get(&srv, "/d/").body).unwrap();
        assert!(html.contains("<a href=\".secret\">.secret</a>"), "{b}");
    }
}

#[test]
fn curl_gets_the_listing() {
    let root = site();
    let srv = Server::start("io-uring", &root.dir, &["--autoindex"]);
    let out = Command::new("curl")
        .args(["-sS", "-H", "Accept: application/json"])
        .arg(srv.url("/d/"))
        .output()
        .expect("curl");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), ODD.len() + 1);
    let out = Command::new("curl")
        .args(["-sS", "--compressed"])
        .arg(srv.url("/d/"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("a&lt;b.txt"));
}

#[test]
fn off_by_default() {
    let root = site();
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &[]);
        assert_eq!(get(&srv, "/d/").status, 404, "{b}");
        assert_eq!(get(&srv, "/noindex/").status, 404, "{b}");
    }
}

#[test]
fn etag_304_and_changes_seen_on_every_backend() {
    let root = site();
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--autoindex", "--workers", "1"]);
        let r = get(&srv, "/d/");
        let tag = r.header("etag").expect("an ETag").to_string();
        let (j, _) = json(&srv, "/d/");
        let jtag = j.header("etag").unwrap().to_string();
        assert_ne!(tag, jtag, "{b}: one tag for HTML and JSON");
        for _ in 0..3 {
            // Cached or not, the same bytes and tag.
            let again = get(&srv, "/d/");
            assert_eq!(
                (again.header("etag"), &again.body),
                (Some(&*tag), &r.body),
                "{b}"
            );
        }
        let inm = format!("If-None-Match: {tag}\r\n");
        let nm = get_with(&srv, "GET", "/d/", &inm);
        assert_eq!(nm.status, 304, "{b}");
        assert_eq!(nm.header("etag"), Some(&*tag), "{b}");
        assert_eq!(nm.header("vary"), Some("Accept, Accept-Encoding"), "{b}");
        assert_eq!(get_with(&srv, "HEAD", "/d/", &inm).status, 304, "{b}");
        assert_eq!(
            get_with(&srv, "GET", "/d/", "If-None-Match: \"other\"\r\n").status,
            200,
            "{b}"
        );
        // A new file: listed at once, under a new tag.
        let new = root.path(&format!("d/new-{b}"));
        std::fs::write(&new, "n").unwrap();
        let r2 = get_with(&srv, "GET", "/d/", &inm);
        assert_eq!(r2.status, 200, "{b}: a stale 304 after a file was added");
        let tag2 = r2.header("etag").unwrap().to_string();
        assert_ne!(tag2, tag, "{b}");
        assert!(
            String::from_utf8_lossy(&r2.body).contains(&format!("new-{b}")),
            "{b}"
        );
        // A file that grows: its size changes, so does the tag.
        std::fs::write(&new, "nnnnnnnnn").unwrap();
        let (j2, arr) = json(&srv, "/d/");
        let e = arr
            .iter()
            .find(|e| e["name"] == format!("new-{b}").as_str())
            .unwrap();
        assert_eq!(e["size"].as_u64(), Some(9), "{b}: stale size");
        assert_ne!(j2.header("etag").unwrap(), jtag, "{b}");
        let r3 = get(&srv, "/d/");
        assert_ne!(r3.header("etag").unwrap(), tag2, "{b}");
        // Removed: gone from the listing.
        std::fs::remove_file(&new).unwrap();
        let r4 = get(&srv, "/d/");
        assert_eq!(r4.header("etag"), Some(&*tag), "{b}: back as before");
    }
}

/// A directory the server may not read is 403. Root reads any directory,
/// so when the tests run as root the server gives root up for `nobody`
/// (`--user`), to whom the directory's mode applies.
#[test]
fn unreadable_directory_is_403() {
    use std::os::unix::fs::PermissionsExt;
    let root = site();
    let locked = root.path("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o311)).unwrap();
    let mut args = vec!["--autoindex"];
    if test_skip::is_root() {
        args.extend(["--user", "nobody"]);
        std::fs::set_permissions(&root.dir, PermissionsExt::from_mode(0o755)).unwrap();
    }
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &args);
        assert_eq!(get(&srv, "/locked/").status, 403, "{b}");
        // The server's user reaches and lists the rest of the root.
        assert_eq!(get(&srv, "/d/").status, 200, "{b} {args:?}");
    }
    std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o755)).unwrap();
}

/// A directory of 100,000 entries is read by the helpers: on one worker,
/// a small file's client keeps getting answers promptly meanwhile.
#[test]
fn a_huge_directory_does_not_hold_other_clients() {
    const N: usize = 100_000;
    let root = DocRoot::new(false);
    let big = root.path("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..N {
        std::fs::File::create(big.join(format!("entry-with-a-longish-name-{i:06}"))).unwrap();
    }
    for b in backends() {
        let srv = Server::start(&b, &root.dir, &["--autoindex", "--workers", "1"]);
        let addr = srv.addr;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d2 = done.clone();
        let small = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut rd = BufReader::new(s.try_clone().unwrap());
            let (mut worst, mut n) = (Duration::ZERO, 0);
            while !d2.load(std::sync::atomic::Ordering::Acquire) {
                let t = Instant::now();
                s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
                let r = read_response(&mut rd, false).unwrap();
                assert_eq!(r.status, 200);
                worst = worst.max(t.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (worst, n)
        });
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let (r, arr) = json(&srv, "/big/");
        let took = t.elapsed();
        // A second request while nothing changed: from the cache.
        let t2 = Instant::now();
        let html = get(&srv, "/big/");
        let took_html = t2.elapsed();
        done.store(true, std::sync::atomic::Ordering::Release);
        let (worst, n) = small.join().unwrap();
        assert_eq!(arr.len(), N, "{b}");
        assert_eq!(r.header("listing-truncated"), None, "{b}");
        assert_eq!(html.status, 200, "{b}");
        assert_eq!(
            html.body.windows(6).filter(|w| w == b"<a hre").count(),
            N + 1,
            "{b}"
        );
        eprintln!(
            "{b}: {N} entries: JSON in {took:?} ({} bytes), HTML in {took_html:?}; small file: {n} fetches, worst {worst:?}",
            r.body.len()
        );
        assert!(n > 5, "{b}: the small client got {n} answers meanwhile");
        // Read on the worker, the directory would hold the small client
        // for about as long as the listing took.
        assert!(
            worst < Duration::from_millis(500) && worst < took / 3,
            "{b}: a small file took {worst:?} while the listing was read ({took:?})"
        );
    }
}

#[test]
fn redbot_finds_nothing_bad_on_a_listing() {
    let root = site();
    let srv = Server::start("io-uring", &root.dir, &["--autoindex"]);
    // REDbot revalidates with the ETag itself, so its notes cover the 304.
    for path in ["/d/", "/"] {
        if let Some(bad) = redbot_bad_notes(&srv.url(path)) {
            assert!(bad.is_empty(), "{path}: {bad:#?}");
        }
    }
}

#[test]
fn bad_autoindex_setting_gives_one_line_and_exit_1() {
    let dir = std::env::temp_dir().join(format!("spindle-ai-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("bad.toml");
    std::fs::write(&toml, "autoindex = \"yes\"\n").unwrap();
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            toml.to_str().unwrap(),
        ],
        "expected a boolean",
    );
    // The key is accepted with its right type.
    let good = dir.join("good.toml");
    std::fs::write(&good, "autoindex = true\n").unwrap();
    let root = site();
    let srv = Server::start("io-uring", &root.dir, &["--config", good.to_str().unwrap()]);
    assert_eq!(get(&srv, "/d/").status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}
