use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum SweCommand {}

pub fn run(cmd: SweCommand) -> anyhow::Result<u8> {
    match cmd {}
}
