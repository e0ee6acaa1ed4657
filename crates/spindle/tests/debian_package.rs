//! The Debian package (debian/, README "Install"): built with
//! `dpkg-buildpackage` around this test's own binaries, checked with
//! `lintian`, and installed, upgraded during a 64 MiB download (the binary
//! handover, and one whose new binary cannot start), removed and purged
//! with `apt-get` inside this machine's root booted under systemd (the
//! `systemd-nspawn` machine of `under_systemd.rs`). The steps are in
//! `debian_package.sh`. It needs root, `systemd-nspawn`, `dpkg-buildpackage`
//! with debhelper, and lintian (all Debian packages CI installs), and says
//! it is skipped without them (under CI it fails).

use std::path::Path;
use std::process::Command;

#[test]
fn install_upgrade_remove_and_purge_the_debian_package() {
    if !test_skip::is_root() {
        test_skip::skip_or_fail("needs root (systemd-nspawn, apt-get)");
        return;
    }
    let have = |p: &str| Path::new(p).exists();
    for (path, package) in [
        ("/usr/bin/systemd-nspawn", "systemd-container"),
        ("/lib/systemd/systemd", "systemd"),
        ("/usr/bin/dpkg-buildpackage", "dpkg-dev"),
        ("/usr/bin/dh", "debhelper"),
        ("/usr/bin/lintian", "lintian"),
        ("/usr/bin/man", "man-db"),
    ] {
        if !have(path) {
            test_skip::skip_or_fail(format!("needs {path} (apt-get install {package})"));
            return;
        }
    }
    let spindle = Path::new(env!("CARGO_BIN_EXE_spindle"));
    let bin_dir = spindle.parent().expect("the binary's directory");
    assert_eq!(
        Path::new(env!("CARGO_BIN_EXE_spindle-mangen")).parent(),
        Some(bin_dir),
        "spindle and spindle-mangen are built into one directory"
    );
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = here.join("../..");
    // The script cleans up (container, overlay) on TERM; KILL is the last
    // resort of the bound.
    let t = std::time::Instant::now();
    let out = Command::new("timeout")
        .args(["--kill-after=10", "300", "bash"])
        .arg(here.join("tests/debian_package.sh"))
        .arg(bin_dir)
        .arg(&repo)
        .output()
        .expect("running tests/debian_package.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("debian package: every step held"),
        "{}\n{stdout}\n{stderr}",
        out.status
    );
    println!("{stdout}(in {:.0?})", t.elapsed());
}
