//! spindle as a caching edge (`--origin`) in front of Debian's nginx, end
//! to end with curl: what is not beneath the root comes from the origin,
//! byte for byte, with its validators and type, over HTTP/1.1, HTTPS and
//! HTTP/2 and on every backend; a range fetches only the slices it
//! touches; a cached object is served while the origin is down, an
//! uncached one is a 502; a 404 at the origin is a 404; a local file
//! still wins; bad flags are one error line. A large object streams
//! while its slices are fetched, and one replaced at the origin during a
//! download ends that download short, never spliced. A slow origin
//! does not slow the clients of cached files. A full cache keeps the
//! objects asked for more often over ones asked for once. S3 origins on Garage:
//! edge_s3.rs; pass-through: edge_pass.rs.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::edge::*;
use common::*;

#[test]
fn objects_come_from_the_origin_byte_for_byte_on_every_backend() {
    let origin_root = tempfile::tempdir().unwrap();
    let big = random_bytes(3 * M as u64 + 4321, 1);
    write(origin_root.path(), "pool/big.iso", &big);
    write(origin_root.path(), "index.json", b"{\"a\": 1}\n");
    let Some(n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    for backend in backends() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "local.txt", b"mine\n");
        write(origin_root.path(), "local.txt", b"the origin's\n");
        let cache = tempfile::tempdir().unwrap();
        let cache_s = cache.path().to_str().unwrap();
        let srv = Server::start(&backend, root.path(), &edge_args(&origin, cache_s));
        let g = curl(&srv.url("/pool/big.iso"), &[]);
        assert_eq!(g.status, 200, "{backend}: {}", g.head);
        assert!(g.body == big, "{backend}: the body is not the origin's");
        let origin_head = curl(&format!("{origin}/pool/big.iso"), &["-I"]);
        assert_eq!(g.field("etag"), origin_head.field("etag"), "{backend}");
        assert_eq!(g.field("last-modified"), origin_head.field("last-modified"));
        assert_eq!(g.field("content-type"), Some("application/octet-stream"));
        // Again, from the cache: the same bytes, and a 304 by its tag.
        let again = curl(&srv.url("/pool/big.iso"), &[]);
        assert!(again.body == big, "{backend}: cached body");
        let etag = g.field("etag").unwrap().to_string();
        let nm = curl(
            &srv.url("/pool/big.iso"),
            &["-H", &format!("If-None-Match: {etag}")],
        );
        assert_eq!(nm.status, 304, "{backend}");
        let j = curl(&srv.url("/index.json"), &[]);
        assert_eq!((j.status, j.body.as_slice()), (200, &b"{\"a\": 1}\n"[..]));
        assert_eq!(j.field("content-type"), Some("application/json"));
        assert_eq!(curl(&srv.url("/local.txt"), &[]).body, b"mine\n");
        assert_eq!(curl(&srv.url("/nope"), &[]).status, 404, "{backend}");
        // Remembered a while: the origin is not asked again.
        let asked = n.log().iter().filter(|l| l.contains(" /nope ")).count();
        assert_eq!(curl(&srv.url("/nope"), &[]).status, 404, "{backend}");
        let again = n.log().iter().filter(|l| l.contains(" /nope ")).count();
        assert_eq!(asked, again, "{backend}: a 404 asked again");
    }
}

#[test]
fn a_range_fetches_only_its_slices() {
    let video = random_bytes(20 * M as u64, 2);
    let Some(e) = Edge::start(&[("v.mp4", &video)], &[]) else {
        return;
    };
    let (n, srv) = (&e.nginx, &e.srv);
    // A seek 15.5 MiB in: slice 0 (the version) and slice 15, no more.
    let at = 15 * M + M / 2;
    let g = curl(&srv.url("/v.mp4"), &["-r", &format!("{at}-{}", at + 99)]);
    assert_eq!(g.status, 206, "{}", g.head);
    assert_eq!(g.body, video[at..at + 100]);
    assert_eq!(
        g.field("content-range"),
        Some(format!("bytes {at}-{}/{}", at + 99, video.len()).as_str())
    );
    let log = n.log();
    assert_eq!(log.len(), 2, "{log:#?}");
    // Several ranges across slices: a multipart of the right bytes.
    let g = curl(&srv.url("/v.mp4"), &["-r", "10-19,5242880-5242889"]);
    assert_eq!(g.status, 206);
    let text = String::from_utf8_lossy(&g.body);
    assert!(
        text.contains("Content-Range: bytes 5242880-5242889/20971520"),
        "{text}"
    );
    assert_eq!(n.log().len(), 3, "slice 5 only: {:#?}", n.log());
}

