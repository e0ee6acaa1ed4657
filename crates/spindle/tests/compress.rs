//! Compression on the fly (`--compress`): a text file is sent as it is
//! while the helpers compress it once into the cache directory, then
//! from there, with its coding, validators of its own, ranges over the
//! compressed bytes; decoded by the reference tools (gzip, brotli, zstd)
//! it is the file. Over HTTP/1.1, HTTPS and HTTP/2, on every backend that
//! serves each.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use spindle::config::Cap;

/// A text file that compresses well, and differs per seed.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "spindle ",
        "serves ",
        "files ",
        "from ",
        "disk ",
        "quickly\n",
        "and ",
        "never ",
    ];
    let mut out = Vec::with_capacity(len);
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    while out.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(x >> 33) as usize % words.len()].as_bytes());
    }
    out.truncate(len);
    out
}

fn start(backend: &str, root: &Path, cache: &Path, extra: &[&str]) -> (Server, u16) {
    let mut args = vec!["--compress-cache", cache.to_str().unwrap()];
    args.extend_from_slice(extra);
    start_with_https(backend, root, None, &args)
}

/// A response as curl saw it: status, header fields (lower-case names),
/// body as sent (never decoded).
struct Got {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// curl `url` with `args` (HTTPS against the test CA on `port`).
fn curl(port: u16, url: &str, args: &[&str]) -> Got {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "-D"])
        .arg(&head)
        .arg("--cacert")
        .arg(tls_data("ca.pem"))
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {url} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read_to_string(head).unwrap();
    // The last head (after any 100 Continue).
    let block = head
        .trim_end()
        .rsplit("\r\n\r\n")
        .next()
        .unwrap()
        .to_string();
    let mut lines = block.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Got {
        status,
        fields,
        body: out.stdout,
    }
}

