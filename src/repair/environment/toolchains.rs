//! The layers of the runners outside Python: Rust (the host's toolchain), Go and Node, each
//! on [`super::repo_layer`].

use crate::sandbox::{LayerSpec, ParentImage};
use crate::shell::NulByte;
use crate::tasks::TaskEnvironment;

use super::{apt_step, repo_layer, RepoTree, TaskError, TreeFiles, SYSTEM_PATH};

/// The toolchain of the host's `rustc` (rustup's, usually), copied into a layer with a C
/// linker from Debian: Debian bookworm's own Rust (1.63) is too old for most crates, and no
/// toolchain download site may be reachable. The tag hashes `rustc -vV` and `cargo -V`.
fn rust_toolchain() -> Result<LayerSpec, TaskError> {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let rustc = crate::env::get(crate::env::RUSTC).unwrap_or_else(|| "rustc".into());
    let sysroot = run(&rustc, &["--print", "sysroot"]).ok_or(TaskError::NoRustc)?;
    let identity = format!(
        "{}\n{}",
        run(&rustc, &["-vV"]).unwrap_or_default(),
        run(&format!("{sysroot}/bin/cargo"), &["-V"]).unwrap_or_default()
    );
    let dockerfile = format!(
        "ARG BASE\nFROM ${{BASE}}\nUSER root\n{}\nCOPY host/ /opt/rust/\nENV PATH=/opt/rust/bin:{SYSTEM_PATH}\nUSER sandbox\n",
        apt_step(&["gcc".into(), "libc6-dev".into(), "ca-certificates".into()], &[])?
    );
    let host_dir = crate::sandbox::layers::HostDir {
        root: sysroot.into(),
        include: vec!["bin/cargo".into(), "bin/rustc".into(), "bin/rustdoc".into(), "lib".into()],
        identity,
    };
    Ok(LayerSpec::new(
        "rust-toolchain",
        vec![("Dockerfile".into(), dockerfile.into_bytes())],
        ParentImage::Default,
    )
    .with_host_dir(host_dir))
}

/// Dependencies fetched with the network (`cargo fetch`), the tests built once so the
/// dependencies are compiled in the kept `target/`; tests then run `--offline`.
pub(super) fn cargo_layer(extras: &TaskEnvironment, repo_tree: RepoTree) -> Result<LayerSpec, TaskError> {
    let toolchain = rust_toolchain()?;
    let prepare = vec![
        "ENV CARGO_HOME=/workspace/.cargo-home".to_owned(),
        "RUN cargo fetch".to_owned(),
        // The base commit may not build its tests; what compiled is still reused.
        "RUN cargo test --offline --no-run || true".to_owned(),
    ];
    Ok(repo_layer("env-cargo", ParentImage::Layer(Box::new(toolchain)), extras, repo_tree, &prepare, &[])?)
}

/// Debian's Go; modules downloaded with the network (through the host's `GOPROXY` when set),
/// the build cache warmed; tests then run with `GOPROXY=off`.
pub(super) fn go_layer(extras: &TaskEnvironment, repo_tree: RepoTree) -> Result<LayerSpec, NulByte> {
    let prepare = vec![
        apt_step(&["golang-go".into(), "ca-certificates".into()], &[])?,
        "ENV GOPATH=/workspace/.go GOCACHE=/workspace/.go/cache".to_owned(),
        "RUN if [ -f go.sum ]; then go mod download; fi".to_owned(),
        "RUN go test -count=1 -run '^$' ./... || true".to_owned(),
    ];
    let after = vec!["ENV GOPROXY=off GOFLAGS=-mod=readonly".to_owned()];
    repo_layer("env-go", ParentImage::Default, extras, repo_tree, &prepare, &after)
}

/// Debian's Node; `npm ci` (through the host's `NPM_CONFIG_REGISTRY` when set) only when
/// package.json declares dependencies.
pub(super) fn node_layer(
    files: &TreeFiles<'_>,
    extras: &TaskEnvironment,
    repo_tree: RepoTree,
) -> Result<LayerSpec, NulByte> {
    let declares_dependencies = files
        .read("package.json")
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|package| {
            ["dependencies", "devDependencies"]
                .iter()
                .any(|k| package.get(k).and_then(|d| d.as_object()).is_some_and(|d| !d.is_empty()))
        });
    let mut packages = vec!["nodejs".to_owned()];
    let mut prepare = Vec::new();
    if declares_dependencies {
        packages.push("npm".into());
        prepare.push("RUN if [ -f package-lock.json ]; then npm ci; else npm install; fi".to_owned());
    }
    prepare.insert(0, apt_step(&packages, &[])?);
    repo_layer("env-node", ParentImage::Default, extras, repo_tree, &prepare, &[])
}
