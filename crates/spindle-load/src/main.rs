//! `spindle-load`: see `spindle-load --help`.

use spindle_load::cli::{self, Command, USAGE};
use spindle_load::report::{cpu_report, http_load_report, latency_report};
use spindle_load::run::{run, RunError};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match cli::parse(&args) {
        Ok(Command::Run(cfg)) => cfg,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("spindle-load {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("spindle-load: {e}");
            return ExitCode::from(2);
        }
    };
    let summary = match run(&cfg) {
        Ok(s) => s,
        Err(RunError::Input(e)) => {
            eprintln!("spindle-load: {e}");
            return ExitCode::from(2);
        }
        Err(RunError::Fatal(e)) => {
            eprintln!("spindle-load: {e}");
            return ExitCode::from(1);
        }
    };
    let mut out = http_load_report(&summary);
    if cfg.latency {
        out.push_str(&latency_report(&summary));
    }
    if let Some(cpu) = &summary.cpu {
        out.push_str(&cpu_report(cpu));
    }
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(out.as_bytes())
        .and_then(|_| stdout.flush())
        .is_err()
    {
        return ExitCode::from(1);
    }
    if let Some(path) = &cfg.json {
        let text = serde_json::to_string_pretty(&summary).expect("summary serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("spindle-load: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
