//! How many disk reads to keep in flight on one device: found while
//! serving, by measurement, the way a congestion controller finds a
//! network path's window. No I/O here; the io-uring backend feeds it
//! (`worker/disk.rs`).
//!
//! Why not a fixed number: the best depth differs from device to device. A
//! seek-bound disk behind an elevator gains from depth (more reads to pick
//! the shortest seek from) until its queue outlasts the scheduler's
//! deadline (mq-deadline's `read_expire` is 500 ms): from then on reads go
//! oldest first and the elevator's gain is gone. The emulated 2006 RAID1
//! (slowdisk, 100 KiB random fetches) served 161 fetches/s at a fixed depth
//! of 8, 177 at 16, 188 at 32, 191 at 48 and 140 at 64 (spindle's old
//! fixed default). This machine's virtual disk is nearly flat from 16 to
//! 64, and a depth that wandered down on it cost 10%.
//!
//! The method is a hill climb on measured read throughput (bytes per
//! second of completed reads), one step at a time over a ladder of depths
//! ([`LEVELS`]), with each probe measured as our benchmarks are, between
//! two measurements of the depth it started from (A B A), so that a load
//! that is still warming up or drifting does not pass for a gain:
//! - A measurement is an interval of at least [`MIN_SAMPLES`] completions
//!   (and twice the depth) and [`MIN_INTERVAL`], begun once the reads
//!   issued under the previous depth have drained (`settle`). An interval
//!   in which the depth did not bind (fewer than half its completions
//!   found reads waiting for a slot) says nothing about the device and is
//!   dropped.
//! - A probe measures the depth one step down (else up), then the depth
//!   it came from again, and compares the step with the mean of the two.
//!   A step down is taken only if it gained more than [`TIE`] and twice
//!   the noise (the mean difference between such pairs of measurements of
//!   one depth); a step up unless it lost more than [`TIE`]. Down takes
//!   evidence and up none, so a device that does not care goes to the
//!   ceiling, where more completions share each wait of the loop (on this
//!   machine's virtual disk, a depth that wandered between 16 and 48 cost
//!   about 8% more server CPU per fetch than 64). Then the next step the same way is probed at
//!   once. A step down that lost is followed by a probe up.
//! - After a probe that found nothing, the depth rests for a number of
//!   measurements that doubles each time (up to [`REST_MAX`]), then
//!   probes again: the workload or the device may have changed.
//! - A depth that a probe found clearly worse (by [`CLEARLY`]) within the
//!   last [`MEMORY`] measurements is not probed: a cliff is not walked off
//!   again and again.
//! - It starts at [`START`]; never below [`FLOOR`], never above the
//!   ceiling (`--max-inflight`).

use std::time::{Duration, Instant};

/// The depths the controller moves between: steps of about 1.5×.
pub const LEVELS: [u32; 20] = [
    1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
];
/// The depth a device starts at: the thread count of nginx's and
/// spindle's own thread pools, on the plateau of the emulated RAID1 (the
/// old start, the ceiling of 64, is its cliff) and of the virtual disk.
pub const START: u32 = 32;
/// The least depth the controller chooses (unless the ceiling is lower):
/// below it, one slow read would hold back too much.
pub const FLOOR: u32 = 4;
/// Completions in one measurement, at least: on slowdisk at a fixed depth
/// such an interval's rate varies by about 2%.
pub const MIN_SAMPLES: u64 = 256;
/// Duration of one measurement, at least.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// A step up is taken unless it loses more than this fraction; a step
/// down only if it gains more than this and [`NOISE_MARGIN`] times the
/// measured noise.
pub const TIE: f64 = 0.01;
/// How many times the noise (the mean relative difference between the two
/// measurements of the same depth around a probe) a gain must exceed.
pub const NOISE_MARGIN: f64 = 2.0;
/// The noise assumed before any has been measured.
pub const NOISE_PRIOR: f64 = 0.05;
/// Weight of the latest probe in the noise's moving average.
pub const NOISE_WEIGHT: f64 = 0.25;
/// Completions a probe's measurement needs, at least, however short its
/// span.
pub const MIN_SPAN_SAMPLES: u64 = 32;
/// Longest rest between probes, in measurements.
pub const REST_MAX: u32 = 64;
/// Shortest rest, after a probe that moved the depth.
pub const REST_MIN: u32 = 4;
/// Measurements for which a depth's last rate is remembered (see
/// [`CLEARLY`]).
pub const MEMORY: u64 = 64;
/// A rate this fraction below another is clearly worse, through noise.
pub const CLEARLY: f64 = 0.15;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Measurements left before the next probe.
    Rest(u32),
    /// Measuring the current depth, the first reference for a probe.
    Base,
    /// Measuring one step away from `from`, whose rate was `before`.
    Probe { from: usize, before: f64, up: bool },
    /// Back at `from`, measuring it again after the probe's `rate`.
    Back {
        from: usize,
        before: f64,
        rate: f64,
        up: bool,
    },
}

