//! Embeds the git commit repairbench is built from (`-dirty` when the work tree differs), so
//! every result can say which code made it and resume can tell when the code changed.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            // Untracked files count too: a new source file changes the build.
            let dirty =
                git(&["status", "--porcelain", "--untracked-files=normal"]).is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{head}-dirty")
            } else {
                head
            }
        }
        None => format!("unknown-{}", std::env::var("CARGO_PKG_VERSION").unwrap_or_default()),
    };
    println!("cargo:rustc-env=REPAIRBENCH_BUILD_COMMIT={commit}");
    // Rerun when the sources or the commit change (listing paths turns off cargo's default of
    // rerunning on any change in the package).
    for path in [
        "src",
        "harness",
        "dockerfiles",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        ".git/HEAD",
        ".git/index",
        ".git/refs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