/// The parts of a `multipart/byteranges` body: each part's header text
/// and its bytes (as long as its `Content-Range` says).
fn multipart_parts(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut parts = Vec::new();
    let mut at = 0;
    while let Some(i) = find(&body[at..], b"Content-Range: bytes ") {
        let start = at + i;
        let end = start + find(&body[start..], b"\r\n\r\n").expect("part header's end");
        let line = std::str::from_utf8(&body[start..end]).unwrap();
        let range = line["Content-Range: bytes ".len()..]
            .split('/')
            .next()
            .unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let len = b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1;
        let head_from = body[..start]
            .windows(2)
            .rposition(|w| w == b"--")
            .unwrap_or(0);
        let head = String::from_utf8_lossy(&body[head_from..end]).into_owned();
        parts.push((head, body[end + 4..end + 4 + len].to_vec()));
        at = end + 4 + len;
    }
    parts
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The reference decoder of `coding`.
fn decode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    let tool = match coding {
        "gzip" => "gzip",
        "br" => "brotli",
        "zstd" => "zstd",
        other => panic!("coding {other}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("in");
    std::fs::write(&f, bytes).unwrap();
    let out = Command::new(tool).arg("-dc").arg(&f).output().expect(tool);
    assert!(
        out.status.success(),
        "{tool} -dc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Asks until the response comes compressed (the helper made it). The
/// bound is generous: a helper runs at nice 10, and under the whole suite
/// on two cores a brotli 11 of 1 MiB can take ten times as long as alone.
fn until_compressed(port: u16, url: &str, args: &[&str]) -> Got {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let g = curl(port, url, args);
        if g.field("content-encoding").is_some() {
            return g;
        }
        assert!(
            Instant::now() < deadline,
            "{url} {args:?}: never compressed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn made_once_then_served_compressed_in_each_coding_over_each_protocol() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        each_coding_over_each_protocol(b);
    }
}

fn each_coding_over_each_protocol(backend: &str) {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let body = text(300_000, 1);
    std::fs::write(root.path().join("page.html"), &body).unwrap();
    let (srv, port) = start(backend, root.path(), cache.path(), &[]);
    let plain = srv.url("/page.html");
    let tls = format!("https://localhost:{port}/page.html");
    let identity = curl(port, &plain, &[]);
    assert_eq!(identity.status, 200);
    assert_eq!(identity.body, body);
    assert_eq!(identity.field("content-encoding"), None);
    assert_eq!(
        identity.field("vary"),
        Some("Accept-Encoding"),
        "a response that could have been compressed says so"
    );
    let identity_tag = identity.field("etag").unwrap().to_string();
    for coding in ["gzip", "br", "zstd"] {
        let ae = format!("Accept-Encoding: {coding}");
        for (url, proto) in [
            (&plain, "--http1.1"),
            (&tls, "--http1.1"),
            (&tls, "--http2"),
            (&plain, "--http2-prior-knowledge"),
        ] {
            let g = until_compressed(port, url, &[proto, "-H", &ae]);
            assert_eq!(g.status, 200, "{url} {proto} {coding}");
            assert_eq!(g.field("content-encoding"), Some(coding));
            assert_eq!(g.field("vary"), Some("Accept-Encoding"));
            assert_eq!(g.field("content-type"), Some("text/html; charset=utf-8"));
            assert_eq!(g.field("content-length").unwrap(), g.body.len().to_string());
            assert!(
                g.body.len() < body.len() / 3,
                "{coding}: {} bytes",
                g.body.len()
            );
            assert_eq!(decode(coding, &g.body), body, "{url} {proto} {coding}");
            let tag = g.field("etag").unwrap().to_string();
            assert_ne!(tag, identity_tag, "an ETag per coding");
            // Conditionals and ranges are of the compressed representation.
            let inm = format!("If-None-Match: {tag}");
            let c = curl(port, url, &[proto, "-H", &ae, "-H", &inm]);
            assert_eq!(c.status, 304, "{url} {proto} {coding}");
            let r = curl(port, url, &[proto, "-H", &ae, "-r", "10-109"]);
            assert_eq!(r.status, 206);
            assert_eq!(r.field("content-encoding"), Some(coding));
            assert_eq!(r.body, g.body[10..110]);
            // Several ranges: parts of the compressed bytes, each naming
            // the coding (the multipart body itself is not encoded).
            let m = curl(port, url, &[proto, "-H", &ae, "-r", "0-9,200-299"]);
            assert_eq!(m.status, 206, "{url} {proto} {coding}");
            assert_eq!(m.field("content-encoding"), None);
            assert_eq!(m.field("etag"), Some(tag.as_str()));
            let parts = multipart_parts(&m.body);
            assert_eq!(parts.len(), 2, "{url} {proto} {coding}");
            for (i, (head, bytes)) in parts.iter().enumerate() {
                let (from, to) = [(0, 10), (200, 300)][i];
                assert!(
                    head.contains(&format!("Content-Encoding: {coding}")),
                    "{head}"
                );
                let range = format!("Content-Range: bytes {from}-{}/{}", to - 1, g.body.len());
                assert!(head.contains(&range), "{head}");
                assert_eq!(bytes, &g.body[from..to]);
            }
            let h = curl(port, url, &[proto, "-H", &ae, "-I"]);
            assert_eq!(h.field("content-length"), g.field("content-length"));
            assert_eq!(h.field("etag"), Some(tag.as_str()));
        }
    }
    // Made once per coding, kept on disk under names of the version.
    let made: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(made.len(), 3, "{made:?}");
}

#[test]
fn plain_http_on_every_backend() {
    for b in &backends() {
        eprintln!("backend {b}");
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let body = text(700_000, 9);
        std::fs::write(root.path().join("data.json"), &body).unwrap();
        let srv = Server::start(
            b,
            root.path(),
            &["--compress-cache", cache.path().to_str().unwrap()],
        );
        let url = srv.url("/data.json");
        let g = until_compressed(0, &url, &["-H", "Accept-Encoding: gzip"]);
        assert_eq!(
            g.field("content-type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(decode("gzip", &g.body), body, "{b}");
        let r = curl(0, &url, &["-H", "Accept-Encoding: gzip", "-r", "1000-"]);
        assert_eq!(r.status, 206, "{b}");
        assert_eq!(r.body, g.body[1000..], "{b}");
    }
}

#[test]
fn accept_encoding_chooses_or_declines() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let body = text(20_000, 2);
    std::fs::write(root.path().join("a.js"), &body).unwrap();
    std::fs::write(root.path().join("tiny.txt"), b"short").unwrap();
    std::fs::write(root.path().join("pic.png"), &body).unwrap();
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    let url = srv.url("/a.js");
    // Every coding made first.
    for c in ["gzip", "br", "zstd"] {
        until_compressed(port, &url, &["-H", &format!("Accept-Encoding: {c}")]);
    }
    for (ae, want) in [
        ("gzip;q=0.5, br;q=0.9", Some("br")),
        ("gzip, br;q=0", Some("gzip")),
        ("*", Some("br")),
        ("*;q=0.1, zstd", Some("zstd")),
        ("x-gzip", Some("gzip")),
        ("deflate", None),
        ("identity", None),
        // Nothing acceptable but identity refused: sent as it is (RFC 9110
        // §12.5.3 allows 406 or this; browsers never ask so).
        ("identity;q=0", None),
        ("gzip;q=0, br;q=0, zstd;q=0", None),
    ] {
        let g = curl(port, &url, &["-H", &format!("Accept-Encoding: {ae}")]);
        assert_eq!(g.status, 200, "{ae}");
        assert_eq!(g.field("content-encoding"), want, "{ae}");
        assert_eq!(g.field("vary"), Some("Accept-Encoding"), "{ae}");
        if want.is_none() {
            assert_eq!(g.body, body, "{ae}");
        }
    }
    let g = curl(port, &url, &[]);
    assert_eq!(g.field("content-encoding"), None, "no Accept-Encoding");
    // Below the minimum size, or not a compressible type: as it is, and
    // nothing varies.
    for p in ["/tiny.txt", "/pic.png"] {
        let g = curl(
            port,
            &srv.url(p),
            &["-H", "Accept-Encoding: gzip, br, zstd"],
        );
        assert_eq!(g.field("content-encoding"), None, "{p}");
        assert_eq!(g.field("vary"), None, "{p}");
    }
}

#[test]
fn a_file_above_the_maximum_goes_as_it_is_and_is_never_read_for_it() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    // 2 GiB of text, sparse: above the default maximum (64 MiB).
    let f = std::fs::File::create(root.path().join("huge.txt")).unwrap();
    f.set_len(2 << 30).unwrap();
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    for _ in 0..3 {
        let g = curl(
            port,
            &srv.url("/huge.txt"),
            &["-I", "-H", "Accept-Encoding: gzip"],
        );
        assert_eq!(g.status, 200);
        assert_eq!(g.field("content-encoding"), None);
        assert_eq!(g.field("content-length"), Some("2147483648"));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}

#[test]
fn a_file_changed_is_compressed_anew_and_never_served_stale() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let path = root.path().join("doc.txt");
    // Large enough that brotli at its highest level takes seconds (about
    // 2.5 s of CPU here), so that the rewrite lands while it is being
    // compressed; small enough that the two compressions (the first
    // version's, thrown away at its end, and the second's) finish well
    // within the bound under a loaded CI machine.
    let first = text(1 << 20, 3);
    std::fs::write(&path, &first).unwrap();
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    let url = srv.url("/doc.txt");
    let g = curl(port, &url, &["-H", "Accept-Encoding: br"]);
    assert_eq!(
        g.field("content-encoding"),
        None,
        "the first request goes as it is"
    );
    // Rewritten in place while the helper reads it.
    std::thread::sleep(Duration::from_millis(50));
    let second = text(1 << 20, 4);
    std::fs::write(&path, &second).unwrap();
    let g = until_compressed(port, &url, &["-H", "Accept-Encoding: br"]);
    assert_eq!(
        decode("br", &g.body),
        second,
        "the compressed bytes are of the file now"
    );
    // Nothing was kept of the first version, read while it changed.
    let kept: Vec<_> = std::fs::read_dir(cache.path()).unwrap().collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let id = curl(port, &url, &[]);
    assert_eq!(id.body, second);
    assert_ne!(g.field("etag"), id.field("etag"));
}

#[test]
fn many_clients_at_once_make_one_compression() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("app.css"), text(500_000, 5)).unwrap();
    let mport = free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let (srv, port) = start(
        "io-uring",
        root.path(),
        cache.path(),
        &["--metrics", &maddr],
    );
    let url = srv.url("/app.css");
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let out = Command::new("curl")
                    .args([
                        "-sS",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "-H",
                        "Accept-Encoding: gzip",
                        &url,
                    ])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), "200");
    }
    until_compressed(port, &url, &["-H", "Accept-Encoding: gzip"]);
    let metrics = ureq::get(&format!("http://{maddr}/metrics"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    let made = metrics
        .lines()
        .find(|l| l.starts_with("spindle_compress_jobs_total{result=\"made\"}"))
        .unwrap();
    assert_eq!(
        made, "spindle_compress_jobs_total{result=\"made\"} 1",
        "{metrics}"
    );
    // Every response counted once: a hit (from the result) or a miss.
    let lookups = |result: &str| -> u64 {
        let key = format!("spindle_compress_lookups_total{{result=\"{result}\"}} ");
        let line = metrics.lines().find(|l| l.starts_with(&key)).unwrap();
        line[key.len()..].parse().unwrap()
    };
    assert!(lookups("hit") >= 1, "{metrics}");
    assert!(lookups("hit") + lookups("miss") >= 201, "{metrics}");
}

#[test]
fn the_cache_survives_a_restart_and_drops_what_a_crash_left() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let body = text(50_000, 6);
    std::fs::write(root.path().join("index.html"), &body).unwrap();
    {
        let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
        until_compressed(port, &srv.url("/"), &["-H", "Accept-Encoding: zstd"]);
    }
    // What a crash mid-compression leaves.
    std::fs::write(cache.path().join(".tmp-1-0-x.zst"), b"half").unwrap();
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    let g = curl(port, &srv.url("/"), &["-H", "Accept-Encoding: zstd"]);
    assert_eq!(
        g.field("content-encoding"),
        Some("zstd"),
        "served from the cache at once"
    );
    assert_eq!(decode("zstd", &g.body), body);
    assert!(!cache.path().join(".tmp-1-0-x.zst").exists());
}