/// One device's depth controller.
#[derive(Debug, Clone)]
pub struct Depth {
    /// Index into [`LEVELS`], and the highest and lowest allowed.
    idx: usize,
    top: usize,
    bottom: usize,
    step: Step,
    rest: u32,
    /// Completions to ignore before measuring: reads issued under the
    /// depth before the last change.
    settle: u64,
    start: Option<Instant>,
    done: u64,
    bound: u64,
    bytes: u64,
    /// Measurements so far, and for each depth the last one at which a
    /// probe found it clearly worse than its neighbour (see [`CLEARLY`]).
    measurements: u64,
    worse: [Option<u64>; LEVELS.len()],
    /// During a probe, every measurement lasts as long as the one it
    /// started from, so that the A B A measurements are evenly spaced in
    /// time (a count-based one shortens as a load warms up, and its
    /// drift would pass for a gain).
    span: Option<Duration>,
    /// Moving average of the relative difference between the two
    /// measurements of the same depth around a probe.
    noise: f64,
}

impl Depth {
    /// A controller that starts at [`START`] (or `ceiling`, the configured
    /// maximum, if lower).
    pub fn new(ceiling: u32) -> Depth {
        assert!(ceiling >= 1);
        let top = LEVELS.iter().rposition(|&l| l <= ceiling).unwrap_or(0);
        let start = LEVELS
            .iter()
            .rposition(|&l| l <= START)
            .unwrap_or(0)
            .min(top);
        let bottom = LEVELS
            .iter()
            .position(|&l| l >= FLOOR)
            .unwrap_or(0)
            .min(top);
        Depth {
            idx: start,
            top,
            bottom,
            step: Step::Base,
            rest: REST_MIN,
            settle: 0,
            start: None,
            done: 0,
            bound: 0,
            bytes: 0,
            measurements: 0,
            worse: [None; LEVELS.len()],
            span: None,
            noise: NOISE_PRIOR,
        }
    }

    /// Reads this device may have in flight now.
    pub fn limit(&self) -> u32 {
        LEVELS[self.idx]
    }

    /// A read of `bytes` completed at `now`; `bound`: other reads were
    /// waiting for a slot at that moment (the depth was binding). Returns
    /// `true` when the limit changed.
    pub fn complete(&mut self, now: Instant, bytes: u64, bound: bool) -> bool {
        if self.settle > 0 {
            self.settle -= 1;
            return false;
        }
        let Some(start) = self.start else {
            self.start = Some(now);
            return false;
        };
        self.done += 1;
        self.bytes += bytes;
        self.bound += bound as u64;
        let elapsed = now.saturating_duration_since(start);
        let enough = match (self.step, self.span) {
            (Step::Probe { .. } | Step::Back { .. }, Some(span)) => {
                elapsed >= span && self.done >= MIN_SPAN_SAMPLES
            }
            _ => self.done >= MIN_SAMPLES.max(2 * self.limit() as u64) && elapsed >= MIN_INTERVAL,
        };
        if !enough {
            return false;
        }
        let rate = self.bytes as f64 / elapsed.as_secs_f64();
        let binding = self.bound * 2 >= self.done;
        self.start = Some(now);
        self.done = 0;
        self.bound = 0;
        self.bytes = 0;
        let before = self.idx;
        if binding {
            if matches!(self.step, Step::Base | Step::Rest(0)) {
                self.span = Some(elapsed);
            }
            self.measured(rate);
        } else {
            // Demand fell below the depth: nothing learnt; a probe under
            // way is abandoned.
            if let Step::Probe { from, .. } | Step::Back { from, .. } = self.step {
                self.idx = from;
                self.step = Step::Base;
            }
        }
        debug_assert!((self.bottom..=self.top).contains(&self.idx));
        if self.idx != before {
            self.settle = LEVELS[before].max(self.limit()) as u64;
            self.start = None;
            return true;
        }
        false
    }

