//! The measured loads, in slices taken in turns.
//!
//! This machine drifts: for minutes at a time every server on it runs
//! 10-30% slower or faster (both spindle and lighttpd went from about
//! 117K to 88K req/s and back within one run). Loads minutes apart then
//! compare the machine's moods, not the servers. So each server's load of
//! one coding is cut into up to [`SLICES`] slices of whole passes, and the
//! slices are taken in turns (slice 1 of every server, then slice 2 of
//! every server, the order rotated each time), all servers already up and
//! warm: a drift falls on every server alike. A server's numbers are the
//! sums of its slices.

use super::*;

/// Most slices of one server's load of one coding.
pub(super) const SLICES: u64 = 5;

/// How the measured runs are made.
#[derive(Debug, Clone, Copy)]
pub(super) struct LoadPlan {
    pub(super) clients: u64,
    pub(super) seconds: f64,
    pub(super) estimate_secs: f64,
    pub(super) workers: u32,
}

/// Whole passes of every client over `urls` that fill `seconds` at
/// `rate` requests a second: one at least, [`MAX_PASSES`] and
/// [`MAX_RUN_SECS`] at most.
pub(super) fn passes_for(rate: f64, urls: usize, clients: u64, seconds: f64) -> u64 {
    let per_pass = (urls as u64 * clients).max(1) as f64;
    if rate <= 0.0 {
        return 1;
    }
    let want = (seconds * rate / per_pass).ceil();
    let cap = (MAX_RUN_SECS * rate / per_pass).floor();
    (want.min(cap) as u64).clamp(1, MAX_PASSES)
}

/// How `passes` are cut: (slices, passes per slice), at most [`SLICES`]
/// slices of equal length, together at least `passes`.
pub(super) fn sliced(passes: u64) -> (u64, u64) {
    let slices = passes.clamp(1, SLICES);
    (slices, passes.max(1).div_ceil(slices))
}

/// What one server's slices add up to.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Tally {
    pub(super) fetches: f64,
    pub(super) seconds: f64,
    pub(super) cpu: f64,
    pub(super) total: f64,
    pub(super) headers: f64,
    pub(super) data: f64,
    pub(super) non_200: f64,
    pub(super) errors: f64,
    pub(super) passes: u64,
    /// Each slice's req/s.
    pub(super) rates: Vec<f64>,
}

impl Tally {
    fn add(&mut self, s: &Tally) {
        self.fetches += s.fetches;
        self.seconds += s.seconds;
        self.cpu += s.cpu;
        self.total += s.total;
        self.headers += s.headers;
        self.data += s.data;
        self.non_200 += s.non_200;
        self.errors += s.errors;
        self.passes += s.passes;
        self.rates.extend_from_slice(&s.rates);
    }

    /// The report's numbers; an error when the bodies did not come
    /// compressed (more than [`NOT_COMPRESSED_SHARE`] of the files' own
    /// size on average: `identity` bytes a file).
    pub(super) fn sample(&self, identity: f64, clients: u64) -> Result<BTreeMap<String, f64>> {
        let fetches = self.fetches.max(1.0);
        let seconds = self.seconds.max(1e-9);
        let body = self.data / fetches;
        let (lo, hi) = self
            .rates
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let m: BTreeMap<String, f64> = [
            ("req_per_sec", self.fetches / seconds),
            ("fetches", self.fetches),
            ("seconds", self.seconds),
            ("mb_per_sec", self.total / seconds / 1e6),
            ("errors", self.errors),
            ("non_200", self.non_200),
            ("waves", self.fetches / clients.max(1) as f64),
            ("load_passes", self.passes as f64),
            ("slices", self.rates.len() as f64),
            (
                "slice_rps_min",
                if self.rates.is_empty() { 0.0 } else { lo },
            ),
            ("slice_rps_max", hi),
            ("server_cpu_s", self.cpu),
            ("cpu_s_per_10k", self.cpu / fetches * 10_000.0),
            ("wire_bytes_per_req", self.total / fetches),
            ("header_bytes_per_req", self.headers / fetches),
            ("body_bytes_per_req", body),
            ("body_share", body / identity.max(1.0)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if self.non_200 == 0.0 && body > NOT_COMPRESSED_SHARE * identity {
            bail!(
                "the responses did not come compressed: {body:.0} body bytes a request, {:.0}% of the files' own {identity:.0}",
                100.0 * body / identity
            );
        }
        Ok(m)
    }
}

/// What the loads of one coding share.
pub(super) struct Loads<'a> {
    pub(super) files: &'a [DocFile],
    pub(super) coding: &'a str,
    pub(super) plan: LoadPlan,
    pub(super) work: &'a Path,
}

impl Loads<'_> {
    /// h2load over the URL list in a fresh order, with the coding asked
    /// for and `extra`; its output.
    fn h2load(&self, running: &Running, extra: &[String]) -> Result<String> {
        let mut rng = rand::rngs::SmallRng::from_os_rng();
        let urls = self.work.join(format!("urls-{}", self.coding));
        std::fs::write(&urls, url_list(self.files, running.port, &mut rng))?;
        let mut args: Vec<String> = vec![
            "--h1".into(),
            "-H".into(),
            format!("Accept-Encoding: {}", self.coding),
        ];
        args.extend_from_slice(extra);
        crate::h2load::run(&urls, (self.plan.clients, 1), &args, self.plan.workers)
    }

