//! Fault injection on a real mount: EIO on chosen files and at a rate, reads that hang,
//! short reads and a file that shrinks under its reader. Fault files are opened with
//! FOPEN_DIRECT_IO by the daemon, so these plain (buffered) reads reach it every time.

mod common;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use slowdisk::{FaultArgs, MountHandle};

const FILE: usize = 100 * 1024;

/// A backing directory of 2 x 4 files of `FILE` bytes, a mount with `faults`.
struct Setup {
    // Field order is drop order: stop the daemon, remove any mount left, then the files.
    disk: MountHandle,
    _unmount: common::UnmountGuard,
    _tmp: tempfile::TempDir,
    rels: Vec<PathBuf>,
}

impl Setup {
    fn new(faults: impl FnOnce(&[PathBuf]) -> FaultArgs) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let unmount = common::UnmountGuard(tmp.path().join("m"));
        let backing = tmp.path().join("b");
        let rels = common::make_files(&backing, 2, 4, FILE);
        let disk = common::spawn_with_faults(
            &backing,
            &tmp.path().join("m"),
            &tmp.path().join("s.json"),
            common::fast_model(),
            faults(&rels),
        );
        Setup {
            disk,
            _unmount: unmount,
            _tmp: tmp,
            rels,
        }
    }

    fn path(&self, i: usize) -> PathBuf {
        self.disk.mount_point().join(&self.rels[i])
    }
}

fn is_eio(r: std::io::Result<Vec<u8>>) -> bool {
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::EIO))
}

#[test]
fn fail_file_gives_eio_and_other_files_read_fine() {
    if common::skip() {
        return;
    }
    let s = Setup::new(|rels| FaultArgs {
        fail_files: vec![rels[1].clone(), rels[5].clone()],
        ..FaultArgs::default()
    });
    for _ in 0..3 {
        for i in 0..s.rels.len() {
            let r = std::fs::read(s.path(i));
            if i == 1 || i == 5 {
                assert!(is_eio(r), "file {i}");
            } else {
                assert_eq!(r.unwrap(), common::pattern(i, FILE), "file {i}");
            }
        }
    }
    // Metadata of a failing file is still fine: only data fails.
    assert_eq!(std::fs::metadata(s.path(1)).unwrap().len(), FILE as u64);
    s.disk.stop().unwrap();
}

#[test]
fn fail_rate_one_fails_every_read_and_zero_none() {
    if common::skip() {
        return;
    }
    let s = Setup::new(|_| FaultArgs {
        fail_rate: 1.0,
        fault_seed: 3,
        ..FaultArgs::default()
    });
    for _ in 0..2 {
        for i in 0..s.rels.len() {
            assert!(is_eio(std::fs::read(s.path(i))), "file {i}");
        }
    }
    s.disk.stop().unwrap();

    let s = Setup::new(|_| FaultArgs {
        fail_rate: 0.0,
        fault_seed: 3,
        ..FaultArgs::default()
    });
    for _ in 0..2 {
        for i in 0..s.rels.len() {
            assert_eq!(std::fs::read(s.path(i)).unwrap(), common::pattern(i, FILE));
        }
    }
    s.disk.stop().unwrap();

    // A rate in between fails some of the reads, not all.
    let s = Setup::new(|_| FaultArgs {
        fail_rate: 0.5,
        fault_seed: 11,
        ..FaultArgs::default()
    });
    let f = std::fs::File::open(s.path(0)).unwrap();
    let mut buf = vec![0u8; 4096];
    let failed = (0..64).filter(|_| f.read_at(&mut buf, 0).is_err()).count();
    assert!((8..=56).contains(&failed), "{failed} of 64 failed");
    drop(f);
    s.disk.stop().unwrap();
}

#[test]
fn hang_file_read_waits_while_other_files_read_at_once() {
    if common::skip() {
        return;
    }
    const HANG: f64 = 2.0;
    let s = Setup::new(|rels| FaultArgs {
        hang_files: vec![rels[2].clone()],
        hang_secs: HANG,
        ..FaultArgs::default()
    });
    let hung = s.path(2);
    let t0 = Instant::now();
    let reader = std::thread::spawn(move || {
        let data = std::fs::read(&hung);
        (data, Instant::now())
    });
    // Let the hung read reach the daemon, then read the other files meanwhile.
    std::thread::sleep(Duration::from_millis(200));
    for i in [0, 1, 3, 4, 7] {
        let t = Instant::now();
        assert_eq!(std::fs::read(s.path(i)).unwrap(), common::pattern(i, FILE));
        assert!(
            t.elapsed() < Duration::from_secs_f64(HANG / 2.0),
            "file {i} took {:?}",
            t.elapsed()
        );
    }
    assert!(!reader.is_finished(), "the hung read returned early");
    let (data, done) = reader.join().unwrap();
    assert_eq!(data.unwrap(), common::pattern(2, FILE));
    let took = done - t0;
    assert!(took >= Duration::from_secs_f64(HANG), "{took:?}");
    assert!(took < Duration::from_secs_f64(HANG * 4.0), "{took:?}");
    s.disk.stop().unwrap();
}