    fn measured(&mut self, rate: f64) {
        self.measurements += 1;
        self.step = match self.step {
            Step::Rest(0) | Step::Base => self.probe(rate, false),
            Step::Rest(n) => Step::Rest(n - 1),
            Step::Probe { from, before, up } => {
                self.idx = from;
                Step::Back {
                    from,
                    before,
                    rate,
                    up,
                }
            }
            Step::Back {
                from,
                before,
                rate: probed,
                up,
            } => {
                let there = if up { from + 1 } else { from - 1 };
                let reference = (before + rate) / 2.0;
                let drift = (before - rate).abs() / reference;
                self.noise += NOISE_WEIGHT * (drift - self.noise);
                if probed < reference * (1.0 - CLEARLY) {
                    self.worse[there] = Some(self.measurements);
                } else if probed * (1.0 - CLEARLY) > reference {
                    self.worse[from] = Some(self.measurements);
                }
                // A step down must beat the noise; a step up, towards the
                // configured ceiling, is taken unless it lost more than
                // the tie: more reads in flight are more completions per
                // wait, less CPU per read, where the device does not care.
                let margin = if up {
                    -TIE
                } else {
                    TIE.max(NOISE_MARGIN * self.noise)
                };
                if probed > reference * (1.0 + margin) {
                    // The step gained: take it, and probe the next one the
                    // same way against the rate just measured there.
                    self.idx = there;
                    self.rest = REST_MIN;
                    if up || (there > self.bottom && !self.clearly_worse(there - 1)) {
                        self.probe(probed, up)
                    } else {
                        self.rest_now()
                    }
                } else if !up {
                    // Down lost: try up, against the depth's latest rate.
                    self.probe(rate, true)
                } else {
                    self.rest_now()
                }
            }
        };
    }

    /// The next step from the current depth, whose latest rate is `rate`:
    /// a probe down (unless `up`), else up, else a rest.
    fn probe(&mut self, rate: f64, up: bool) -> Step {
        let from = self.idx;
        if !up && from > self.bottom && !self.clearly_worse(from - 1) {
            self.idx = from - 1;
            return Step::Probe {
                from,
                before: rate,
                up: false,
            };
        }
        if from < self.top && !self.clearly_worse(from + 1) {
            self.idx = from + 1;
            return Step::Probe {
                from,
                before: rate,
                up: true,
            };
        }
        self.rest_now()
    }

    /// Whether a probe found depth `idx` clearly worse recently.
    fn clearly_worse(&self, idx: usize) -> bool {
        self.worse[idx].is_some_and(|when| self.measurements - when < MEMORY)
    }

