//! `spindle-bench pipetest`: not built yet.

/// Command-line arguments of `spindle-bench pipetest`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `spindle-bench pipetest`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("pipetest is not implemented yet")
}