#[test]
fn the_cache_keeps_within_its_size() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    for i in 0..8 {
        std::fs::write(root.path().join(format!("f{i}.txt")), text(200_000, 10 + i)).unwrap();
    }
    let (srv, port) = start(
        "io-uring",
        root.path(),
        cache.path(),
        &[
            "--compress-cache-size",
            "120k",
            "--compress-codings",
            "gzip",
        ],
    );
    for i in 0..8 {
        until_compressed(
            port,
            &srv.url(&format!("/f{i}.txt")),
            &["-H", "Accept-Encoding: gzip"],
        );
    }
    let total: u64 = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total <= 120 * 1024, "{total} bytes kept");
    // The one served last is still there.
    let g = curl(port, &srv.url("/f7.txt"), &["-H", "Accept-Encoding: gzip"]);
    assert_eq!(g.field("content-encoding"), Some("gzip"));
}

#[test]
fn a_cache_that_cannot_be_written_costs_a_warning_not_a_response() {
    let root = tempfile::tempdir().unwrap();
    let body = text(30_000, 7);
    std::fs::write(root.path().join("a.txt"), &body).unwrap();
    // A cache on a file system with no room.
    let cache = tempfile::tempdir().unwrap();
    let _full = FullDisk::mount(cache.path());
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    let url = srv.url("/a.txt");
    for _ in 0..20 {
        let g = curl(port, &url, &["-H", "Accept-Encoding: gzip"]);
        assert_eq!(g.status, 200);
        assert_eq!(g.field("content-encoding"), None);
        assert_eq!(g.body, body);
        std::thread::sleep(Duration::from_millis(20));
    }
    let warned = srv
        .stderr()
        .lines()
        .filter(|l| l.contains("compress-cache"))
        .count();
    assert_eq!(warned, 1, "{}", srv.stderr());
}

