//! How a test that cannot run on this machine (no root, no `/dev/fuse`, a
//! missing tool or Python module, a file system that cannot show what the
//! test checks) says so. Outside CI it writes `skipped: <test>: <reason>`
//! and the test returns, or leaves out the check it could not make. Under
//! CI (the `CI` variable set, as `.ci/run` runs), where every test must
//! run, it fails the test with the reason instead: `.ci/run` installs what
//! the tests need.
//!
//! The line goes to the process's stderr directly, not through `eprintln!`,
//! which the test harness captures and shows only for a failing test: a
//! skip is seen in the output of a passing run.

use std::fmt::Display;
use std::io::Write;

/// The variable CI sets (`CI=true`).
pub const CI_VAR: &str = "CI";

/// True when running under CI.
pub fn in_ci() -> bool {
    std::env::var_os(CI_VAR).is_some()
}

/// The running test's name: the harness runs each test on a thread named
/// after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test helper thread")
        .to_string()
}

fn say(line: &str) {
    // Uncaptured on purpose (see the module comment); a failed write to
    // stderr has nowhere better to be reported.
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The calling test cannot run here, or cannot make one of its checks,
/// for `reason`: says so, and under CI fails the test. The caller then
/// returns (or goes on without that check).
#[track_caller]
pub fn skip_or_fail(reason: impl Display) {
    let test = test_name();
    assert!(
        !in_ci(),
        "{test} cannot run under {CI_VAR}: {reason} (.ci/run must provide it)"
    );
    say(&format!("skipped: {test}: {reason}"));
}

/// The calling test was left out on purpose by the person running the
/// suite (for example `SPINDLE_TEST_BACKENDS` without the backend it is
/// about): says so, and does not fail, not even under CI.
pub fn skip_chosen(reason: impl Display) {
    say(&format!("skipped: {}: {reason}", test_name()));
}

/// True when this process runs as root (effective uid 0), read from
/// `/proc/self/status`.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}