#[test]
fn stopping_with_a_hung_read_in_flight_unmounts_and_fails_the_read() {
    if common::skip() {
        return;
    }
    // A hang far longer than the stop timeout: stopping must not wait for it.
    let s = Setup::new(|rels| FaultArgs {
        hang_files: vec![rels[0].clone()],
        hang_secs: 60.0,
        ..FaultArgs::default()
    });
    let hung = s.path(0);
    let reader = std::thread::spawn(move || std::fs::read(hung));
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    // The reader keeps the mount busy, so the daemon detaches it lazily and exits;
    // the connection is aborted and the held read fails (ECONNABORTED on Linux 6.18).
    let mount = s.disk.mount_point().to_path_buf();
    let Setup {
        disk,
        _unmount,
        _tmp,
        ..
    } = s;
    disk.stop().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let r = reader.join().unwrap();
    assert!(r.is_err(), "the hung read succeeded");
    assert!(slowdisk::mounts::fuse_mounts_at(&mount).unwrap().is_empty());
}

#[test]
fn short_file_reads_return_fewer_bytes_than_asked() {
    if common::skip() {
        return;
    }
    let s = Setup::new(|rels| FaultArgs {
        short_files: vec![rels[3].clone()],
        ..FaultArgs::default()
    });
    let want = common::pattern(3, FILE);
    let f = std::fs::File::open(s.path(3)).unwrap();
    // One read syscall of the whole file: the daemon answers half of it.
    let mut buf = vec![0u8; FILE];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert!((1..FILE).contains(&n), "read {n} of {FILE}");
    assert_eq!(n, FILE / 2);
    assert_eq!(&buf[..n], &want[..n]);
    // A buffer larger than the rest of the file: still short of the rest.
    let mut big = vec![0u8; 4 * FILE];
    let n = f.read_at(&mut big, 1000).unwrap();
    assert!((1..FILE - 1000).contains(&n), "read {n} of {}", FILE - 1000);
    assert_eq!(&big[..n], &want[1000..1000 + n]);
    // The file did not shrink: a short read is not the end of the file.
    assert_eq!(f.metadata().unwrap().len(), FILE as u64);
    assert_eq!(std::fs::metadata(s.path(3)).unwrap().len(), FILE as u64);
    // A reader that loops until EOF still gets every byte.
    assert_eq!(std::fs::read(s.path(3)).unwrap(), want);
    // Other files are not short.
    let g = std::fs::File::open(s.path(4)).unwrap();
    assert_eq!(g.read_at(&mut buf, 0).unwrap(), FILE);
    drop((f, g));
    s.disk.stop().unwrap();
}

#[test]
fn shrink_file_shrinks_once_a_read_reaches_the_threshold() {
    if common::skip() {
        return;
    }
    const AFTER: u64 = 40_000;
    let s = Setup::new(|rels| FaultArgs {
        shrink_files: vec![rels[6].clone()],
        shrink_after: Some(AFTER),
        ..FaultArgs::default()
    });
    let want = common::pattern(6, FILE);
    let p = s.path(6);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), FILE as u64);
    let f = std::fs::File::open(&p).unwrap();
    assert_eq!(f.metadata().unwrap().len(), FILE as u64);
    let mut buf = vec![0u8; 32 * 1024];
    // Below the threshold: served in full, no shrinking yet.
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    assert_eq!(&buf[..], &want[..buf.len()]);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), FILE as u64);
    // This read reaches past the threshold: it gets the data up to it, and the file
    // shrinks.
    let n = f.read_at(&mut buf, 32 * 1024).unwrap();
    assert_eq!(n as u64, AFTER - 32 * 1024);
    assert_eq!(&buf[..n], &want[32 * 1024..AFTER as usize]);
    // At and past the threshold: end of file.
    assert_eq!(f.read_at(&mut buf, AFTER).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 70_000).unwrap(), 0);
    // The size seen by stat, on the open file and by path, is the threshold now.
    assert_eq!(f.metadata().unwrap().len(), AFTER);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), AFTER);
    // A new reader sees the shrunk file whole.
    assert_eq!(std::fs::read(&p).unwrap(), &want[..AFTER as usize]);
    // Other files keep their size.
    assert_eq!(std::fs::metadata(s.path(5)).unwrap().len(), FILE as u64);
    drop(f);
    s.disk.stop().unwrap();
}

#[test]
fn bad_fault_flags_give_one_error_line() {
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    std::fs::create_dir_all(tmp.path().join("b/d")).unwrap();
    std::fs::write(tmp.path().join("b/f"), b"x").unwrap();
    let base = ["--backing", "b", "--mount", "m"];
    for (extra, needle) in [
        (vec!["--fail-rate", "1.5"], "--fail-rate"),
        (vec!["--fail-rate=-0.1"], "--fail-rate"),
        (vec!["--hang-file", "f", "--hang-secs", "0"], "--hang-secs"),
        (vec!["--hang-secs", "100000"], "--hang-secs"),
        (vec!["--fail-file", "../b/f"], "--fail-file"),
        (vec!["--fail-file", "missing"], "--fail-file missing"),
        (vec!["--short-file", "d"], "--short-file d"),
        (vec!["--shrink-file", "f"], "--shrink-after"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_slowdisk"))
            .args(base)
            .args(&extra)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.contains("error"), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // Nothing was mounted.
    assert!(slowdisk::mounts::fuse_mounts_at(&tmp.path().join("m"))
        .map(|m| m.is_empty())
        .unwrap_or(true));
}