#[test]
fn off_means_off_and_bad_settings_are_one_line() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), text(30_000, 8)).unwrap();
    let srv = Server::start("io-uring", root.path(), &["--compress", "off"]);
    for _ in 0..5 {
        let r = request(
            &srv,
            "GET /a.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(r.header("vary"), None);
        std::thread::sleep(Duration::from_millis(50));
    }
    let file = root.path().join("a.txt");
    let file = file.to_str().unwrap();
    for (args, needle) in [
        (vec!["--compress-codings", "lz4"], "compress-codings"),
        (vec!["--compress-levels", "gzip=12"], "compress-levels"),
        (vec!["--compress-types", "text"], "compress-types"),
        (
            vec!["--compress-min-size", "2M", "--compress-max-size", "1M"],
            "compress-min-size",
        ),
        (vec!["--compress-threads", "0"], "compress-threads"),
        (vec!["--compress-cache", file], "compress-cache"),
    ] {
        startup_error(&args, needle);
    }
}

#[test]
fn curl_compressed_and_redbot_take_what_is_made() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let body = text(120_000, 11);
    std::fs::write(root.path().join("guide.html"), &body).unwrap();
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    let url = srv.url("/guide.html");
    for c in ["gzip", "br", "zstd"] {
        until_compressed(port, &url, &["-H", &format!("Accept-Encoding: {c}")]);
        // curl asks for what it decodes (all three here) and decodes it.
        let out = Command::new("curl")
            .args([
                "-sS",
                "--compressed",
                "-H",
                &format!("Accept-Encoding: {c}"),
                "-w",
                "%{size_download}",
            ])
            .arg(&url)
            .output()
            .unwrap();
        assert!(out.status.success());
        let (got, size) = out.stdout.split_at(body.len().min(out.stdout.len()));
        assert_eq!(got, &body[..], "curl --compressed, {c}");
        let size: usize = String::from_utf8_lossy(size).parse().unwrap();
        assert!(size < body.len() / 3, "{c}: {size} bytes on the wire");
    }
    // REDbot asks with gzip, and checks the 304 and the 206 itself.
    if let Some(bad) = redbot_bad_notes(&url) {
        assert!(bad.is_empty(), "{bad:#?}");
    }
}

