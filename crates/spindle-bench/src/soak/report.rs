//! The soak's report: soak.md for a reader, soak.json with every sample.

use anyhow::Result;
use serde_json::json;

use super::clients::MIX;
use super::{
    Outcome, Sample, SoakArgs, FDS_FLOOR, GROWTH_SHARE, HEADER_TIMEOUT_S, MIN_GROWTH_MINUTES,
    RSS_FLOOR_KIB,
};

pub(super) fn write(a: &SoakArgs, seed: u64, outcomes: &[Outcome]) -> Result<()> {
    std::fs::create_dir_all(&a.out)?;
    let cmd = std::env::args().collect::<Vec<_>>().join(" ");
    let mut md = format!(
        "# soak: mixed traffic, RSS and descriptors over time\n\nCommand: `{cmd}` (seed {seed})\n\n\
{} scenarios per second, {} client threads, {} idle keep-alive connections held and recycled, one worker, \
`--header-timeout {HEADER_TIMEOUT_S}`. Growth is the least-squares slope over the last half of the run, per hour; \
a run fails on growth above {:.0}% of the mean (at least {RSS_FLOOR_KIB:.0} KiB of RSS or {FDS_FLOOR:.0} descriptors), \
a CQ overflow, a server exit or any failed client check; runs under {MIN_GROWTH_MINUTES:.0} minutes are not judged on growth \
(warming up dominates them).{}\n\n\
| server | minutes | requests | failed checks | stalls | skipped | faults seen: 500 / cut | RSS KiB start / end / max | RSS growth KiB/h | fds start / end / max | fds growth /h | CQ overflows | verdict |\n\
|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|---|\n",
        a.rate, a.clients, a.idle, GROWTH_SHARE * 100.0,
        if a.fail_rate > 0.0 {
            format!(
                " Files served through slowdisk with {:.1}% of reads failing (EIO, seeded): a client accepts a 500, or correct bytes cut short by a close, and counts it as a fault seen; the churned files stay still.",
                a.fail_rate * 100.0
            )
        } else {
            String::new()
        }
    );
    for o in outcomes {
        let f = |g: &dyn Fn(&Sample) -> u64| {
            format!(
                "{} / {} / {}",
                o.samples.first().map_or(0, g),
                o.samples.last().map_or(0, g),
                o.samples.iter().map(g).max().unwrap_or(0)
            )
        };
        md += &format!(
            "| {} | {:.1} | {} | {} | {} | {} | {} / {} | {} | {:.0} | {} | {:.1} | {} | {} |\n",
            o.name,
            o.seconds / 60.0,
            o.requests,
            o.errors,
            o.stalls,
            o.skipped,
            o.fault_500,
            o.fault_cut,
            f(&|s| s.rss_kib),
            o.rss_growth_per_hour,
            f(&|s| s.fds),
            o.fds_growth_per_hour,
            o.samples.iter().map(|s| s.cq_overflow).max().unwrap_or(0),
            if o.verdict.is_empty() {
                "pass".to_string()
            } else {
                o.verdict.join("; ")
            }
        );
    }
    md += "\nScenarios started, per server:\n\n| server |";
    for (sc, _) in MIX {
        md += &format!(" {sc:?} |");
    }
    md += "\n|---|";
    md += &"---:|".repeat(MIX.len());
    md += "\n";
    for o in outcomes {
        md += &format!("| {} |", o.name);
        for c in o.counts {
            md += &format!(" {c} |");
        }
        md += "\n";
    }
    for o in outcomes.iter().filter(|o| !o.first_errors.is_empty()) {
        md += &format!("\nFirst failed checks, {}:\n\n", o.name);
        for e in &o.first_errors {
            md += &format!("- {e}\n");
        }
    }
    std::fs::write(a.out.join("soak.md"), md)?;
    let json = json!({
        "command": cmd,
        "seed": seed,
        "rate": a.rate,
        "fail_rate": a.fail_rate,
        "servers": outcomes.iter().map(|o| json!({
            "server": o.name,
            "seconds": o.seconds,
            "requests": o.requests,
            "errors": o.errors,
            "stalls": o.stalls,
            "skipped": o.skipped,
            "connect_failures": o.connect_failures,
            "fault_500": o.fault_500,
            "fault_cut": o.fault_cut,
            "crashed": o.crashed,
            "scenarios": MIX.iter().zip(o.counts).map(|((sc, _), c)| (format!("{sc:?}"), c)).collect::<std::collections::BTreeMap<_, _>>(),
            "rss_growth_kib_per_hour": o.rss_growth_per_hour,
            "fds_growth_per_hour": o.fds_growth_per_hour,
            "first_errors": o.first_errors,
            "verdict": o.verdict,
            "samples": o.samples.iter().map(|s| json!([s.t, s.rss_kib, s.fds, s.cq_overflow])).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        a.out.join("soak.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}