    /// A short run that estimates a server's rate (and warms its
    /// connections' paths): the whole passes its load will take.
    pub(super) fn passes(&self, running: &Running) -> Result<u64> {
        let ms = (self.plan.estimate_secs * 1000.0).round().max(100.0) as u64;
        let est = self.h2load(running, &["-D".into(), format!("{ms}ms")])?;
        let rate = crate::h2load::metrics(&est)?["req_per_sec"];
        Ok(passes_for(
            rate,
            self.files.len(),
            self.plan.clients,
            self.plan.seconds,
        ))
    }

    /// One slice: every client fetches the URL list `passes` times, the
    /// server's CPU counted around it.
    pub(super) fn slice(&self, running: &Running, passes: u64) -> Result<Tally> {
        let n = passes * self.files.len() as u64 * self.plan.clients;
        let c0 = running.cpu_seconds();
        let text = self.h2load(running, &["-n".into(), n.to_string()])?;
        let c1 = running.cpu_seconds();
        let m = crate::h2load::metrics(&text)?;
        let t =
            crate::h2load::traffic(&text).ok_or_else(|| anyhow!("h2load printed no traffic"))?;
        let get = |k: &str| m.get(k).copied().unwrap_or(0.0);
        Ok(Tally {
            fetches: get("fetches"),
            seconds: crate::h2load::elapsed_seconds(&text).unwrap_or(0.0),
            cpu: c1 - c0,
            total: t.total,
            headers: t.headers,
            data: t.data,
            non_200: get("non_200"),
            errors: get("errors"),
            passes,
            rates: vec![get("req_per_sec")],
        })
    }
}

/// One server's share of an interleaved load: its slices, and what they
/// added up to (or why they stopped).
pub(super) struct Share<'a> {
    pub(super) running: &'a Running,
    slices: u64,
    passes: u64,
    pub(super) tally: Result<Tally>,
}

impl<'a> Share<'a> {
    pub(super) fn new(running: &'a Running, passes: Result<u64>) -> Share<'a> {
        let (slices, per) = passes.as_ref().map_or((0, 0), |p| sliced(*p));
        Share {
            running,
            slices,
            passes: per,
            tally: passes.map(|_| Tally::default()),
        }
    }
}

/// Runs `shares` in turns: turn j takes one slice of every share with
/// slices left, starting from the j-th (rotated). A slice that fails
/// ends its share with that error.
pub(super) fn in_turns(loads: &Loads, shares: &mut [Share]) {
    let turns = shares.iter().map(|s| s.slices).max().unwrap_or(0);
    let n = shares.len();
    for turn in 0..turns {
        for i in (0..n).map(|i| (i + turn as usize) % n) {
            let s = &mut shares[i];
            if turn >= s.slices || s.tally.is_err() {
                continue;
            }
            match loads.slice(s.running, s.passes) {
                Ok(t) => {
                    if let Ok(sum) = &mut s.tally {
                        sum.add(&t);
                    }
                }
                Err(e) => s.tally = Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_fill_the_seconds_within_bounds() {
        // 1,000 req/s, 100 URLs, 10 clients: a pass is 1 s.
        assert_eq!(passes_for(1000.0, 100, 10, 10.0), 10);
        assert_eq!(passes_for(1000.0, 100, 10, 10.5), 11);
        // A slow server: one pass, however long.
        assert_eq!(passes_for(10.0, 100, 10, 10.0), 1);
        assert_eq!(passes_for(0.0, 100, 10, 10.0), 1);
        // Never past MAX_RUN_SECS or MAX_PASSES.
        assert_eq!(passes_for(1000.0, 100, 10, 1e6), MAX_RUN_SECS as u64);
        assert_eq!(passes_for(1e9, 100, 10, 10.0), MAX_PASSES);
    }

    #[test]
    fn loads_are_cut_in_equal_slices() {
        assert_eq!(sliced(41), (5, 9), "5 slices of 9 passes: 45 >= 41");
        assert_eq!(sliced(1), (1, 1), "a slow server's one pass is one slice");
        assert_eq!(sliced(3), (3, 1));
        assert_eq!(sliced(0), (1, 1));
        for p in 1..200 {
            let (s, per) = sliced(p);
            assert!(s <= SLICES && s * per >= p && s * (per - 1) < p, "{p}");
        }
    }

    #[test]
    fn a_tally_is_the_sum_of_its_slices() {
        let slice = |fetches: f64, seconds: f64| Tally {
            fetches,
            seconds,
            cpu: seconds / 2.0,
            total: fetches * 1000.0,
            headers: fetches * 200.0,
            data: fetches * 700.0,
            passes: 1,
            rates: vec![fetches / seconds],
            ..Tally::default()
        };
        let mut t = Tally::default();
        t.add(&slice(100_000.0, 1.0));
        t.add(&slice(100_000.0, 2.0));
        let m = t.sample(5000.0, 50).unwrap();
        assert_eq!(m["req_per_sec"], 200_000.0 / 3.0);
        assert_eq!(m["slice_rps_min"], 50_000.0);
        assert_eq!(m["slice_rps_max"], 100_000.0);
        assert_eq!(m["cpu_s_per_10k"], 1.5 / 200_000.0 * 10_000.0);
        assert_eq!(m["wire_bytes_per_req"], 1000.0);
        assert_eq!(m["load_passes"], 2.0);
        assert!(
            t.sample(900.0, 50).is_err(),
            "700 body bytes of 900: not compressed"
        );
    }
}
