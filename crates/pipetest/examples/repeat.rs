//! Diagnostic: run one configuration several times in one process and print
//! each run's rates, to see whether earlier runs affect later ones.
//! `cargo run --release -p pipetest --example repeat -- MODEL ROUTE FDS TIMES [PASSES]`

use pipetest::{raise_nofile, run_once, Config, Model, Route};

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        anyhow::bail!("usage: repeat MODEL[,MODEL...] ROUTE(ring|pair) FDS TIMES [PASSES]");
    }
    let mut models = Vec::new();
    for m in a[1].split(',') {
        models.push(match m {
            "poll" => Model::Poll,
            "epoll" => Model::Epoll,
            "aio-poll" => Model::AioPoll,
            "uring-poll" => Model::UringPoll,
            "uring-read" => Model::UringRead,
            m => anyhow::bail!("unknown model {m}"),
        });
    }
    let route = if a[2] == "pair" {
        Route::Pair
    } else {
        Route::Ring
    };
    let fds: usize = a[3].parse()?;
    let times: usize = a[4].parse()?;
    let passes: u64 = a.get(5).map_or(Ok(40_000), |s| s.parse())?;
    raise_nofile(2 * fds + 64)?;
    for k in 0..times {
        let model = models[k % models.len()];
        let passes = if model == Model::Poll {
            passes / 100
        } else {
            passes
        };
        let mut c = Config::new(model, fds, 1, 12, passes);
        c.route = route;
        let t = std::time::Instant::now();
        let r = run_once(&c)?;
        println!(
            "run {k} {}: {:.0} passes/cpu-s, {:.0} passes/s, whole run incl. setup {:.3}s",
            r.label,
            r.passes_per_cpu_sec,
            r.passes_per_sec,
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
