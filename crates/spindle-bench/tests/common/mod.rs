//! Helpers shared by spindle-bench's integration tests.

/// True when the tests run as root (cgroups, drop_caches and FUSE mounts need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        .unwrap_or(false)
}
