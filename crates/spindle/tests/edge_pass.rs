//! Pass-through at the edge (`edge/scratch.rs`): what the cache may not
//! or cannot keep is still served from the origin, byte for byte, and is
//! not kept. An origin's `no-store` and `private` answers (Debian's nginx
//! adds the field under `/nostore/` and `/private/`), on every backend and
//! over HTTP/2, ranges included; and every object while the cache's disk
//! is full, with one warning.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::edge::*;
use common::*;

/// A metric's value from the metrics listener at `addr`.
fn metric(addr: &str, name: &str) -> f64 {
    let m = curl(&format!("http://{addr}/metrics"), &[]);
    String::from_utf8_lossy(&m.body)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

/// Until the pass-through slices held in memory are none (each is let go
/// when its response's connection is done), for at most 5 s.
fn pass_bytes_go(addr: &str) {
    let t0 = Instant::now();
    while metric(addr, "spindle_edge_pass_bytes") != 0.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "pass-through bytes still held: {}",
            metric(addr, "spindle_edge_pass_bytes")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The data files the cache directory holds (`KK/KEY.VID.d`).
fn stored(cache: &Path) -> usize {
    std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .filter(|f| f.path().extension().is_some_and(|x| x == "d"))
        .count()
}

fn asked(n: &Nginx, path: &str) -> usize {
    n.log()
        .iter()
        .filter(|l| l.contains(&format!(" {path} ")))
        .count()
}

#[test]
fn no_store_and_private_answers_pass_through_on_every_backend() {
    let origin_root = tempfile::tempdir().unwrap();
    let live = b"{\"price\": 42, \"at\": \"now\"}\n".repeat(80);
    let big = random_bytes(5 * M as u64 + 3, 21);
    write(origin_root.path(), "nostore/live.json", &live);
    write(origin_root.path(), "private/big.bin", &big);
    let Some(n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    for backend in backends() {
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let metrics = format!("127.0.0.1:{}", free_port());
        let mut args = edge_args(&origin, cache.path().to_str().unwrap());
        args.extend(["--metrics", &metrics]);
        let srv = Server::start(&backend, root.path(), &args);
        let before = asked(&n, "/nostore/live.json");
        for _ in 0..2 {
            let j = curl(&srv.url("/nostore/live.json"), &[]);
            assert_eq!(j.status, 200, "{backend}: {}", j.head);
            assert!(j.body == live, "{backend}: not the origin's bytes");
            assert_eq!(j.field("cache-control"), Some("no-store"), "{backend}");
        }
        assert_eq!(
            asked(&n, "/nostore/live.json") - before,
            2,
            "{backend}: a no-store answer is asked of the origin every time"
        );
        let g = curl(&srv.url("/private/big.bin"), &[]);
        assert_eq!(g.status, 200, "{backend}: {}", g.head);
        assert!(
            g.body == big,
            "{backend}: the private body is not the origin's"
        );
        assert_eq!(g.field("cache-control"), Some("private"), "{backend}");
        let at = 3 * M + 77;
        let r = curl(
            &srv.url("/private/big.bin"),
            &["-r", &format!("{at}-{}", at + 999)],
        );
        assert_eq!(r.status, 206, "{backend}: {}", r.head);
        assert_eq!(r.body, big[at..at + 1000], "{backend}");
        assert_eq!(stored(cache.path()), 0, "{backend}: nothing is kept");
        assert_eq!(
            metric(&metrics, "spindle_edge_passed_total"),
            4.0,
            "{backend}"
        );
        pass_bytes_go(&metrics);
    }
}

#[test]
fn a_private_answer_passes_through_over_http2() {
    let origin_root = tempfile::tempdir().unwrap();
    let big = random_bytes(3 * M as u64 + 11, 22);
    write(origin_root.path(), "private/h2.bin", &big);
    let Some(n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    for backend in backends_with(spindle::config::Cap::Http2) {
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let (_srv, port) = start_with_https(
            &backend,
            root.path(),
            None,
            &edge_args(&origin, cache.path().to_str().unwrap()),
        );
        let url = format!("https://127.0.0.1:{port}/private/h2.bin");
        let g = curl(&url, &["--http2"]);
        assert!(g.head.starts_with("HTTP/2"), "{backend}: {}", g.head);
        assert!(g.body == big, "{backend}: body");
        let r = curl(&url, &["--http2", "-r", "2097150-2097160"]);
        assert_eq!(r.body, big[2_097_150..2_097_161], "{backend}");
        assert_eq!(stored(cache.path()), 0, "{backend}: nothing is kept");
    }
}

#[test]
fn a_full_cache_disk_serves_from_the_origin_with_one_warning() {
    let origin_root = tempfile::tempdir().unwrap();
    let big = random_bytes(3 * M as u64 + 5, 23);
    write(origin_root.path(), "pool/big.deb", &big);
    write(origin_root.path(), "index.txt", b"the index\n");
    let Some(n) = nginx(origin_root.path()) else {
        return;
    };
    let origin = format!("http://127.0.0.1:{}", n.port);
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let _full = FullDisk::mount(cache.path());
    let metrics = format!("127.0.0.1:{}", free_port());
    let log_dir = tempfile::tempdir().unwrap();
    let access_log = log_dir.path().join("access.json");
    let mut args = edge_args(&origin, cache.path().to_str().unwrap());
    args.extend(["--metrics", &metrics]);
    args.extend(["--access-log", access_log.to_str().unwrap()]);
    args.extend(["--log-format", "json"]);
    let srv = Server::start("io-uring", root.path(), &args);
    for _ in 0..3 {
        let g = curl(&srv.url("/pool/big.deb"), &[]);
        assert_eq!(g.status, 200, "{}", g.head);
        assert!(g.body == big, "not the origin's bytes");
        let i = curl(&srv.url("/index.txt"), &[]);
        assert_eq!((i.status, i.body.as_slice()), (200, &b"the index\n"[..]));
    }
    let r = curl(&srv.url("/pool/big.deb"), &["-r", "1048570-1048589"]);
    assert_eq!(
        (r.status, r.body.as_slice()),
        (206, &big[1_048_570..1_048_590])
    );
    assert_eq!(asked(&n, "/index.txt"), 3, "each asked of the origin");
    assert_eq!(metric(&metrics, "spindle_edge_passed_total"), 7.0);
    let warned = srv
        .stderr()
        .lines()
        .filter(|l| l.contains("cannot store"))
        .count();
    assert_eq!(warned, 1, "{}", srv.stderr());
    pass_bytes_go(&metrics);
    // The access log names each response's cache status: pass.
    let lines = wait_log_lines(&access_log, 7);
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["cache"].as_str(), Some("pass"), "{l}");
    }
}
