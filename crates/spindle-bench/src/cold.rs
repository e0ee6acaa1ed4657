use anyhow::Result;
#[derive(clap::Args, Debug, Clone)]
pub struct ColdArgs {}
pub fn run(_a: ColdArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
