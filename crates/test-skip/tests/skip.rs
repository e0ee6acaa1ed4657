//! The helpers as a test sees them: this test binary runs itself again,
//! as a child running one test that skips, with and without `CI`, and
//! reads the child's output and exit status.

use std::process::{Command, Output};

/// Set in the child: the test named here runs its skipping half.
const CHILD_VAR: &str = "TEST_SKIP_CHILD";
const REASON: &str = "no frobnicator installed (apt-get install frobnicator)";

/// This binary, running only `test` as a child, with `CI` set or not.
fn child(test: &str, ci: bool) -> (Output, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--test-threads", "1"])
        .env(CHILD_VAR, test)
        .env_remove(test_skip::CI_VAR);
    if ci {
        cmd.env(test_skip::CI_VAR, "true");
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn is_child(test: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(test)
}

#[test]
fn a_skip_says_why_in_a_passing_run_and_fails_under_ci() {
    const NAME: &str = "a_skip_says_why_in_a_passing_run_and_fails_under_ci";
    if is_child(NAME) {
        test_skip::skip_or_fail(REASON);
        return;
    }
    let (out, text) = child(NAME, false);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("skipped: {NAME}: {REASON}")),
        "the skip is not in a passing run's output: {text}"
    );
    let (out, text) = child(NAME, true);
    assert!(!out.status.success(), "under CI a skip fails: {text}");
    assert!(
        text.contains(&format!("{NAME} cannot run under CI: {REASON}")),
        "{text}"
    );
}

#[test]
fn a_chosen_skip_says_so_and_passes_under_ci() {
    const NAME: &str = "a_chosen_skip_says_so_and_passes_under_ci";
    if is_child(NAME) {
        test_skip::skip_chosen("SPINDLE_TEST_BACKENDS leaves it out");
        return;
    }
    let (out, text) = child(NAME, true);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "skipped: {NAME}: SPINDLE_TEST_BACKENDS leaves it out"
        )),
        "{text}"
    );
}

#[test]
fn is_root_agrees_with_id() {
    let out = Command::new("id").arg("-u").output().unwrap();
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(test_skip::is_root(), uid == "0", "id -u: {uid}");
}
