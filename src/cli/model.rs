use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ModelCommand {}

pub fn run(cmd: ModelCommand) -> anyhow::Result<u8> {
    match cmd {}
}