#[test]
fn the_origin_down_serves_what_is_cached_and_502s_the_rest() {
    let origin_root = tempfile::tempdir().unwrap();
    write(origin_root.path(), "a.deb", &random_bytes(100_000, 3));
    write(origin_root.path(), "b.deb", b"never fetched");
    let Some(mut n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cache_s = cache.path().to_str().unwrap();
    let mut args = edge_args(&origin, cache_s);
    args.extend(["--origin-ttl", "600"]);
    let srv = Server::start("io-uring", root.path(), &args);
    assert_eq!(curl(&srv.url("/a.deb"), &[]).status, 200);
    n.stop();
    let g = curl(&srv.url("/a.deb"), &[]);
    assert_eq!(g.status, 200, "fresh in the cache");
    assert_eq!(g.body.len(), 100_000);
    assert_eq!(curl(&srv.url("/b.deb"), &[]).status, 502);
    assert!(srv.stderr().contains("origin: /b.deb"), "{}", srv.stderr());
}

#[test]
fn over_https_and_http2_the_same_bytes() {
    let origin_root = tempfile::tempdir().unwrap();
    let big = random_bytes(6 * M as u64 + 17, 4);
    // A file per protocol, so that each goes through a miss: the first
    // slice awaited, then the body streamed while the others come from
    // a slow origin (4 MB/s a fetch), so that it waits for them.
    for proto in ["http1.1", "http2"] {
        write(origin_root.path(), &format!("slow/{proto}.bin"), &big);
    }
    let Some(n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    for backend in backends_with(Cap::Http2) {
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let (_srv, port) = start_with_https(
            &backend,
            root.path(),
            None,
            &edge_args(&origin, cache.path().to_str().unwrap()),
        );
        for proto in ["--http1.1", "--http2"] {
            let url = format!("https://127.0.0.1:{port}/slow/{}.bin", &proto[2..]);
            let g = curl(&url, &[proto]);
            let want = if proto == "--http2" {
                "HTTP/2"
            } else {
                "HTTP/1.1"
            };
            assert!(g.head.starts_with(want), "{backend} {proto}: {}", g.head);
            assert_eq!(g.status, 200, "{backend} {proto}: {}", g.head);
            assert!(g.body == big, "{backend} {proto}: body");
            let r = curl(&url, &[proto, "-r", "2097150-2097160"]);
            assert_eq!(r.body, big[2_097_150..2_097_161], "{backend} {proto}");
        }
    }
}

#[test]
fn edge_flags_are_checked_with_one_line() {
    startup_error(
        &["--origin", "ftp://x/"],
        "origin \"ftp://x/\": the scheme must be http or https",
    );
    startup_error(
        &["--origin", "http://127.0.0.1:9"],
        "origin: give --cache-dir and --cache-size with it",
    );
    startup_error(
        &["--cache-dir", "/tmp"],
        "cache-dir and cache-size are the edge's: give --origin too",
    );
    let base = ["--origin", "http://127.0.0.1:9", "--cache-dir", "/tmp/x"];
    for (more, needle) in [
        (
            &["--cache-size", "10"][..],
            "cache-size: at least one slice",
        ),
        (
            &[
                "--cache-size",
                "1G",
                "--origin-s3-credentials",
                "/nonexistent",
            ][..],
            "origin-s3-credentials: give --origin-s3-region too",
        ),
        (
            &[
                "--cache-size",
                "1G",
                "--origin-s3-region",
                "garage",
                "--origin-s3-credentials",
                "/nonexistent",
            ][..],
            "origin-s3-credentials: /nonexistent: No such file",
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(more).copied().collect();
        startup_error(&args, needle);
    }
}

#[test]
fn a_stale_object_is_revalidated_not_fetched_again() {
    let first = random_bytes(3 * M as u64, 6);
    let metrics = format!("127.0.0.1:{}", free_port());
    let log_dir = tempfile::tempdir().unwrap();
    let access_log = log_dir.path().join("access.json");
    let log_s = access_log.to_str().unwrap();
    let extra = [
        "--origin-ttl",
        "1",
        "--metrics",
        &metrics,
        "--access-log",
        log_s,
        "--log-format",
        "json",
    ];
    let Some(e) = Edge::start(&[("Packages", &first)], &extra) else {
        return;
    };
    let (n, srv, origin_root) = (&e.nginx, &e.srv, &e.origin_root);
    let url = srv.url("/Packages");
    let a = curl(&url, &[]);
    assert!(a.body == first);
    let gets = |log: &[String]| log.iter().filter(|l| l.starts_with("GET ")).count();
    assert_eq!(gets(&n.log()), 3, "{:#?}", n.log());
    // Stale after a second: the origin is asked (304), nothing fetched.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let b = curl(&url, &[]);
    assert!(b.body == first);
    let log = n.log();
    assert_eq!(gets(&log), 3, "{log:#?}");
    assert!(
        log.iter()
            .any(|l| l.starts_with("HEAD /Packages") && l.ends_with(" 304")),
        "{log:#?}"
    );
    // Replaced at the origin (another second): the new version, whole.
    let second = random_bytes(2 * M as u64 + 5, 7);
    write(origin_root.path(), "Packages", &second);
    let f = std::fs::File::options()
        .write(true)
        .open(origin_root.path().join("Packages"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(10))
        .unwrap();
    drop(f);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let c = curl(&url, &[]);
    assert!(c.body == second, "the new version");
    assert_ne!(c.field("etag"), a.field("etag"));
    assert_eq!(gets(&n.log()), 3 + 3, "{:#?}", n.log());
    // Fresh now: a hit. The metrics say all of it.
    assert!(curl(&url, &[]).body == second);
    let m = curl(&format!("http://{metrics}/metrics"), &[]);
    let text = String::from_utf8_lossy(&m.body);
    for line in [
        "spindle_edge_lookups_total{result=\"hit\"} 1",
        "spindle_edge_lookups_total{result=\"revalidated\"} 2",
        "spindle_edge_lookups_total{result=\"miss\"} 1",
        "spindle_edge_origin_requests_total 6",
        &format!(
            "spindle_edge_origin_bytes_total {}",
            first.len() + second.len()
        ),
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    // The access log names each: miss, revalidated, miss (the new
    // version), hit.
    assert_eq!(
        cache_statuses(&access_log, 4),
        ["miss", "revalidated", "miss", "hit"]
    );
}

#[test]
fn a_crash_and_a_restart_keep_the_cache_warm() {
    let origin_root = tempfile::tempdir().unwrap();
    let video = random_bytes(8 * M as u64, 9);
    write(origin_root.path(), "film.mp4", &video);
    let Some(mut n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut args = edge_args(&origin, cache.path().to_str().unwrap());
    args.extend(["--origin-ttl", "600"]);
    let mut srv = Server::start("io-uring", root.path(), &args);
    // The first half, then kill -9.
    let half = curl(&srv.url("/film.mp4"), &["-r", &format!("0-{}", 4 * M - 1)]);
    assert_eq!(half.body, video[..4 * M]);
    srv.child.kill().unwrap(); // SIGKILL
    srv.child.wait().unwrap();
    // The origin gone too: only what the cache holds can be served.
    n.stop();
    let srv = Server::start("io-uring", root.path(), &args);
    let again = curl(
        &srv.url("/film.mp4"),
        &["-r", &format!("{}-{}", M, 3 * M + 10)],
    );
    assert_eq!(again.status, 206, "{}", again.head);
    assert_eq!(again.body, video[M..3 * M + 11]);
    // The second half was never stored: the origin is down, a 503 (the
    // head could not be promised), never bytes that are not the file's.
    let rest = curl(&srv.url("/film.mp4"), &["-r", &format!("{}-", 6 * M)]);
    assert_ne!(rest.status, 206, "{}", rest.head);
    assert!(rest.status >= 500, "{}", rest.head);
}

/// curl's time to the first body byte and to the last, in seconds.
fn timed_get(url: &str, out: &Path) -> (f64, f64) {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-o"])
        .arg(out)
        .args(["-w", "%{http_code} %{time_starttransfer} %{time_total}"])
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let v: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(v[0], "200", "{text} {}", String::from_utf8_lossy(&o.stderr));
    (v[1].parse().unwrap(), v[2].parse().unwrap())
}

#[test]
fn a_large_object_streams_while_its_slices_are_fetched() {
    // 48 MiB from an origin that sends 4 MB/s a connection: its first
    // byte must not wait for the whole object.
    let iso = random_bytes(48 * M as u64 + 7, 10);
    let Some(e) = Edge::start(&[("slow/debian.iso", &iso)], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("iso");
    let (first, total) = timed_get(&e.srv.url("/slow/debian.iso"), &out);
    assert!(std::fs::read(&out).unwrap() == iso, "not the file");
    assert!(
        first * 3.0 < total,
        "first byte after {first:.2} s of {total:.2} s: the body waited for the object"
    );
    assert_eq!(e.nginx.log().len(), 49, "each slice once");
}

#[test]
fn a_file_replaced_at_the_origin_mid_download_is_never_spliced() {
    let old = random_bytes(48 * M as u64, 11);
    let new = random_bytes(48 * M as u64, 12);
    let extra = ["--origin-ttl", "600"];
    let Some(e) = Edge::start(&[("slow/pool/app.deb", &old)], &extra) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deb");
    let url = e.srv.url("/slow/pool/app.deb");
    let mut client = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-o"])
        .arg(&out)
        .arg(&url)
        .spawn()
        .expect("curl");
    // Once its first bytes arrived, the origin's file is replaced (by a
    // rename, as a mirror sync does), same length, a later mtime.
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&out).map_or(0, |m| m.len()) == 0 {
        assert!(t0.elapsed().as_secs() < 20, "no byte came");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let dst = e.origin_root.path().join("slow/pool/app.deb");
    let tmp = dst.with_extension("tmp");
    std::fs::write(&tmp, &new).unwrap();
    let f = std::fs::File::options().write(true).open(&tmp).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(10))
        .unwrap();
    drop(f);
    std::fs::rename(&tmp, &dst).unwrap();
    let status = client.wait().unwrap();
    let got = std::fs::read(&out).unwrap();
    // The old version's bytes, cut short: never the new one's after them.
    assert!(!status.success(), "a whole body of {} bytes", got.len());
    assert!(got.len() < old.len());
    assert!(
        got == old[..got.len()],
        "bytes that are not the old version's"
    );
    let log = e.nginx.log();
    assert!(
        log.iter().any(|l| l.ends_with(" 412")),
        "no slice was refused by If-Match: {log:#?}"
    );
    // The old version is dropped: the next request has the new one.
    let g = curl(&url, &[]);
    assert_eq!(g.status, 200);
    assert!(g.body == new, "the new version");
}

/// The 99th percentile of `ms`.
fn p99(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[(ms.len() * 99 / 100).min(ms.len() - 1)]
}

/// `n` keep-alive GETs of `path`, each one's milliseconds.
fn hits(srv: &Server, path: &str, n: usize, want: &[u8]) -> Vec<f64> {
    use std::io::{BufReader, Write};
    let s = srv.connect();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    (0..n)
        .map(|_| {
            let t0 = Instant::now();
            write!(w, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
            let resp = read_response(&mut r, false).unwrap();
            assert_eq!((resp.status, resp.body.as_slice()), (200, want));
            t0.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

#[test]
fn a_slow_origin_does_not_slow_the_clients_of_cached_files() {
    // Twelve 6 MiB objects behind nginx's 4 MB/s per connection: their
    // misses keep all eight fetch helpers (and their queue) busy for
    // seconds, a slice every quarter second each.
    let hot = random_bytes(64 << 10, 30);
    let big = random_bytes(6 * M as u64, 31);
    let names: Vec<String> = (0..12).map(|i| format!("slow/big{i}.bin")).collect();
    let mut files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &big[..])).collect();
    files.push(("hot.html", &hot));
    let Some(e) = Edge::start(&files, &[]) else {
        return;
    };
    let srv = &e.srv;
    assert_eq!(curl(&srv.url("/hot.html"), &[]).body, hot, "cached");
    let quiet = p99(hits(srv, "/hot.html", 300, &hot));
    let downloads: Vec<_> = names
        .iter()
        .map(|n| {
            let url = srv.url(&format!("/{n}"));
            std::thread::spawn(move || curl(&url, &[]).body.len())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let busy = p99(hits(srv, "/hot.html", 300, &hot));
    let in_flight = downloads.iter().filter(|d| !d.is_finished()).count();
    let sizes: Vec<usize> = downloads.into_iter().map(|d| d.join().unwrap()).collect();
    eprintln!(
        "cached file's p99: {quiet:.2} ms alone, {busy:.2} ms beside {in_flight} slow misses"
    );
    assert!(sizes.iter().all(|&s| s == big.len()), "{sizes:?}");
    assert_eq!(
        in_flight, 12,
        "the hits ran while every slow miss was in flight"
    );
    // A slice of a slow miss takes 250 ms; a hit that waited for one
    // (a helper, a lock) would show it.
    assert!(
        busy < quiet + 50.0,
        "p99 of a cached file {busy:.1} ms beside slow misses, {quiet:.1} ms alone"
    );
}

#[test]
fn a_full_cache_keeps_what_is_asked_for_over_what_is_asked_for_once() {
    // Two objects fill the cache, each asked for three times; then two
    // objects are asked for once each. Plain LRU would now hold the two
    // new ones and miss both old ones; spindle stores a newcomer on
    // probation, last in line (TinyLFU admission): while it is fetched
    // it takes the oldest object's place (the bound holds), and the next
    // newcomer pushes it out, not the other popular one.
    let metrics = format!("127.0.0.1:{}", free_port());
    let log_dir = tempfile::tempdir().unwrap();
    let access_log = log_dir.path().join("access.json");
    let files: Vec<(String, Vec<u8>)> = ["hot1", "hot2", "cold1", "cold2"]
        .iter()
        .zip(20u64..)
        .map(|(n, seed)| (n.to_string(), random_bytes(M as u64, seed)))
        .collect();
    let named: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    let extra = [
        "--cache-size",
        "2M",
        "--metrics",
        &metrics,
        "--access-log",
        access_log.to_str().unwrap(),
        "--log-format",
        "json",
    ];
    let Some(e) = Edge::start(&named, &extra) else {
        return;
    };
    let get = |i: usize| {
        let g = curl(&e.srv.url(&format!("/{}", files[i].0)), &[]);
        assert_eq!(g.status, 200, "{}", g.head);
        assert!(g.body == files[i].1, "{} byte for byte", files[i].0);
    };
    for i in [0, 1, 0, 1, 0, 1] {
        get(i);
    }
    get(2);
    get(3);
    get(1);
    get(2);
    let fetched = |name: &str| {
        e.nginx
            .log()
            .iter()
            .filter(|l| l.starts_with(&format!("GET /{name} ")))
            .count()
    };
    assert_eq!(fetched("hot2"), 1, "hot2 kept: {:#?}", e.nginx.log());
    assert_eq!(fetched("cold1"), 2, "cold1 pushed out by cold2");
    assert_eq!(fetched("hot1"), 1, "hot1 not asked for again");
    assert_eq!(
        cache_statuses(&access_log, 10)[6..],
        ["miss", "miss", "hit", "miss"]
    );
    let m = curl(&format!("http://{metrics}/metrics"), &[]);
    let text = String::from_utf8_lossy(&m.body);
    let line = "spindle_edge_probation_total 3";
    assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
}
