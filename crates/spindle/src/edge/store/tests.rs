//! The store against a temporary directory: slices, restarts and crashes,
//! pass-through, the bound and admission.

use super::*;
use spindle_core::edge::meta::{Freshness, Version};
use spindle_core::edge::slice::SLICE_SIZE;

fn meta(length: u64, etag: &str) -> Meta {
    Meta {
        version: Version {
            length,
            etag: Some(etag.into()),
            last_modified: None,
        },
        fields: vec![("content-type".into(), "video/mp4".into())],
        fetched: 1_764_000_000,
        freshness: Freshness {
            store: true,
            lifetime: 60,
            stale_if_error: 0,
        },
    }
}

fn slice_bytes(obj: &Object, i: u64) -> Vec<u8> {
    let b = slice::bytes(i, obj.length());
    (b.start..b.end).map(|x| (x * 7 + i) as u8).collect()
}

#[test]
fn a_pass_through_object_lives_in_memory_and_frees_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 1 << 30).unwrap();
    let obj = store
        .pass_through(b"/live", meta(3 * SLICE_SIZE + 5, "\"p\""))
        .unwrap();
    let sc = obj.scratch.as_ref().unwrap();
    for i in 0..4 {
        assert!(store.put(&obj, i, &slice_bytes(&obj, i)).unwrap());
        assert!(obj.has(i));
    }
    assert_eq!(store.scratch_bytes(), 3 * SLICE_SIZE + 5);
    assert_eq!(store.bytes(), 0, "nothing in the cache");
    assert!(store.get(b"/live").is_none(), "never indexed");
    let read = |off: u64| {
        let mut b = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(
            &std::fs::File::from(sc.open().unwrap()),
            &mut b,
            off,
        )
        .unwrap();
        b[0]
    };
    // Two readers: nothing is freed under the other's feet.
    sc.add_readers(2);
    obj.sent_below(2 * SLICE_SIZE + 10);
    assert_eq!(store.scratch_bytes(), 3 * SLICE_SIZE + 5);
    assert_eq!(read(5), slice_bytes(&obj, 0)[5]);
    // One: the whole slices it sent go.
    sc.leave();
    obj.sent_below(2 * SLICE_SIZE + 10);
    assert_eq!(store.scratch_bytes(), SLICE_SIZE + 5);
    assert_eq!(read(5), 0, "punched");
    assert_eq!(read(2 * SLICE_SIZE + 10), slice_bytes(&obj, 2)[10]);
    obj.sent_below(3 * SLICE_SIZE + 5);
    assert_eq!(store.scratch_bytes(), 0, "all sent");
    sc.leave();
    drop(obj);
    assert_eq!(store.scratch_bytes(), 0);
    // Dropped unsent, its bytes go with it.
    let other = store.pass_through(b"/x", meta(10, "\"x\"")).unwrap();
    store.put(&other, 0, &slice_bytes(&other, 0)).unwrap();
    assert_eq!(store.scratch_bytes(), 10);
    drop(other);
    assert_eq!(store.scratch_bytes(), 0);
    assert_eq!(store.counters.passed.load(Ordering::Relaxed), 2);
}

#[test]
fn slices_survive_a_restart_and_what_a_crash_left_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let len = 2 * SLICE_SIZE + 10;
    {
        let s = Store::open(dir.path(), 1 << 30).unwrap();
        let o = s.begin(b"/v.mp4", meta(len, "\"a\"")).unwrap();
        assert_eq!(o.first_missing(0..len), Some(0));
        s.put(&o, 2, &slice_bytes(&o, 2)).unwrap();
        s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
        assert_eq!(o.first_missing(0..len), Some(1));
        assert_eq!(o.first_missing(len - 5..len), None);
        assert_eq!(s.bytes(), SLICE_SIZE + 10);
    }
    // A crash's leftovers: a temporary file, a data file with no record.
    let sub = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(sub.join(".tmp-1-x.p"), b"half").unwrap();
    std::fs::write(sub.join(format!("{}.99.d", "f".repeat(32))), b"x").unwrap();
    let s = Store::open(dir.path(), 1 << 30).unwrap();
    let o = s.get(b"/v.mp4").expect("indexed again");
    assert!(o.has(0) && !o.has(1) && o.has(2));
    assert_eq!(s.bytes(), SLICE_SIZE + 10);
    let data = std::fs::read(dir.path().join(o.data_path())).unwrap();
    assert_eq!(data[..SLICE_SIZE as usize], slice_bytes(&o, 0)[..]);
    let names: Vec<_> = std::fs::read_dir(&sub)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // A new version gets new files; the old ones go.
    let o2 = s.begin(b"/v.mp4", meta(len, "\"b\"")).unwrap();
    assert!(o2.vid > o.vid && !o2.has(0));
    assert!(!dir.path().join(o.data_path()).exists());
    // A slice of the replaced version is not stored.
    assert!(!s.put(&o, 1, &slice_bytes(&o, 1)).unwrap());
    assert!(!o.has(1));
    assert_eq!(s.bytes(), 0);
}

#[test]
fn a_torn_record_is_a_miss_and_its_files_go() {
    let dir = tempfile::tempdir().unwrap();
    let p = {
        let s = Store::open(dir.path(), 1 << 30).unwrap();
        let o = s.begin(b"/a", meta(10, "\"a\"")).unwrap();
        s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
        dir.path().join(file_path(&o.key, o.vid, 'm'))
    };
    let t = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, &t[..t.len() / 2]).unwrap();
    let s = Store::open(dir.path(), 1 << 30).unwrap();
    assert!(s.get(b"/a").is_none());
    let left: usize = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert_eq!(left, 0);
}

