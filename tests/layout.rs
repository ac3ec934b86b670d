//! The layering and single-helper rules of ARCHITECTURE.md, checked on the source text: no
//! module imports a layer above it or a peer, no source file is over 600 lines, only `main`
//! exits, only clap value parsers return `Result<_, String>`, and each helper exists once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layers from the bottom; a module may import only from lower layers (and from itself).
const LAYERS: &[&[&str]] = &[
    // lib.rs's own items (error_chain, progress) and the one-helper modules.
    &["lib", "dates", "deadline", "digest", "env", "http", "order", "rng", "shell"],
    &["perturb"],
    &["model", "sandbox", "grade", "stats"],
    &["patch", "report"],
    &["kernel", "tasks"],
    &["executor"],
    &["repair", "suites", "serve"],
    &["probe"],
    &["run"],
    &["compare"],
    &["cli", "main"],
];

/// Items of lib.rs that modules reach as `crate::NAME`.
const LIB_ITEMS: &[&str] = &["error_chain", "progress", "PROGRESS"];

const MAX_LINES: usize = 600;

struct Source {
    path: PathBuf,
    /// The module it belongs to: the first component under src/ (`lib`, `main` for those files).
    module: String,
    /// The text without comments and without its `#[cfg(test)]` tail.
    code: String,
    lines: usize,
}

fn sources() -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let relative = path.strip_prefix(&root).unwrap();
            let first = relative.components().next().unwrap().as_os_str().to_string_lossy();
            let module = first.trim_end_matches(".rs").to_owned();
            let body = text.split("#[cfg(test)]").next().unwrap();
            let code: String = body
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| format!("{l}\n"))
                .collect();
            Source { path: relative.to_owned(), module, code, lines: text.lines().count() }
        })
        .collect()
}

fn layer_of(module: &str) -> usize {
    let module = if LIB_ITEMS.contains(&module) { "lib" } else { module };
    LAYERS.iter().position(|layer| layer.contains(&module)).unwrap_or_else(|| {
        panic!("module `{module}` is in no layer of tests/layout.rs; add it where it belongs")
    })
}

/// Every `crate::NAME` and `repairbench::NAME` a source names.
fn imports(source: &Source) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in ["crate::", "repairbench::"] {
        for (at, _) in source.code.match_indices(prefix) {
            let before = source.code[..at].chars().next_back();
            // A path inside a string (a tracing target) is no import.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '"') {
                continue;
            }
            let name: String = source.code[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
        // `use crate::{a, b}`.
        for (at, _) in source.code.match_indices(&format!("{prefix}{{")) {
            let list = &source.code[at + prefix.len() + 1..];
            let list = &list[..list.find('}').unwrap_or(list.len())];
            for item in list.split(',') {
                let name: String =
                    item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        }
    }
    found
}

#[test]
fn no_module_imports_its_own_layer_or_one_above() {
    let sources = sources();
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    for source in &sources {
        let from = layer_of(&source.module);
        for name in imports(source) {
            if name == source.module || name == "self" || name == "super" {
                continue;
            }
            *edges.entry((source.module.clone(), name.clone())).or_default() += 1;
            if layer_of(&name) >= from {
                wrong.push(format!("{} ({}) imports {name}", source.path.display(), source.module));
            }
        }
    }
    assert!(edges.len() > 40, "the import scan found too little to mean anything: {edges:?}");
    assert!(wrong.is_empty(), "imports against the layering:\n{}", wrong.join("\n"));
}

#[test]
fn the_scan_sees_an_upward_import() {
    // The check above could pass by seeing nothing: a known downward import and a made-up
    // upward one must both be seen.
    let source = |module: &str, code: &str| Source {
        path: PathBuf::from("x.rs"),
        module: module.into(),
        code: code.into(),
        lines: 1,
    };
    let kernel =
        source("kernel", "use crate::{report::Reporter, suites::Suite};\nfn f() { crate::repair::x() }");
    let found = imports(&kernel);
    assert_eq!(found, ["repair", "report", "suites"]);
    assert!(found.iter().any(|n| layer_of(n) >= layer_of("kernel")));
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|s| s.lines > MAX_LINES)
        .map(|s| format!("{}: {} lines", s.path.display(), s.lines))
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines:\n{}", long.join("\n"));
}

/// Sources (other than `allowed`) whose code contains `needle`.
fn users_of(needle: &str, allowed: &[&str]) -> Vec<String> {
    sources()
        .iter()
        .filter(|s| s.code.contains(needle))
        .map(|s| s.path.display().to_string())
        .filter(|p| !allowed.contains(&p.as_str()))
        .collect()
}

/// The error type of every `Result<T, E>` on `line`: its last top-level argument.
fn error_types(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("Result<") {
        let (mut depth, mut last_comma, mut end) = (0usize, None, None);
        let args = &line[at + "Result<".len()..];
        for (i, c) in args.char_indices() {
            match c {
                '<' | '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                '>' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                '>' => depth -= 1,
                ',' if depth == 0 => last_comma = Some(i),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (last_comma, end) {
            found.push(args[comma + 1..end].trim().to_owned());
        }
    }
    found
}

#[test]
fn error_types_are_the_last_argument() {
    assert_eq!(error_types("fn f() -> Result<BTreeMap<String, String>, CiError> {"), ["CiError"]);
    assert_eq!(error_types("fn parse_x(t: &str) -> Result<u64, String>"), ["String"]);
    assert_eq!(error_types("fn g() -> Result<(u8, String), std::string::String>"), ["std::string::String"]);
    assert!(error_types("fn h() -> io::Result<String>").is_empty());
}

#[test]
fn only_main_exits_and_only_clap_parsers_return_string_errors() {
    assert_eq!(users_of("process::exit", &["main.rs"]), Vec::<String>::new());
    let mut string_errors = Vec::new();
    for source in sources() {
        for line in source.code.lines() {
            let string_error = error_types(line).iter().any(|e| e == "String" || e == "std::string::String");
            if string_error && !line.contains("fn parse_") {
                string_errors.push(format!("{}: {}", source.path.display(), line.trim()));
            }
        }
    }
    assert!(
        string_errors.is_empty(),
        "Result<_, String> outside clap value parsers:\n{}",
        string_errors.join("\n")
    );
}

#[test]
fn each_helper_exists_once() {
    let none: Vec<String> = Vec::new();
    // SHA-256: digest.rs; the results channel's HMAC and the report's CSP hash use the
    // primitive itself (an HMAC and a base64 digest are not hex helpers).
    assert_eq!(users_of("sha2::", &["digest.rs", "grade/channel.rs", "report/html.rs"]), none);
    assert_eq!(users_of("std::env::var", &["env.rs"]), none, "environment variables are read in src/env.rs");
    assert_eq!(users_of("env::var(", &["env.rs"]), none);
    assert_eq!(users_of("/dev/urandom", &[]), none);
    assert_eq!(users_of("'\\\\''", &["shell.rs"]), none, "shell quoting is src/shell.rs");
    assert_eq!(users_of("<testsuites", &["report/junit.rs"]), none, "one JUnit writer");
    assert_eq!(users_of("\\x1b[", &[]), none, "ANSI stripping is strip-ansi-escapes");
    let printing: Vec<String> = sources()
        .iter()
        .filter(|s| s.module != "cli" && s.module != "main" && s.path != Path::new("report/mod.rs"))
        .filter(|s| s.code.contains("eprintln!") || s.code.contains("println!(\""))
        .map(|s| s.path.display().to_string())
        .collect();
    assert_eq!(
        printing, none,
        "the library logs through tracing; only the CLI and the console reporter print"
    );
}
