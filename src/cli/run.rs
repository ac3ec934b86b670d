use clap::Args;

#[derive(Debug, Args)]
pub struct RunArgs {}

pub fn run(_args: RunArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
