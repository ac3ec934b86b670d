//! `sandbox`: flags resolved, then one call into [`repairbench::run::images`].

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use repairbench::run::images;
use repairbench::sandbox::output::{OutputChunk, StreamKind};
use repairbench::sandbox::{Limits, Verdict};

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run one command in the hardened sandbox: no network, non-root, memory/CPU/pids limits,
    /// read-only root filesystem with only /workspace and /tmp writable, a deadline.
    ///
    /// Streams the command's output, then prints a one-line verdict on stderr (`exit N`,
    /// `timeout`, `oom`, `error: ...`). Exit status: `exit N` passes N through, `timeout` 124,
    /// `oom` 137, `error` (or a failure of repairbench itself) 1, Ctrl-C 130.
    Run(RunArgs),
    /// Remove containers, networks and volumes left by crashed repairbench runs.
    Reap,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Image to run in (default: the default Python image, built if missing).
    #[arg(long)]
    image: Option<String>,
    /// Wall-clock deadline in seconds; the container is killed when it passes.
    #[arg(long, default_value = "60", value_parser = repairbench::deadline::parse_timeout)]
    timeout: Duration,
    /// Memory limit, e.g. 512m, 2g (no swap on top).
    #[arg(long, default_value = "2g", value_parser = parse_size)]
    memory: u64,
    /// CPUs (fractions allowed).
    #[arg(long, default_value_t = 1.0)]
    cpus: f64,
    /// Maximum number of processes and threads.
    #[arg(long, default_value_t = 256)]
    pids: i64,
    /// Bytes of stdout (and of stderr) kept: the first half and the last half; the middle is
    /// cut and flagged.
    #[arg(long, default_value = "1m", value_parser = parse_size)]
    output_cap: u64,
    /// Directory whose contents are copied into /workspace before the command runs.
    #[arg(long)]
    copy_in: Option<PathBuf>,
    /// Print the result as one JSON object instead of streaming output.
    #[arg(long)]
    json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

/// Parses a size like `512m`, `2g`, `1.5G`, `4096` (bytes); suffixes are powers of 1024.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
    let (number, unit) = lower.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size (expected a number with an optional k/m/g/t suffix)"))?;
    let scale: u64 = match unit.trim().trim_end_matches('b').trim_end_matches('i') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        other => return Err(format!("unknown size unit `{other}` in `{text}` (expected k, m, g or t)")),
    };
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("size `{text}` must be positive"));
    }
    Ok((value * scale as f64) as u64)
}

pub fn run(cmd: SandboxCommand) -> anyhow::Result<u8> {
    match cmd {
        SandboxCommand::Run(args) => run_one(args),
        SandboxCommand::Reap => {
            let reaped = images::reap()?;
            println!(
                "removed {} containers, {} networks, {} volumes",
                reaped.containers, reaped.networks, reaped.volumes
            );
            Ok(super::EXIT_OK)
        }
    }
}

fn run_one(args: RunArgs) -> anyhow::Result<u8> {
    let run = images::SandboxRun {
        image: args.image,
        limits: Limits {
            memory_bytes: args.memory,
            cpus: args.cpus,
            pids: args.pids,
            output_cap_bytes: args.output_cap as usize,
            // `sandbox run`'s workspace is on disk: files go in before the command and come out after.
            ..Limits::default()
        },
        timeout: args.timeout,
        copy_in: args.copy_in,
        cmd: args.cmd,
    };
    let print = |chunk: OutputChunk| {
        let _ = match chunk.stream {
            StreamKind::Stdout => {
                std::io::stdout().write_all(&chunk.bytes).and_then(|_| std::io::stdout().flush())
            }
            StreamKind::Stderr => std::io::stderr().write_all(&chunk.bytes),
        };
    };
    let on_output: Option<Box<dyn FnMut(OutputChunk) + Send>> = (!args.json).then(|| Box::new(print) as _);
    let (image, result) = images::run_in_sandbox(run, on_output)?;
    if args.json {
        let (exit_code, error) = match &result.verdict {
            Verdict::Exit(code) => (Some(*code), None),
            Verdict::Error(message) => (None, Some(message.clone())),
            _ => (None, None),
        };
        let object = serde_json::json!({
            "verdict": result.verdict.kind(),
            "exit_code": exit_code,
            "error": error,
            "duration_s": result.duration.as_secs_f64(),
            "image": image,
            "stdout_truncated": result.stdout_truncated,
            "stderr_truncated": result.stderr_truncated,
            "stdout": result.stdout,
            "stderr": result.stderr,
        });
        println!("{object}");
    } else {
        let mut notes = Vec::new();
        if result.stdout_truncated {
            notes.push("stdout truncated");
        }
        if result.stderr_truncated {
            notes.push("stderr truncated");
        }
        let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
        eprintln!("{}{notes}", result.verdict);
    }
    Ok(super::sandbox_exit_status(&result.verdict))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_suffixes_and_bad_ones_say_why() {
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert!(parse_size("12x").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("lots").unwrap_err().contains("not a size"));
        assert!(parse_size("0").unwrap_err().contains("positive"));
    }
}
