//! Real clients through spindle as a caching edge in front of Debian's
//! nginx: aria2c with 8 connections, `wget -c` resuming a download,
//! ffmpeg seeking into an MP4, and apt-get reading a Debian repository
//! made with `apt-ftparchive`. Every body is compared with the origin's
//! file, byte for byte, and the origin's log shows what the edge asked.

mod common;

use std::path::Path;
use std::process::Command;

use common::edge::*;
use common::*;

/// Whether `tool` runs here; if not, the test says why (and fails under
/// CI, where .ci/run installs it).
fn have(tool: &str, package: &str) -> bool {
    // ffmpeg alone spells it with one dash.
    let flag = if tool == "ffmpeg" {
        "-version"
    } else {
        "--version"
    };
    let ok = Command::new(tool)
        .arg(flag)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_skip::skip_or_fail(format!("{tool} is not installed (Debian's {package})"));
    }
    ok
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn aria2c_with_eight_connections_gets_the_file() {
    if !have("aria2c", "aria2") {
        return;
    }
    let iso = random_bytes(20 * M as u64 + 77, 20);
    let Some(e) = Edge::start(&[("slow/debian.iso", &iso)], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    run(Command::new("aria2c")
        .args(["-q", "-x8", "-s8", "-k1M", "--allow-overwrite=true"])
        .args(["--file-allocation=none", "-d"])
        .arg(dir.path())
        .args(["-o", "debian.iso"])
        .arg(e.srv.url("/slow/debian.iso")));
    assert!(std::fs::read(dir.path().join("debian.iso")).unwrap() == iso);
    // Eight clients' ranges, yet every slice fetched once.
    let gets = e.nginx.log().len();
    assert_eq!(gets, 21, "{:#?}", e.nginx.log());
}

#[test]
fn wget_c_resumes_a_download() {
    if !have("wget", "wget") {
        return;
    }
    let pkg = random_bytes(9 * M as u64 + 5, 21);
    let Some(e) = Edge::start(&[("pool/big.deb", &pkg)], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.deb");
    // A download cut off after 5 MiB and a byte, then resumed.
    let cut = 5 * M + 1;
    std::fs::write(&out, &pkg[..cut]).unwrap();
    run(Command::new("wget")
        .args(["-q", "-c", "-O"])
        .arg(&out)
        .arg(e.srv.url("/pool/big.deb")));
    assert!(std::fs::read(&out).unwrap() == pkg, "not the file");
    // Only the slices from the cut on (and slice 0, which names the
    // version): 0 and 5 to 9.
    let log = e.nginx.log();
    assert_eq!(log.len(), 6, "{log:#?}");
}

#[test]
fn ffmpeg_seeks_into_an_mp4() {
    if !have("ffmpeg", "ffmpeg") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let film = dir.path().join("film.mp4");
    // 40 s of a test pattern (about 13 MB), its index (moov) at the end
    // as ffmpeg writes it: a player reads the end first, then seeks.
    run(Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=640x360:rate=25")
        .args(["-t", "40", "-c:v", "mpeg4", "-q:v", "3", "-y"])
        .arg(&film));
    let bytes = std::fs::read(&film).unwrap();
    assert!(bytes.len() > 4 * M, "{} bytes", bytes.len());
    let log_path = dir.path().join("access.log");
    let extra = [
        "--access-log",
        log_path.to_str().unwrap(),
        "--log-format",
        "json",
    ];
    let Some(e) = Edge::start(&[("film.mp4", &bytes)], &extra) else {
        return;
    };
    // The frame at 30 s, through the edge and from the file: the same.
    let frame = |input: &str| {
        run(Command::new("ffmpeg")
            .args(["-v", "error", "-ss", "30", "-i", input])
            .args(["-frames:v", "1", "-f", "md5", "-"]))
    };
    let via_edge = frame(&e.srv.url("/film.mp4"));
    assert_eq!(via_edge, frame(film.to_str().unwrap()));
    // It seeked: the index at the end came whole as a range of its own,
    // a 206 of a few KB. (ffmpeg cuts off the responses it seeks away
    // from; whether the edge skipped slices depends on how much the
    // sockets took before: on loopback a few MB, most of this film.)
    let lines = wait_log_lines(&log_path, 2);
    let seeked = lines.iter().any(|l| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        v["status"] == 206 && v["outcome"] != "cut" && v["bytes"].as_u64().unwrap() < M as u64
    });
    assert!(seeked, "{lines:#?}");
}

/// A flat Debian repository under `root`: one package, its `Packages`
/// and `Release` made by apt-ftparchive.
fn debian_repo(root: &Path) -> Vec<u8> {
    let pkg = root.join("build/spindle-edge-test");
    std::fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(pkg.join("usr/share/spindle-edge-test")).unwrap();
    std::fs::write(
        pkg.join("DEBIAN/control"),
        "Package: spindle-edge-test\nVersion: 1.0\nArchitecture: all\n\
         Maintainer: spindle <spindle@localhost>\nDescription: a test package\n",
    )
    .unwrap();
    // Random bytes, so that the .deb is several slices.
    std::fs::write(
        pkg.join("usr/share/spindle-edge-test/blob"),
        random_bytes(3 * M as u64, 22),
    )
    .unwrap();
    let deb = root.join("spindle-edge-test_1.0_all.deb");
    run(Command::new("dpkg-deb")
        .args(["-Znone", "--build", "--root-owner-group"])
        .arg(&pkg)
        .arg(&deb));
    std::fs::remove_dir_all(root.join("build")).unwrap();
    let packages = run(Command::new("apt-ftparchive")
        .args(["packages", "."])
        .current_dir(root));
    std::fs::write(root.join("Packages"), packages).unwrap();
    let release = run(Command::new("apt-ftparchive")
        .args(["release", "."])
        .current_dir(root));
    std::fs::write(root.join("Release"), release).unwrap();
    std::fs::read(deb).unwrap()
}

#[test]
fn apt_get_updates_and_downloads_through_the_edge() {
    if !have("apt-ftparchive", "apt-utils") {
        return;
    }
    let Some(e) = Edge::start(&[], &[]) else {
        return;
    };
    let deb = debian_repo(e.origin_root.path());
    let apt = tempfile::tempdir().unwrap();
    let a = apt.path();
    for d in ["lists/partial", "archives/partial", "etc"] {
        std::fs::create_dir_all(a.join(d)).unwrap();
    }
    std::fs::write(
        a.join("etc/sources.list"),
        format!("deb [trusted=yes] {} ./\n", e.srv.url("/")),
    )
    .unwrap();
    let opts = |cmd: &mut Command| {
        let d = a.display();
        for o in [
            format!("Dir::Etc::SourceList={d}/etc/sources.list"),
            "Dir::Etc::SourceParts=/nonexistent".into(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache::Archives={d}/archives"),
            format!("Dir::Cache={d}"),
            "Debug::NoLocking=1".into(),
            "APT::Sandbox::User=root".into(),
        ] {
            cmd.args(["-o", &o]);
        }
    };
    let mut update = Command::new("apt-get");
    update.arg("-q");
    opts(&mut update);
    let said = run(update.arg("update"));
    assert!(!said.contains("Err:"), "{said}");
    // Install, as far as it goes without changing this machine: the
    // package downloaded and checked against its Packages entry.
    let mut install = Command::new("apt-get");
    install.args(["-q", "-y", "--download-only"]);
    opts(&mut install);
    run(install.args(["install", "spindle-edge-test"]));
    let got = std::fs::read(a.join("archives/spindle-edge-test_1.0_all.deb")).unwrap();
    assert!(got == deb, "not the package");
    let log = e.nginx.log();
    assert!(
        log.iter().any(|l| l.starts_with("GET /Packages")),
        "{log:#?}"
    );
}
