//! The daemon's life: mounting, serving a faithful mirror, stopping cleanly, and
//! cleaning up after a daemon that was killed.

mod common;

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use slowdisk::{mounts, MountHandle, MountOptions};

#[test]
fn mirror_is_faithful_and_read_only() {
    if common::skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let backing = tmp.path().join("b");
    let rels = common::make_files(&backing, 3, 5, 10_000);
    std::fs::write(backing.join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("files-001/002", backing.join("link")).unwrap();
    std::fs::set_permissions(
        backing.join("files-002/004"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let disk = common::spawn(
        &backing,
        &tmp.path().join("m"),
        &tmp.path().join("s.json"),
        common::fast_model(),
    );
    let m = disk.mount_point().to_path_buf();

    for (i, rel) in rels.iter().enumerate() {
        assert_eq!(
            std::fs::read(m.join(rel)).unwrap(),
            common::pattern(i, 10_000)
        );
    }
    // Reads at an offset, across the end of the file.
    let mut f = std::fs::File::open(m.join("files-000/001")).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, 8000).unwrap();
    assert_eq!(n, 2000);
    assert_eq!(&buf[..n], &common::pattern(1, 10_000)[8000..]);
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).unwrap();
    assert_eq!(rest.len(), 10_000);
    assert_eq!(std::fs::read(m.join("empty")).unwrap(), b"");

    let mut names: Vec<String> = std::fs::read_dir(&m)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["empty", "files-000", "files-001", "files-002", "link"]
    );
    assert_eq!(std::fs::read_dir(m.join("files-001")).unwrap().count(), 5);
    assert_eq!(
        std::fs::read_link(m.join("link")).unwrap(),
        std::path::Path::new("files-001/002")
    );
    assert_eq!(
        std::fs::read(m.join("link")).unwrap(),
        common::pattern(7, 10_000)
    );
    let md = std::fs::metadata(m.join("files-002/004")).unwrap();
    let bmd = std::fs::metadata(backing.join("files-002/004")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o600);
    assert_eq!(md.len(), 10_000);
    assert_eq!(md.ino(), bmd.ino(), "inode numbers mirror the backing ones");
    assert_eq!(md.mtime(), bmd.mtime());
    assert!(std::fs::metadata(m.join("nope")).is_err());

    // Read-only: no writes, no new files.
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("files-000/000"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(std::fs::write(m.join("new"), b"x").is_err());

    let s = disk.stop().unwrap();
    assert!(s.final_);
    // 15 files of one read each; the rest came from the page cache.
    assert!(s.requests >= 15, "{} reads reached the disk", s.requests);
    assert_eq!(s.spindles.len(), 2);
    assert!(mounts::fuse_mounts_at(&m).unwrap().is_empty());
}

#[test]
fn stale_mount_of_a_killed_daemon_is_cleaned_at_the_next_start() {
    if common::skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let backing = tmp.path().join("b");
    common::make_files(&backing, 1, 3, 5000);
    let mnt = tmp.path().join("m");
    let stats = tmp.path().join("s.json");

    let disk = common::spawn(&backing, &mnt, &stats, common::fast_model());
    let canonical = disk.mount_point().to_path_buf();
    assert_eq!(
        std::fs::read(canonical.join("files-000/000")).unwrap(),
        common::pattern(0, 5000)
    );
    let status = disk.kill().unwrap();
    assert!(!status.success());
    // The kernel aborted the connection; the mount is still there, dead.
    assert!(mounts::is_dead(&mnt), "mount should be dead after SIGKILL");
    assert_eq!(mounts::fuse_mounts_at(&canonical).unwrap().len(), 1);
    let e = std::fs::read_dir(&mnt).unwrap_err();
    assert!(mounts::is_enotconn(&e), "{e}");

    // The next start removes it and mounts afresh.
    let disk = common::spawn(&backing, &mnt, &stats, common::fast_model());
    assert_eq!(
        std::fs::read(mnt.join("files-000/002")).unwrap(),
        common::pattern(2, 5000)
    );
    assert_eq!(mounts::fuse_mounts_at(&canonical).unwrap().len(), 1);
    disk.stop().unwrap();
    assert!(mounts::fuse_mounts_at(&canonical).unwrap().is_empty());
    assert!(!mounts::is_dead(&mnt));

    // The library call does the same for the harness (no daemon started).
    let disk = common::spawn(&backing, &mnt, &stats, common::fast_model());
    disk.kill().unwrap();
    assert!(mounts::is_dead(&mnt));
    assert_eq!(mounts::clean_stale(&mnt).unwrap(), 1);
    assert_eq!(mounts::clean_stale(&mnt).unwrap(), 0);
    assert!(std::fs::read_dir(&mnt).unwrap().next().is_none());
}

#[test]
fn sigterm_with_files_open_still_unmounts_and_exits() {
    if common::skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let backing = tmp.path().join("b");
    common::make_files(&backing, 1, 2, 5000);
    let disk = common::spawn(
        &backing,
        &tmp.path().join("m"),
        &tmp.path().join("s.json"),
        common::fast_model(),
    );
    let m = disk.mount_point().to_path_buf();
    let f = std::fs::File::open(m.join("files-000/001")).unwrap();
    let t0 = Instant::now();
    let s = disk.stop().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert!(s.final_);
    assert!(mounts::fuse_mounts_at(&m).unwrap().is_empty());
    // The open file lost its file system.
    let mut buf = [0u8; 10];
    assert!(std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0).is_err());
}

