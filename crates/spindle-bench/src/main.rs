//! `spindle-bench`: a thin dispatcher over the benchmark crates.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "spindle-bench", version, about = "spindle's benchmark suite")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Token passing through pipes under each I/O model (LaHaise, OLS 2002).
    Pipetest(pipetest::Args),
    /// Asynchronous against synchronous network send and receive.
    Naio(naio::Args),
    /// A FUSE mirror of a directory whose reads are delayed by a seek-bound disk model.
    Slowdisk(slowdisk::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pipetest(a) => pipetest::run(a),
        Command::Naio(a) => naio::run(a),
        Command::Slowdisk(a) => slowdisk::run(a),
    };
    if let Err(e) = result {
        eprintln!("spindle-bench: error: {e:#}");
        std::process::exit(1);
    }
}
