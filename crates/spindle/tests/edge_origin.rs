//! The edge's origin client (`spindle::edge::fetch`) against a real origin,
//! Debian's nginx: every slice of a file is its bytes; a file replaced at
//! the origin between two slices is `Changed`, never spliced; an empty
//! file, a name that needs encoding, a 404 and a 503 are answered as
//! such; an origin that is down is failed over to the next, and all of
//! them down is `Unreachable`. Through the fetcher's helpers and the
//! store: 200 requests for one uncached slice are one origin request, and
//! the object stored is the file.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{free_port, nginx};
use spindle::edge::fetch::{Answer, FetchError, Origin, OriginUrl, Slice};
use spindle::edge::fetcher::{Done, Fetcher, Landed, Policy, Want};
use spindle::edge::store::Store;
use spindle::jobs::Mailbox;
use spindle_core::edge::slice::{self, SLICE_SIZE};

fn origin(urls: &[String]) -> Origin {
    let urls = urls.iter().map(|u| OriginUrl::parse(u).unwrap()).collect();
    Origin::new(urls, &[], None)
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn slice_of(a: Answer) -> Slice {
    match a {
        Answer::Slice(s) => s,
        other => panic!("not a slice: {other:?}"),
    }
}

/// Every slice of `path`, as the edge would fetch them: the first fixes
/// the version, the rest are pinned to it.
fn fetch_all(o: &Origin, path: &str) -> Vec<u8> {
    let first = slice_of(o.slice(path.as_bytes(), 0, None, now()).unwrap());
    let v = first.version.clone();
    let mut body = first.bytes;
    for i in 1..slice::count(v.length) {
        let s = slice_of(o.slice(path.as_bytes(), i, Some(&v), now()).unwrap());
        assert_eq!(s.version, v);
        body.extend_from_slice(&s.bytes);
    }
    body
}

fn write(root: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = root.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, data).unwrap();
    p
}

#[test]
fn slices_from_nginx_are_the_files_bytes() {
    let root = tempfile::tempdir().unwrap();
    let big = bytes(3 * SLICE_SIZE as usize + 12_345, 1);
    write(root.path(), "video.mp4", &big);
    write(root.path(), "small.txt", b"hello, edge\n");
    write(root.path(), "empty", b"");
    write(
        root.path(),
        "dir/a b+c%.bin",
        &big[..SLICE_SIZE as usize + 1],
    );
    let Some(n) = nginx(root.path()) else { return };
    let o = origin(&[format!("http://127.0.0.1:{}", n.port)]);

    let first = slice_of(o.slice(b"/video.mp4", 0, None, now()).unwrap());
    assert_eq!(first.version.length, big.len() as u64);
    assert!(first.version.etag.is_some() && first.version.last_modified.is_some());
    assert_eq!(first.field("content-type"), Some("video/mp4"));
    assert_eq!(first.bytes.len() as u64, SLICE_SIZE);
    assert_eq!(fetch_all(&o, "/video.mp4"), big);
    // A seek: only the last slice.
    let last = slice::count(big.len() as u64) - 1;
    let s = slice_of(
        o.slice(b"/video.mp4", last, Some(&first.version), now())
            .unwrap(),
    );
    assert_eq!(s.bytes, big[(last * SLICE_SIZE) as usize..]);

    assert_eq!(fetch_all(&o, "/small.txt"), b"hello, edge\n");
    assert_eq!(
        fetch_all(&o, "/dir/a b+c%.bin"),
        big[..SLICE_SIZE as usize + 1]
    );
    let e = slice_of(o.slice(b"/empty", 0, None, now()).unwrap());
    assert_eq!((e.version.length, e.bytes.len()), (0, 0));
    assert_eq!(o.slice(b"/nope", 0, None, now()), Ok(Answer::NotFound));
    assert_eq!(
        o.slice(b"/down", 0, None, now()),
        Err(FetchError::Status(503))
    );
}

#[test]
fn a_file_replaced_at_the_origin_is_changed_never_spliced() {
    let root = tempfile::tempdir().unwrap();
    let old = bytes(2 * SLICE_SIZE as usize, 2);
    let p = write(root.path(), "pkg.deb", &old);
    let Some(n) = nginx(root.path()) else { return };
    let o = origin(&[format!("http://127.0.0.1:{}", n.port)]);
    let first = slice_of(o.slice(b"/pkg.deb", 0, None, now()).unwrap());

    // The same length, other bytes, another second (nginx's ETag is the
    // mtime in seconds and the length).
    std::fs::write(&p, bytes(old.len(), 3)).unwrap();
    let f = std::fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    assert_eq!(
        o.slice(b"/pkg.deb", 1, Some(&first.version), now()),
        Ok(Answer::Changed)
    );
    // Shorter now: the pinned range is past its end.
    std::fs::write(&p, b"tiny").unwrap();
    assert_eq!(
        o.slice(b"/pkg.deb", 1, Some(&first.version), now()),
        Ok(Answer::Changed)
    );
}

