//! The README's "Under systemd" walkthrough under a real systemd: this
//! machine's own root file system, behind an overlay, booted with
//! `systemd-nspawn` (systemd as PID 1, a private network), and the files in
//! contrib/ used unchanged: ports 80 and 443 from `spindle.socket`, the
//! hardened `spindle.service` (`Type=notify`, its own user), HTTPS, a
//! metrics scrape, the journal, `systemctl reload`, logrotate, a binary
//! handover during a 64 MiB download, a restart after the new process is
//! killed, and a stop. The steps are in `under_systemd.sh`. It needs root
//! and `systemd-nspawn` (Debian's `systemd-container`, which CI installs)
//! and says it is skipped without them (under CI it fails).

use std::path::Path;
use std::process::Command;

#[test]
fn the_readme_walkthrough_under_a_real_systemd() {
    if !test_skip::is_root() {
        test_skip::skip_or_fail("needs root (systemd-nspawn)");
        return;
    }
    let have = |p: &str| Path::new(p).exists();
    if !have("/usr/bin/systemd-nspawn") || !have("/lib/systemd/systemd") {
        test_skip::skip_or_fail(
            "needs systemd and systemd-nspawn (apt-get install systemd systemd-container)",
        );
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = here.join("../..");
    // The script cleans up (container, overlay) on TERM; KILL is the last
    // resort of the bound.
    let out = Command::new("timeout")
        .args(["--kill-after=10", "180", "bash"])
        .arg(here.join("tests/under_systemd.sh"))
        .arg(env!("CARGO_BIN_EXE_spindle"))
        .arg(&repo)
        .output()
        .expect("running tests/under_systemd.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("under systemd: every step held"),
        "{}\n{stdout}\n{stderr}",
        out.status
    );
    println!("{stdout}");
}
