//! Runs (good and failing) close every descriptor they open. Its own test
//! binary, so no other test opens descriptors meanwhile.

use pipetest::{run_once, run_with_fault, Config, Fault, Model};
use std::time::Duration;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn runs_close_every_descriptor() {
    let before = open_fds();
    for model in [
        Model::Select,
        Model::Poll,
        Model::Epoll,
        Model::AioPoll,
        Model::UringPoll,
        Model::UringRead,
    ] {
        let c = Config::new(model, 50, 3, 12, 500);
        run_once(&c).unwrap();
        assert_eq!(open_fds(), before, "{model:?} leaked descriptors");
        // Runs that fail midway (a lost token stalls the loop; an extra
        // token is found at the end) close everything too.
        let mut bad = Config::new(model, 8, 2, 12, 100);
        bad.stall = Duration::from_millis(50);
        assert!(run_with_fault(&bad, Fault::LostToken).is_err());
        assert_eq!(open_fds(), before, "{model:?} leaked after a stall");
        assert!(run_with_fault(&bad, Fault::ExtraToken).is_err());
        assert_eq!(open_fds(), before, "{model:?} leaked after a failed check");
    }
}
