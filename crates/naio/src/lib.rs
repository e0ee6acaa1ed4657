//! `spindle-bench naio`: not built yet.

/// Command-line arguments of `spindle-bench naio`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `spindle-bench naio`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("naio is not implemented yet")
}
