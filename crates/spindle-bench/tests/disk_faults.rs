//! Disk faults, served: every backend against a slowdisk mount that fails, hangs,
//! shortens and shrinks chosen files (issue 22). What a client must see:
//!
//! - a read that fails before any byte of the response is out: a 500, and the same
//!   connection goes on serving (io-uring, posix-aio and linux-aio-sendfile read the
//!   first chunk before they send the head). linux-sendfile sends the head first, by
//!   design: its client gets the head, a body cut short, and a closed connection;
//! - a file that ends early (a short read at the FUSE layer means end of file, or the
//!   file shrinks while it is sent): the file's own bytes, never others and never
//!   padding, and a closed connection if fewer than the Content-Length arrived; or,
//!   when the first read finds it short before anything is out, a 503 on a
//!   connection that goes on;
//! - a read that hangs: only its own client waits. A cached file on another
//!   connection keeps being answered at once, except on linux-sendfile, which blocks
//!   by design and serves as the control that shows this test can fail.
//!
//! The server is spindle itself (`spindle-bench __spindle`), the disk a real FUSE
//! mount (`spindle-bench slowdisk`), the clients raw TCP.

mod common;

use common::get;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Each server variant: a name (and its shrink file), the backend, its flags.
/// io-uring's first use of a file goes through the page cache or, once memory
/// is full, with O_DIRECT (`--first-miss auto`); both paths are named here, so
/// that neither depends on how full the machine's page cache happens to be.
const BACKENDS: [(&str, &str, &[&str]); 5] = [
    ("io-uring", "io-uring", &["--first-miss", "cache"]),
    ("io-uring+direct", "io-uring", &["--first-miss", "direct"]),
    ("posix-aio", "posix-aio", &[]),
    ("linux-aio-sendfile", "linux-aio-sendfile", &[]),
    ("linux-sendfile", "linux-sendfile", &[]),
];
/// A file of one read, and one of several chunks (512 KiB by default).
const SMALL: usize = 20_000;
const BIG: usize = 3 << 20;
/// Where a `shrink-*` file is cut once a read reaches it.
const SHRINK_AT: u64 = 1 << 20;
/// How long each read of `hang.bin` is held.
const HANG: Duration = Duration::from_millis(1500);
/// Longest wait for a cached file that still counts as "not held by the hung read".
/// Unblocked workers answer in well under a millisecond here; the linux-sendfile
/// control waits the whole hang.
const STALL: Duration = Duration::from_millis(100);

/// Random content, different for every `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; len];
    rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// A read fails with EIO before anything is sent (`/eio-*`), then a good file on the
/// same connection.
fn eio(addr: SocketAddr, backend: &str, path: &str, size: usize, good: &[u8]) {
    let mut s = connect(addr);
    let r = get(&mut s, path);
    if backend == "linux-sendfile" {
        // The head went before the read: the body stops short and the connection goes.
        assert_eq!(r.status, 200, "{backend} {path}: {}", r.head);
        assert_eq!(r.length, size);
        assert!(
            r.body.len() < size && r.closed,
            "{backend} {path}: a failed read must cut the body short and close ({} bytes, closed {})",
            r.body.len(),
            r.closed
        );
        s = connect(addr);
    } else {
        assert_eq!(
            r.status, 500,
            "{backend} {path}: a read that fails before the head is a 500: {}",
            r.head
        );
        assert!(
            !r.closed,
            "{backend} {path}: the 500 keeps the connection: {}",
            r.head
        );
        assert_eq!(r.body.len(), r.length);
    }
    let ok = get(&mut s, "/ok-small.bin");
    assert_eq!(ok.status, 200, "{backend}: after {path}: {}", ok.head);
    assert!(
        ok.body == good,
        "{backend}: after {path}: the good file's bytes"
    );
}

/// A file that ends before its Content-Length: a correct prefix, then a close.
fn ends_early(addr: SocketAddr, backend: &str, path: &str, content: &[u8], at_most: usize) {
    let mut s = connect(addr);
    let r = get(&mut s, path);
    if r.status == 503 {
        // Found before any byte of the response was out (a backend that reads
        // before it sends the head): the changed-file answer, and the
        // connection goes on.
        assert_ne!(backend, "linux-sendfile", "it sends the head first");
        assert!(!r.closed, "{backend} {path}: the 503 keeps the connection");
        assert_eq!(get(&mut s, "/ok-small.bin").status, 200, "{backend}");
        return;
    }
    assert_eq!(r.status, 200, "{backend} {path}: {}", r.head);
    assert_eq!(r.length, content.len());
    assert!(
        r.body[..] == content[..r.body.len()],
        "{backend} {path}: every byte sent is the file's ({} sent)",
        r.body.len()
    );
    assert!(
        r.body.len() <= at_most,
        "{backend} {path}: {} bytes sent where the file had at most {at_most}",
        r.body.len()
    );
    if r.body.len() < r.length {
        assert!(
            r.closed,
            "{backend} {path}: a body cut short must close the connection"
        );
    }
}

