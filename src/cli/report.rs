//! `report DIR`: writes a finished run's views again (report.md, junit.xml, report.html).

use std::path::PathBuf;

use clap::Args;
use repairbench::run::regenerate;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A finished run's output folder: `swe grade` or `swe run` (report.json), or `eval`
    /// (results.json and samples.jsonl). For `repairbench run`, OUT/repair or OUT/humaneval.
    pub dir: PathBuf,
}

pub fn run(args: ReportArgs) -> anyhow::Result<u8> {
    let done = regenerate::regenerate(&args.dir)?;
    println!("{} ({} items):", done.run, done.items);
    for file in &done.files {
        println!("  wrote {}", file.display());
    }
    Ok(super::EXIT_OK)
}