#[test]
fn daemon_unmounts_when_its_parent_dies() {
    if common::skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let backing = tmp.path().join("b");
    common::make_files(&backing, 1, 1, 100);
    let mnt = tmp.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let canonical = mounts::canonical_mount_point(&mnt).unwrap();
    // A stand-in for a harness that dies: a shell starts the daemon and exits.
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" --backing \"$1\" --mount \"$2\" --exit-with-parent --seek-ms 1 --seek-min-ms 0 & sleep 1")
        .arg(env!("CARGO_BIN_EXE_slowdisk"))
        .arg(&backing)
        .arg(&mnt)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while mounts::fuse_mounts_at(&canonical).unwrap().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never mounted");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(sh.wait().unwrap().success());
    let t0 = Instant::now();
    while !mounts::fuse_mounts_at(&canonical).unwrap().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "orphaned daemon did not unmount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!mounts::is_dead(&mnt));
}

#[test]
fn bad_flags_give_one_error_line() {
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    for args in [
        vec!["--backing", "/nonexistent-slowdisk", "--mount", "m"],
        vec!["--backing", ".", "--mount", "m", "--spindles", "0"],
        vec!["--backing", ".", "--mount", "m", "--mbps", "-3"],
        vec!["--backing", ".", "--mount", "m", "--elevator", "lifo"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_slowdisk"))
            .args(&args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("error"), "{args:?}: {err}");
    }
    // A mount point inside the backing directory is refused (the mirror would recurse).
    let out = Command::new(env!("CARGO_BIN_EXE_slowdisk"))
        .args(["--backing", ".", "--mount", "inner"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("inside --backing"), "{err}");
    // And a backing directory inside the mount point (the mount would hide it).
    std::fs::create_dir_all(tmp.path().join("outer/data")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_slowdisk"))
        .args(["--backing", "outer/data", "--mount", "outer"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("inside --mount"), "{err}");
}

#[test]
fn spawn_reports_a_daemon_that_cannot_start() {
    let tmp = tempfile::tempdir().unwrap();
    let _unmount = common::UnmountGuard(tmp.path().join("m"));
    let mut opts = MountOptions::new(
        tmp.path().join("missing"),
        tmp.path().join("m"),
        tmp.path().join("s.json"),
    );
    opts.ready_timeout = Duration::from_secs(10);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slowdisk"));
    cmd.stderr(Stdio::null()).stdout(Stdio::null());
    let e = MountHandle::spawn(cmd, &opts).unwrap_err();
    assert!(e.to_string().contains("exited before"), "{e:#}");
}