/// `/hang.bin` in flight on one connection while a cached file is fetched every 20 ms
/// on another: the slowest of those fetches.
fn hang(addr: SocketAddr, backend: &str, hung: &[u8], good: &[u8]) -> (Duration, usize) {
    let mut small = connect(addr);
    for _ in 0..2 {
        assert!(get(&mut small, "/ok-small.bin").body == good);
    }
    let download = std::thread::spawn(move || {
        let mut s = connect(addr);
        let t = Instant::now();
        (get(&mut s, "/hang.bin"), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut worst = Duration::ZERO;
    let mut fetches = 0;
    while !download.is_finished() {
        let t = Instant::now();
        let r = get(&mut small, "/ok-small.bin");
        worst = worst.max(t.elapsed());
        assert!(r.status == 200 && r.body == good, "{backend}: {}", r.head);
        fetches += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let (r, took) = download.join().unwrap();
    assert_eq!(
        r.status, 200,
        "{backend}: the hung read's response: {}",
        r.head
    );
    assert!(
        r.body == hung,
        "{backend}: the hung read's bytes are the file's"
    );
    assert!(
        took >= HANG,
        "{backend}: the hung read took {took:?}: the fault was not injected"
    );
    (worst, fetches)
}

#[test]
fn every_backend_answers_disk_faults_without_losing_a_byte() {
    let Some((_tmp, backing, mnt)) = common::fuse_dirs() else {
        return;
    };
    let good = pattern(1, SMALL);
    let big = pattern(2, BIG);
    let hung = pattern(3, 100_000);
    let short = pattern(4, 300_000);
    std::fs::write(backing.join("ok-small.bin"), &good).unwrap();
    std::fs::write(backing.join("eio-small.bin"), pattern(5, SMALL)).unwrap();
    std::fs::write(backing.join("eio-big.bin"), &big).unwrap();
    std::fs::write(backing.join("hang.bin"), &hung).unwrap();
    std::fs::write(backing.join("short.bin"), &short).unwrap();
    // One file per backend: a shrink is for good.
    for (b, _, _) in BACKENDS {
        std::fs::write(backing.join(format!("shrink-{b}.bin")), &big).unwrap();
    }

    let model = slowdisk::ModelArgs {
        seek_ms: 1.0,
        seek_min_ms: 0.1,
        rpm: 60_000.0,
        mbps: 1000.0,
        ..Default::default()
    };
    let faults = slowdisk::FaultArgs {
        fail_files: vec!["eio-small.bin".into(), "eio-big.bin".into()],
        hang_files: vec!["hang.bin".into()],
        hang_secs: HANG.as_secs_f64(),
        short_files: vec!["short.bin".into()],
        shrink_files: BACKENDS
            .iter()
            .map(|(b, _, _)| format!("shrink-{b}.bin").into())
            .collect(),
        shrink_after: Some(SHRINK_AT),
        ..Default::default()
    };
    let disk = common::Mounted::new(&backing, &mnt, model, faults);
    let root = disk.root().to_path_buf();

    for (b, backend, flags) in BACKENDS {
        let (_server, addr) = common::spindle(backend, &root, flags);
        eio(addr, b, "/eio-small.bin", SMALL, &good);
        eio(addr, b, "/eio-big.bin", BIG, &good);
        // A FUSE read that returns fewer bytes than asked is the end of the file to
        // the kernel; a backend may also read on past it. Either way: the file's bytes.
        ends_early(addr, b, "/short.bin", &short, short.len());
        // The file shrinks once a read reaches SHRINK_AT; a read may return up to
        // one 512 KiB chunk past it first.
        ends_early(
            addr,
            b,
            &format!("/shrink-{b}.bin"),
            &big,
            SHRINK_AT as usize + (512 << 10),
        );
        let (worst, fetches) = hang(addr, b, &hung, &good);
        eprintln!(
            "{b}: {fetches} cached fetches during a {HANG:?} hung read, the slowest {worst:?}"
        );
        if b == "linux-sendfile" {
            assert!(
                worst >= HANG / 2,
                "linux-sendfile blocks on the hung read by design, so a cached fetch should have waited; the slowest took {worst:?}"
            );
        } else {
            assert!(fetches >= 20, "{b}: only {fetches} fetches during the hang");
            assert!(
                worst < STALL,
                "{b}: a cached fetch waited {worst:?} behind another client's hung read"
            );
        }
    }
}