    /// A probe found nothing better: rest, longer each time in a row.
    fn rest_now(&mut self) -> Step {
        let r = self.rest;
        self.rest = (self.rest * 2).min(REST_MAX);
        Step::Rest(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device whose throughput at each depth is `curve(depth)` bytes/s:
    /// feeds the controller completions at that rate for `secs` seconds
    /// and returns the depths it used, one per completion.
    fn drive(d: &mut Depth, secs: f64, mut curve: impl FnMut(u32) -> f64) -> Vec<u32> {
        let t0 = Instant::now();
        let mut t = 0.0;
        let mut used = Vec::new();
        while t < secs {
            let l = d.limit();
            let rate = curve(l);
            // 100 KiB reads.
            t += 102_400.0 / rate;
            d.complete(t0 + Duration::from_secs_f64(t), 102_400, true);
            used.push(l);
        }
        used
    }

    /// xorshift64: a fixed sequence, so that the tests are repeatable.
    struct Rng(u64);

    impl Rng {
        /// Uniform in [0, 1).
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn settled(used: &[u32]) -> u32 {
        let tail = &used[used.len() * 3 / 4..];
        let mut v = tail.to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    }

    #[test]
    fn climbs_to_the_ceiling_while_depth_helps() {
        assert_eq!(Depth::new(64).limit(), START);
        assert_eq!(Depth::new(24).limit(), 24);
        assert_eq!(Depth::new(2).limit(), 2);
        let mut d = Depth::new(50);
        assert_eq!(settled(&drive(&mut d, 60.0, |l| 1e6 * l as f64)), 48);
        let mut d = Depth::new(64);
        let used = drive(&mut d, 120.0, |l| 1e6 * l as f64);
        assert!(used.iter().all(|&l| l <= 64));
        assert_eq!(settled(&used), 64, "more depth always helped");
    }

    /// The emulated RAID1 (slowdisk, the seed's model) measured at fixed
    /// depths (fetches/s of 100 KiB): a plateau from 24 to 48, a cliff at
    /// 64 where reads outlast the 500 ms deadline.
    fn slowdisk(l: u32) -> f64 {
        let points = [
            (4, 120.0),
            (8, 161.0),
            (16, 177.4),
            (24, 184.6),
            (32, 187.7),
            (40, 190.9),
            (48, 191.0),
            (64, 140.4),
            (1024, 100.0),
        ];
        let i = points.iter().position(|&(d, _)| d >= l).unwrap();
        let (d1, r1) = points[i];
        if i == 0 || d1 == l {
            return r1 * 102_400.0;
        }
        let (d0, r0) = points[i - 1];
        (r0 + (r1 - r0) * (l - d0) as f64 / (d1 - d0) as f64) * 102_400.0
    }

    #[test]
    fn finds_an_elevators_plateau_through_noise() {
        // Each read's time off by a factor between 1/1.5 and 2: a
        // 256-read interval's rate then varies by about 2%, as measured
        // on slowdisk at a fixed depth (1.7%).
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut noisy = |l: u32| slowdisk(l) * (0.5 + rng.next());
        let mut d = Depth::new(64);
        let used = drive(&mut d, 600.0, &mut noisy);
        let s = settled(&used);
        assert!((24..=48).contains(&s), "settled at {s}");
        let tail = &used[used.len() / 2..];
        let mean = tail.iter().map(|&l| slowdisk(l)).sum::<f64>() / tail.len() as f64;
        assert!(
            mean >= 0.97 * slowdisk(48),
            "{:.1} fetches/s against a peak of 191",
            mean / 102_400.0
        );
    }

    #[test]
    fn a_flat_device_goes_to_the_ceiling_through_a_warm_up() {
        // Flat over depth, but ramping up over the first 20 s (a cold
        // cache warming): A B A probes must not take the ramp for a gain.
        // Each read's time is exponential (an interval's rate varies by
        // about 6%, more than this machine's virtual disk showed).
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut t = 0.0f64;
        let mut d = Depth::new(64);
        let t0 = Instant::now();
        let mut used = Vec::new();
        while t < 300.0 {
            let ramp = (0.3 + t / 20.0).min(1.0);
            t += 102_400.0 / (80e6 * ramp) * -(1.0 - rng.next()).ln();
            d.complete(t0 + Duration::from_secs_f64(t), 102_400, true);
            used.push(d.limit());
        }
        let low = used.iter().filter(|&&l| l < 48).count();
        assert!(
            low * 20 < used.len(),
            "{low} of {} reads below 48",
            used.len()
        );
        assert_eq!(settled(&used), 64);
    }

    #[test]
    fn an_unbound_depth_is_not_measured() {
        let mut d = Depth::new(64);
        let t0 = Instant::now();
        for i in 0..100_000u64 {
            let changed = d.complete(t0 + Duration::from_millis(i), 4096, false);
            assert!(!changed);
        }
        assert_eq!(d.limit(), START);
    }

    #[test]
    fn never_below_the_floor() {
        let mut d = Depth::new(64);
        // Each read in flight slows the others (a device that thrashes).
        let used = drive(&mut d, 300.0, |l| 1e9 / l as f64);
        assert!(used.iter().all(|&l| l >= FLOOR));
        assert_eq!(settled(&used), FLOOR);
    }
}
