//! What O_DIRECT does on the mount: it is accepted, every read goes to the daemon (the
//! page cache is bypassed), and native AIO (io_submit) of O_DIRECT reads is truly
//! asynchronous because the daemon asks for FUSE_ASYNC_DIO. The linux-aio-sendfile
//! backend relies on all three.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use slowdisk::ModelArgs;

const FILE: usize = 100 * 1024;
const ALIGN: usize = 4096;

/// A heap buffer of `len` bytes aligned to `ALIGN` (O_DIRECT wants aligned buffers on
/// most file systems; FUSE does not, but the backend will use aligned ones).
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + ALIGN];
        let off = (ALIGN - raw.as_ptr() as usize % ALIGN) % ALIGN;
        Aligned { raw, off, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
    fn as_slice(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
}

fn open_direct(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap()
}

#[test]
fn o_direct_bypasses_the_page_cache_and_aio_on_it_is_asynchronous() {
    if common::skip() {
        return;
    }
    let _g = common::serial();
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let backing = tmp.path().join("b");
    let rels = common::make_files(&backing, 4, 10, FILE);
    let disk = common::spawn(
        &backing,
        &tmp.path().join("m"),
        &tmp.path().join("s.json"),
        ModelArgs::default(),
    );
    let m = disk.mount_point().to_path_buf();

    // Buffered: the second read of a file is served by the page cache.
    let s0 = disk.snapshot().unwrap();
    for _ in 0..2 {
        assert_eq!(
            std::fs::read(m.join(&rels[0])).unwrap(),
            common::pattern(0, FILE)
        );
    }
    let s1 = disk.snapshot().unwrap();
    let buffered = s1.since(&s0).requests;
    // O_DIRECT: every read reaches the daemon.
    let f = open_direct(&m.join(&rels[1]));
    let mut buf = Aligned::new(FILE);
    for _ in 0..3 {
        assert_eq!(f.read_at(buf.as_mut(), 0).unwrap(), FILE);
        assert!(buf.as_slice() == common::pattern(1, FILE).as_slice());
    }
    // Unaligned offsets and lengths work too.
    let mut small = [0u8; 1000];
    assert_eq!(f.read_at(&mut small, 333).unwrap(), 1000);
    assert_eq!(&small[..], &common::pattern(1, FILE)[333..1333]);
    let s2 = disk.snapshot().unwrap();
    let direct = s2.since(&s1).requests;
    eprintln!("buffered: {buffered} FUSE reads for 2 reads of one file; O_DIRECT: {direct} for 4");
    assert_eq!(buffered, 1);
    assert!(direct >= 4, "{direct}");

    // Native AIO: submit 16 O_DIRECT reads of distinct files at once. io_submit must
    // return long before the reads are done (16 seek-bound reads on 2 spindles).
    const N: usize = 16;
    let files: Vec<std::fs::File> = (0..N)
        .map(|i| open_direct(&m.join(&rels[2 + 2 * i])))
        .collect();
    let mut bufs: Vec<Aligned> = (0..N).map(|_| Aligned::new(FILE)).collect();
    let ctx = linux_aio::Context::new(N as u32).unwrap();
    let mut iocbs: Vec<linux_aio::Iocb> = files
        .iter()
        .zip(bufs.iter_mut())
        .enumerate()
        .map(|(i, (f, b))| {
            linux_aio::Iocb::pread(f.as_raw_fd(), b.as_mut().as_mut_ptr(), FILE, 0, i as u64)
        })
        .collect();
    let t0 = Instant::now();
    // SAFETY: the buffers in `bufs` are neither moved nor touched until every
    // completion has been reaped below (or `ctx` is dropped, which waits for them).
    let submitted = unsafe { ctx.submit(&mut iocbs) }.unwrap();
    let submit_time = t0.elapsed();
    assert_eq!(submitted, N);
    let mut events = vec![linux_aio::IoEvent::default(); N];
    let mut got = 0;
    while got < N {
        let evs = ctx
            .get_events(1, &mut events, Some(Duration::from_secs(10)))
            .unwrap();
        assert!(!evs.is_empty(), "AIO reads did not complete");
        for ev in evs {
            assert_eq!(ev.res, FILE as i64, "read {} failed: {}", ev.data, ev.res);
        }
        got += evs.len();
    }
    let done_time = t0.elapsed();
    for (i, b) in bufs.iter().enumerate() {
        assert!(
            b.as_slice() == common::pattern(2 + 2 * i, FILE).as_slice(),
            "file {i}"
        );
    }
    eprintln!("io_submit of {N} O_DIRECT reads took {submit_time:?}; all done after {done_time:?}");
    assert!(
        done_time > Duration::from_millis(40),
        "{done_time:?}: the reads skipped the model"
    );
    assert!(
        submit_time * 4 < done_time,
        "io_submit blocked for {submit_time:?} of {done_time:?}"
    );
    disk.stop().unwrap();
}

/// Buffered reads through io_uring: FUSE files do not take IOCB_NOWAIT, so io_uring hands
/// them to its io-wq workers, and several reach the daemon at once. The submission itself
/// must not wait for the disk.
#[test]
fn io_uring_buffered_reads_on_the_mount_run_concurrently() {
    use io_uring::{opcode, types, IoUring};
    if common::skip() {
        return;
    }
    let _g = common::serial();
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let backing = tmp.path().join("b");
    let rels = common::make_files(&backing, 4, 10, FILE);
    let model = ModelArgs::default();
    let one = model.random_read_s(FILE as u64);
    let disk = common::spawn(
        &backing,
        &tmp.path().join("m"),
        &tmp.path().join("s.json"),
        model,
    );
    let m = disk.mount_point().to_path_buf();
    const N: usize = 16;
    // Every other file, so that no two reads are sequential on the platter.
    let files: Vec<std::fs::File> = (0..N)
        .map(|i| std::fs::File::open(m.join(&rels[2 * i])).unwrap())
        .collect();
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; FILE]).collect();
    let mut ring = IoUring::new(N as u32).unwrap();
    let s0 = disk.snapshot().unwrap();
    let t0 = Instant::now();
    for (i, (f, b)) in files.iter().zip(bufs.iter_mut()).enumerate() {
        let e = opcode::Read::new(types::Fd(f.as_raw_fd()), b.as_mut_ptr(), FILE as u32)
            .offset(0)
            .build()
            .user_data(i as u64);
        // SAFETY: the buffers in `bufs` and the files stay alive and untouched until
        // every completion has been reaped below.
        unsafe { ring.submission().push(&e).unwrap() };
    }
    ring.submit().unwrap();
    let submit_time = t0.elapsed();
    let mut got = 0;
    while got < N {
        ring.submit_and_wait(1).unwrap();
        for c in ring.completion() {
            assert_eq!(c.result(), FILE as i32, "read {} failed", c.user_data());
            got += 1;
        }
    }
    let done_time = t0.elapsed();
    let s1 = disk.snapshot().unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert!(b == &common::pattern(2 * i, FILE), "file {i}");
    }
    let d = s1.since(&s0);
    eprintln!(
        "io_uring: {N} buffered reads submitted in {submit_time:?}, done after {done_time:?} \
         (one at a time would take about {:.0} ms); max queue {}",
        N as f64 * one * 1e3,
        d.max_queue
    );
    eprint!("{}", d.table());
    assert_eq!(d.requests, N as u64);
    assert!(
        submit_time * 4 < done_time,
        "submission blocked: {submit_time:?} of {done_time:?}"
    );
    // Concurrent: both spindles busy, well under the serial time.
    assert!(
        done_time.as_secs_f64() < 0.75 * N as f64 * one,
        "{done_time:?}: the reads ran one at a time"
    );
    assert!(d.spindles.iter().all(|s| s.reads > 0), "{:?}", d.spindles);
    disk.stop().unwrap();
}