#[test]
fn the_least_recently_used_object_goes_first_past_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), 2 * SLICE_SIZE).unwrap();
    let mut data = Vec::new();
    for p in [&b"/1"[..], b"/2"] {
        let o = s.begin(p, meta(SLICE_SIZE, "\"x\"")).unwrap();
        s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
        data.push(o.data_path());
    }
    assert!(s.get(b"/1").is_some()); // now /2 is the oldest
    let o = s.begin(b"/3", meta(SLICE_SIZE, "\"x\"")).unwrap();
    s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
    assert!(s.get(b"/1").is_some() && s.get(b"/3").is_some());
    assert!(s.get(b"/2").is_none());
    assert!(!dir.path().join(&data[1]).exists());
    assert_eq!(s.bytes(), 2 * SLICE_SIZE);
    assert_eq!(s.counters.evictions.load(Ordering::Relaxed), 1);
    // An object a response still reads is not dropped under it: the
    // bound waits until it is let go.
    let held = s.get(b"/1").unwrap(); // and the oldest now is /3
    drop(o);
    let (four, five) = (
        s.begin(b"/4", meta(SLICE_SIZE, "\"x\"")).unwrap(),
        s.begin(b"/5", meta(SLICE_SIZE, "\"x\"")).unwrap(),
    );
    s.put(&four, 0, &slice_bytes(&four, 0)).unwrap();
    assert!(s.get(b"/3").is_none(), "the idle one goes");
    assert!(s.get(b"/1").is_some(), "the held one stays");
    s.put(&five, 0, &slice_bytes(&five, 0)).unwrap();
    assert_eq!(s.bytes(), 3 * SLICE_SIZE, "over the bound: all are held");
    drop((held, four, five));
    let six = s.begin(b"/6", meta(SLICE_SIZE, "\"x\"")).unwrap();
    s.put(&six, 0, &slice_bytes(&six, 0)).unwrap();
    assert_eq!(s.bytes(), 2 * SLICE_SIZE, "back within it once let go");
    drop(six);
    // Reopened with a smaller bound: the oldest goes at start.
    drop(s);
    let s = Store::open(dir.path(), SLICE_SIZE).unwrap();
    assert_eq!(s.bytes(), SLICE_SIZE);
}

#[test]
fn past_the_bound_only_an_object_asked_for_more_often_goes_in() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), 2 * SLICE_SIZE).unwrap();
    for p in [&b"/1"[..], b"/2"] {
        assert!(s.get(p).is_none(), "a miss, counted");
        assert!(s.admits(p, SLICE_SIZE), "room for it");
        let o = s.begin(p, meta(SLICE_SIZE, "\"x\"")).unwrap();
        s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
    }
    // Each asked for twice more: /1 is the oldest, at 3 requests.
    for p in [&b"/1"[..], b"/2", b"/1", b"/2"] {
        assert!(s.get(p).is_some());
    }
    // A name asked for once would push out one asked for three times.
    assert!(s.get(b"/new").is_none());
    assert!(!s.admits(b"/new", SLICE_SIZE));
    assert!(
        !s.admits(b"/new", 1),
        "any byte over the bound needs a victim"
    );
    // Asked for four times, it wins over /1 (three); for twice the room
    // it would also need /2 (three) to go, which it beats too.
    for _ in 0..3 {
        assert!(s.get(b"/new").is_none());
    }
    assert!(s.admits(b"/new", SLICE_SIZE));
    assert!(s.admits(b"/new", 2 * SLICE_SIZE));
    // An object a response holds is never a victim: with /1 (3, the
    // oldest) held, /2 is judged instead, at 5 now, and wins.
    assert!(s.get(b"/2").is_some() && s.get(b"/2").is_some());
    let held = s.peek(b"/1").unwrap();
    assert!(!s.admits(b"/new", SLICE_SIZE));
    drop(held);
    assert!(s.admits(b"/new", SLICE_SIZE));
    // A tie keeps what is in: /1 at 5 is now newer than /2 at 5.
    assert!(s.get(b"/1").is_some() && s.get(b"/1").is_some());
    assert!(s.get(b"/new").is_none());
    assert!(!s.admits(b"/new", SLICE_SIZE), "5 against 5");
    // Stored all the same, last in line. While it is fetched its bytes
    // push out the oldest idle object (/2: the bound holds); once it
    // is let go, the next object in pushes it out, not /1.
    let n = s.begin(b"/new", meta(SLICE_SIZE, "\"x\"")).unwrap();
    s.put(&n, 0, &slice_bytes(&n, 0)).unwrap();
    assert!(s.peek(b"/2").is_none() && s.peek(b"/1").is_some());
    drop(n);
    assert_eq!(s.counters.probation.load(Ordering::Relaxed), 1);
    assert!(s.get(b"/next").is_none());
    let o = s.begin(b"/next", meta(SLICE_SIZE, "\"x\"")).unwrap();
    s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
    drop(o);
    assert!(s.peek(b"/new").is_none(), "probation goes first");
    assert!(s.peek(b"/1").is_some() && s.peek(b"/next").is_some());
    // One asked for again while on probation moves to the front: the
    // next one in pushes out /1 instead.
    assert!(s.get(b"/next").is_some());
    let o = s.begin(b"/third", meta(SLICE_SIZE, "\"x\"")).unwrap();
    s.put(&o, 0, &slice_bytes(&o, 0)).unwrap();
    drop(o);
    assert!(s.peek(b"/next").is_some() && s.peek(b"/1").is_none());
    assert_eq!(s.bytes(), 2 * SLICE_SIZE);
}