#[test]
fn a_down_origin_is_failed_over_and_all_down_is_unreachable() {
    let root = tempfile::tempdir().unwrap();
    write(root.path(), "f", b"from the second origin");
    let Some(n) = nginx(root.path()) else { return };
    let dead = format!("http://127.0.0.1:{}", free_port());
    let o = origin(&[dead.clone(), format!("http://127.0.0.1:{}", n.port)]);
    assert_eq!(fetch_all(&o, "/f"), b"from the second origin");
    // A 503 from the first origin also moves on to the next.
    let o = origin(&[
        format!("http://127.0.0.1:{}/down", n.port),
        format!("http://127.0.0.1:{}", n.port),
    ]);
    assert_eq!(fetch_all(&o, "/f"), b"from the second origin");
    let o = origin(&[dead]);
    match o.slice(b"/f", 0, None, now()) {
        Err(FetchError::Unreachable(e)) => assert!(!e.is_empty()),
        other => panic!("{other:?}"),
    }
}

/// Waits for `n` answers in `mb`.
fn answers(mb: &Mailbox<Done<usize>>, n: usize) -> Vec<Done<usize>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(mb.take());
        assert!(Instant::now() < deadline, "{} of {n} answers", got.len());
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}

#[test]
fn two_hundred_wants_of_one_slice_are_one_origin_request() {
    let root = tempfile::tempdir().unwrap();
    let big = bytes(5 * SLICE_SIZE as usize + 777, 4);
    // Sent at 4 MB/s: each slice takes a quarter of a second, longer than
    // every want below takes to arrive.
    write(root.path(), "slow/big.iso", &big);
    let Some(n) = nginx(root.path()) else { return };
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(cache.path(), 1 << 30).unwrap());
    let policy = Policy {
        default_ttl: 600,
        stale_default: 0,
        stale_max: 3600,
    };
    let f: Arc<Fetcher<usize>> = Fetcher::start(
        origin(&[format!("http://127.0.0.1:{}", n.port)]),
        store.clone(),
        policy,
        4,
    )
    .unwrap();
    let mb = Arc::new(Mailbox::new(Arc::new(spindle::sys::new_eventfd().unwrap())));
    // 200 requests for an object nobody has fetched, from 8 threads.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (f, mb) = (f.clone(), mb.clone());
            std::thread::spawn(move || {
                for i in 0..25 {
                    let w = Want::first(b"/slow/big.iso");
                    assert!(f.want(w, &mb, t * 25 + i));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let got = answers(&mb, 200);
    let objs: Vec<_> = got
        .iter()
        .map(|d| match &d.landed {
            Landed::Stored(o) => o.clone(),
            other => panic!("{other}"),
        })
        .collect();
    assert!(objs.iter().all(|o| o.vid == objs[0].vid));
    let obj = objs[0].clone();
    // Then every other slice, each wanted 40 times at once.
    let slices = slice::count(big.len() as u64);
    for i in 1..slices {
        for who in 0..40 {
            let w = Want::slice(b"/slow/big.iso", i, &obj);
            assert!(f.want(w, &mb, who));
        }
    }
    let got = answers(&mb, 40 * (slices as usize - 1));
    assert!(got.iter().all(|d| matches!(d.landed, Landed::Stored(_))));
    assert_eq!(obj.first_missing(0..big.len() as u64), None);
    let data = std::fs::read(cache.path().join(obj.data_path())).unwrap();
    assert!(data == big, "the stored object is not the file");
    // The origin saw each slice once.
    let log = n.log();
    assert_eq!(log.len() as u64, slices, "{log:#?}");
    for i in 0..slices {
        let r = if i == 0 {
            format!("bytes=0-{}", SLICE_SIZE - 1)
        } else {
            slice::range_field(i, big.len() as u64)
        };
        assert_eq!(
            log.iter().filter(|l| l.contains(&r)).count(),
            1,
            "{r}: {log:#?}"
        );
    }
    let c = f.counters();
    assert_eq!(c.fetches.load(Ordering::Relaxed), slices);
    assert!(c.coalesced.load(Ordering::Relaxed) >= 199 + 39 * (slices - 1));
}