#[test]
fn the_json_access_log_names_the_coding() {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.css"), text(40_000, 12)).unwrap();
    let log = cache.path().join("access.log");
    let (srv, port) = start(
        "io-uring",
        root.path(),
        cache.path(),
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--log-format",
            "json",
        ],
    );
    let url = srv.url("/a.css");
    until_compressed(port, &url, &["-H", "Accept-Encoding: zstd"]);
    curl(port, &url, &[]);
    let lines = wait_log_lines(&log, 2);
    let v: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = v.len();
    assert_eq!(v[n - 2]["encoding"], "zstd", "{lines:#?}");
    assert_eq!(v[n - 1]["encoding"], serde_json::Value::Null, "{lines:#?}");
    assert_eq!(
        v[0]["encoding"],
        serde_json::Value::Null,
        "the first went as it is"
    );
}

#[test]
fn urllib3_decodes_each_coding() {
    let have = Command::new("python3")
        .args([
            "-c",
            "import urllib3.response as r, brotli; assert r.HAS_ZSTD",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        test_skip::skip_or_fail("python3 urllib3 with brotli and zstd not installed (pip: urllib3 brotli backports.zstd)");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let body = text(90_000, 13);
    std::fs::write(root.path().join("api.json"), &body).unwrap();
    let (srv, port) = start("io-uring", root.path(), cache.path(), &[]);
    let url = srv.url("/api.json");
    let script = "import sys, urllib3\n\
        url, coding, want = sys.argv[1], sys.argv[2], open(sys.argv[3], 'rb').read()\n\
        r = urllib3.request('GET', url, headers={'Accept-Encoding': coding}, decode_content=True)\n\
        assert r.headers.get('Content-Encoding') == coding, r.headers\n\
        assert r.data == want, len(r.data)\n\
        print('ok', coding)\n";
    for c in ["gzip", "br", "zstd"] {
        until_compressed(port, &url, &["-H", &format!("Accept-Encoding: {c}")]);
        let out = Command::new("python3")
            .args(["-c", script, &url, c])
            .arg(root.path().join("api.json"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{c}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn listings_go_compressed_in_each_coding_over_each_protocol() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        listings_in_each_coding(b);
    }
}

fn listings_in_each_coding(backend: &str) {
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let big = root.path().join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..2000 {
        std::fs::write(big.join(format!("entry-{i:05}.txt")), b"x").unwrap();
    }
    let small = root.path().join("small");
    std::fs::create_dir(&small).unwrap();
    std::fs::write(small.join("a"), b"x").unwrap();
    let (srv, port) = start(backend, root.path(), cache.path(), &["--autoindex"]);
    let plain = srv.url("/big/");
    let tls = format!("https://localhost:{port}/big/");
    for accept in ["text/html", "application/json"] {
        let at = format!("Accept: {accept}");
        let identity = curl(port, &plain, &["-H", &at]);
        assert_eq!(identity.status, 200);
        assert_eq!(identity.field("content-encoding"), None);
        assert_eq!(identity.field("vary"), Some("Accept, Accept-Encoding"));
        let identity_tag = identity.field("etag").unwrap().to_string();
        for coding in ["gzip", "br", "zstd"] {
            let ae = format!("Accept-Encoding: {coding}");
            for (url, proto) in [
                (&plain, "--http1.1"),
                (&tls, "--http1.1"),
                (&tls, "--http2"),
            ] {
                let g = curl(port, url, &[proto, "-H", &at, "-H", &ae]);
                let what = format!("{accept} {coding} {url} {proto}");
                assert_eq!(g.status, 200, "{what}");
                assert_eq!(g.field("content-encoding"), Some(coding), "{what}");
                assert_eq!(g.field("vary"), Some("Accept, Accept-Encoding"));
                assert_eq!(g.field("content-length").unwrap(), g.body.len().to_string());
                assert!(
                    g.body.len() < identity.body.len() / 5,
                    "{what}: {}",
                    g.body.len()
                );
                assert_eq!(decode(coding, &g.body), identity.body, "{what}");
                let tag = g.field("etag").unwrap().to_string();
                assert_ne!(tag, identity_tag, "{what}: an ETag per coding");
                let inm = format!("If-None-Match: {tag}");
                let c = curl(port, url, &[proto, "-H", &at, "-H", &ae, "-H", &inm]);
                assert_eq!(c.status, 304, "{what}");
                // The coding's tag does not match the identity listing.
                let c = curl(port, url, &[proto, "-H", &at, "-H", &inm]);
                assert_eq!(c.status, 200, "{what}");
            }
        }
    }
    // A listing under --compress-min-size goes as it is.
    let json = "Accept: application/json";
    let s = curl(
        port,
        &srv.url("/small/"),
        &["-H", json, "-H", "Accept-Encoding: gzip"],
    );
    assert!(s.body.len() < 256, "{}", s.body.len());
    assert_eq!(s.field("content-encoding"), None);
    assert_eq!(s.field("vary"), Some("Accept, Accept-Encoding"));
    // Off: neither compressed nor varying by Accept-Encoding.
    let off = tempfile::tempdir().unwrap();
    let (srv, port) = start(
        backend,
        root.path(),
        off.path(),
        &["--autoindex", "--compress", "off"],
    );
    let g = curl(port, &srv.url("/big/"), &["-H", "Accept-Encoding: gzip"]);
    assert_eq!(g.field("content-encoding"), None);
    assert_eq!(g.field("vary"), Some("Accept"));
}
