use super::*;

/// A repository holding `files` in one commit; returns the repo and the tree id.
fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository, git2::Oid) {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::init(dir.path()).unwrap();
    let mut index = repo.index().unwrap();
    for (path, text) in files {
        let blob = repo.blob(text.as_bytes()).unwrap();
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: 0o100644,
            uid: 0,
            gid: 0,
            file_size: text.len() as u32,
            id: blob,
            flags: 0,
            flags_extended: 0,
            path: path.as_bytes().to_vec(),
        };
        index.add(&entry).unwrap();
    }
    let tree = index.write_tree().unwrap();
    (dir, repo, tree)
}

/// [`repo_with`], committed at `seconds` since the epoch; also returns the commit.
fn repo_with_commit(
    files: &[(&str, &str)],
    seconds: i64,
) -> (tempfile::TempDir, Repository, git2::Oid, git2::Oid) {
    let (dir, repo, tree) = repo_with(files);
    let signature = git2::Signature::new("t", "t@example.com", &git2::Time::new(seconds, 0)).unwrap();
    let commit =
        repo.commit(None, &signature, &signature, "base", &repo.find_tree(tree).unwrap(), &[]).unwrap();
    (dir, repo, tree, commit)
}

fn task(test_patch_file: &str, environment: Option<TaskEnvironment>) -> SweTask {
    let text = serde_json::json!({
        "repo": "acme/x", "instance_id": "x-1", "base_commit": "0",
        "test_patch": format!("diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-a\n+b\n", f = test_patch_file),
        "FAIL_TO_PASS": [],
    });
    let mut task: SweTask = serde_json::from_value(text).unwrap();
    task.environment = environment;
    task
}

fn dockerfile(environment: &Environment) -> Option<String> {
    match &environment.image {
        ImageChoice::Build(layer) => Some(
            String::from_utf8(layer.files.iter().find(|(p, _)| p == "Dockerfile").unwrap().1.clone())
                .unwrap(),
        ),
        _ => None,
    }
}

#[test]
fn a_self_contained_python_project_runs_in_the_run_image() {
    let (_dir, repo, tree) = repo_with(&[
        ("pyproject.toml", "[project]\nname = \"x\"\nversion = \"1\"\n"),
        ("x/__init__.py", ""),
        ("tests/test_x.py", "def test(): pass\n"),
    ]);
    let tree = repo.find_tree(tree).unwrap();
    let environment = plan(&repo, &tree, &task("tests/test_x.py", None)).unwrap();
    assert_eq!(environment.runner, RunnerKind::Pytest);
    assert!(matches!(environment.image, ImageChoice::RunImage), "{environment:?}");
}

#[test]
fn dependencies_src_layout_and_extras_are_installed() {
    let (_dir, repo, tree) = repo_with(&[
        (
            "pyproject.toml",
            "[build-system]\nrequires = [\"setuptools>=61\"]\n[project]\nname = \"x\"\nversion = \"1\"\n\
             dependencies = [\"packaging>=23\"]\n[project.optional-dependencies]\ntest = [\"pytest\"]\ndocs = [\"sphinx\"]\n",
        ),
        ("src/x/__init__.py", ""),
        ("requirements-dev.txt", "hypothesis\n"),
        ("requirements/tests.txt", "python-dotenv==1.0.0\n"),
        ("requirements/docs.txt", "sphinx\n"),
    ]);
    let tree = repo.find_tree(tree).unwrap();
    let extras = TaskEnvironment {
        pip: vec!["pyflakes==3.2.0".into()],
        apt: vec!["libpq-dev".into()],
        ..Default::default()
    };
    let environment = plan(&repo, &tree, &task("tests/test_x.py", Some(extras))).unwrap();
    let dockerfile = dockerfile(&environment).expect("a layer is built");
    assert!(dockerfile.contains("RUN /opt/repairbench/pip-install -e '.[test]'"), "{dockerfile}");
    assert!(dockerfile.contains("RUN /opt/repairbench/pip-install -r requirements-dev.txt"), "{dockerfile}");
    assert!(
        dockerfile.contains("RUN /opt/repairbench/pip-install -r requirements/tests.txt"),
        "{dockerfile}"
    );
    assert!(!dockerfile.contains("docs.txt"), "{dockerfile}");
    // The task's own pins carry no date; everything else is resolved as of the commit (none here).
    assert!(
        dockerfile
            .contains("RUN REPAIRBENCH_PACKAGES_AS_OF= REPAIRBENCH_OVERRIDES= /opt/repairbench/pip-install 'pyflakes==3.2.0'\n"),
        "{dockerfile}"
    );
    assert!(dockerfile.contains("--no-install-recommends python3-venv libpq-dev "), "{dockerfile}");
    assert!(!dockerfile.contains("docs"), "only test extras: {dockerfile}");
    // The tree's own files go (each run copies the tree under test in); what the build
    // made stays.
    assert!(dockerfile.contains("xargs -0 rm -f -- < /tmp/rb-tree-files"));
    assert!(dockerfile.contains("SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0"));
}

#[test]
fn compiled_extensions_get_a_compiler_and_a_rebuild_before_the_tests() {
    let setup =
        "from setuptools import Extension, setup\nsetup(ext_modules=[Extension('m._c', ['m/_c.c'])])\n";
    let cython = "[build-system]\nrequires = [\"setuptools\", \"Cython>=3\"]\n[project]\nname = \"x\"\nversion = \"1\"\n";
    let plain = "[project]\nname = \"x\"\nversion = \"1\"\ndependencies = [\"packaging\"]\n";
    for (files, compiled, rebuild) in [
        (vec![("setup.py", setup)], true, "setup.py --quiet build_ext --inplace --force"),
        (vec![("pyproject.toml", cython)], true, "--no-build-isolation --no-index -e ."),
        (vec![("pyproject.toml", plain), ("m/fast.pyx", "")], true, "--no-build-isolation"),
        (vec![("pyproject.toml", plain)], false, ""),
    ] {
        let (_dir, repo, tree) = repo_with(&files);
        let tree = repo.find_tree(tree).unwrap();
        let dockerfile = dockerfile(&plan(&repo, &tree, &task("tests/test_x.py", None)).unwrap()).unwrap();
        assert_eq!(dockerfile.contains("gcc g++ libc6-dev python3-dev"), compiled, "{dockerfile}");
        assert_eq!(dockerfile.contains(BEFORE_TESTS), compiled, "{dockerfile}");
        assert!(dockerfile.contains(rebuild), "{dockerfile}");
    }
    let (_dir, repo, tree) = repo_with(&[("pyproject.toml", cython)]);
    let tree = repo.find_tree(tree).unwrap();
    let dockerfile = dockerfile(&plan(&repo, &tree, &task("tests/test_x.py", None)).unwrap()).unwrap();
    assert!(
        dockerfile.contains("RUN /opt/repairbench/pip-install setuptools wheel setuptools 'Cython>=3'"),
        "{dockerfile}"
    );
}

#[test]
fn pip_packages_are_installed_for_every_runner_and_refused_on_a_given_image() {
    let (_dir, repo, tree) =
        repo_with(&[("go.mod", "module example.com/m\n\ngo 1.19\n"), ("package.json", "{}\n")]);
    let tree = repo.find_tree(tree).unwrap();
    let extras = TaskEnvironment { pip: vec!["yamllint==1.35.1".into()], ..Default::default() };
    for (test_file, runner) in [("m_test.go", RunnerKind::Go), ("test/x.test.js", RunnerKind::Node)] {
        let environment = plan(&repo, &tree, &task(test_file, Some(extras.clone()))).unwrap();
        assert_eq!(environment.runner, runner);
        let dockerfile = dockerfile(&environment).expect("a layer is built");
        assert!(dockerfile.contains("--no-install-recommends python3-venv "), "{dockerfile}");
        assert!(
            dockerfile.contains("/opt/venv/bin/pip install --no-cache-dir 'yamllint==1.35.1'"),
            "{dockerfile}"
        );
        assert!(dockerfile.contains("ENV PATH=/opt/venv/bin:$PATH"), "{dockerfile}");
    }
    let junit = TaskEnvironment { runner: Some(RunnerKind::Junit), ..extras.clone() };
    let dockerfile = dockerfile(&plan(&repo, &tree, &task("x.txt", Some(junit))).unwrap()).unwrap();
    assert!(dockerfile.contains("install --no-cache-dir 'yamllint==1.35.1'"), "{dockerfile}");
    for given in [
        TaskEnvironment { image: Some("team/tools:1".into()), ..extras.clone() },
        TaskEnvironment { image: Some("team/tools:1".into()), apt: vec!["jq".into()], ..Default::default() },
    ] {
        let err = plan(&repo, &tree, &task("m_test.go", Some(given))).unwrap_err().to_string();
        assert!(err.contains("environment.image") && err.contains("cannot be applied"), "{err}");
    }
}

#[test]
fn a_python_is_the_nearest_image_and_a_given_image_is_used_as_is() {
    let (_dir, repo, tree) = repo_with(&[("setup.py", "from setuptools import setup\nsetup()\n")]);
    let tree = repo.find_tree(tree).unwrap();
    // 3.8 is not offered: the nearest, bullseye's 3.9, is built on, and the choice recorded.
    let old = TaskEnvironment { python: Some("3.8".into()), ..Default::default() };
    let environment = plan(&repo, &tree, &task("tests/test_x.py", Some(old))).unwrap();
    let python = environment.python.as_ref().unwrap();
    assert_eq!(python.suite, DebianSuite::Bullseye, "{python}");
    assert!(python.to_string().starts_with("3.9 (the task's environment.python is 3.8"), "{python}");
    assert!(
        matches!(&environment.image, ImageChoice::Build(layer) if matches!(layer.parent, ParentImage::Suite(DebianSuite::Bullseye))),
        "{environment:?}"
    );
    let py2 = TaskEnvironment { python: Some("2.7".into()), ..Default::default() };
    let err = plan(&repo, &tree, &task("tests/test_x.py", Some(py2))).unwrap_err().to_string();
    assert!(err.contains("`2.7`") && err.contains("3.9 (bullseye)"), "{err}");
    let given = TaskEnvironment {
        image: Some("team/py38:1".into()),
        python: Some("3.8".into()),
        ..Default::default()
    };
    let environment = plan(&repo, &tree, &task("tests/test_x.py", Some(given))).unwrap();
    assert!(matches!(environment.image, ImageChoice::Given(ref i) if i == "team/py38:1"));
}

#[test]
fn the_python_is_chosen_with_its_reason_and_an_unmet_range_refused() {
    let (_dir, repo, tree) = repo_with(&[(
        "pyproject.toml",
        "[project]\nname = \"x\"\nversion = \"1\"\nrequires-python = \">=3.8\"\ndependencies = [\"packaging\"]\n",
    )]);
    let tree = repo.find_tree(tree).unwrap();
    let environment = plan(&repo, &tree, &task("tests/test_x.py", None)).unwrap();
    let python = environment.python.unwrap().to_string();
    assert!(python.starts_with("3.11 (") && python.contains("`>=3.8`"), "{python}");
    let (_dir, repo, tree) = repo_with(&[("setup.py", "setup(name='x', python_requires='>=2.7, <3.9')\n")]);
    let tree = repo.find_tree(tree).unwrap();
    let err = plan(&repo, &tree, &task("tests/test_x.py", None)).unwrap_err().to_string();
    assert!(err.contains("`>=2.7, <3.9`") && err.contains("environment.image"), "{err}");
    // A given image is the task's own choice: nothing is refused or recorded.
    let given = TaskEnvironment { image: Some("team/py39:1".into()), ..Default::default() };
    assert_eq!(plan(&repo, &tree, &task("tests/test_x.py", Some(given))).unwrap().python, None);
}

#[test]
fn pins_older_than_the_python_are_relaxed_and_newer_ones_kept() {
    let text = "py==1.4.30\npytest==2.8.1\npytest-cov==2.1.0  # coverage\nPytest_HTTPBin==0.0.7\n-e .\nhttpbin==0.4.0\n";
    assert_eq!(pytest_plugins([text.to_owned()].into_iter()), ["pytest-cov", "pytest_httpbin"]);
    let files = [
        ("setup.py", "from setuptools import setup\nsetup(name='x', install_requires=['six'])\n"),
        ("requirements.txt", text),
    ];
    let relax = "RUN printf '%s\\n' pytest-cov pytest_httpbin >> /opt/repairbench/overrides.txt";
    // A commit of 2015 runs on Python 3.9 with the packages of April 2021: its pins give way.
    let (_dir, repo, tree, commit) = repo_with_commit(&files, 1_450_000_000);
    let tree = repo.find_tree(tree).unwrap();
    let mut old = task("tests/test_x.py", None);
    old.base_commit = commit.to_string();
    let environment = plan(&repo, &tree, &old).unwrap();
    assert_eq!(environment.packages_as_of.as_deref(), Some("2021-04-03T00:00:00Z"));
    let text = dockerfile(&environment).unwrap();
    assert!(text.contains("uv pip freeze") && text.contains("ENV REPAIRBENCH_OVERRIDES="), "{text}");
    assert!(text.find(relax).unwrap() < text.find("-r requirements.txt").unwrap(), "{text}");
    // A commit of 2024 on 3.11: its pins are of its Python's time and stand.
    let (_dir, repo, tree, commit) = repo_with_commit(&files, 1_710_000_000);
    let tree = repo.find_tree(tree).unwrap();
    let mut new = task("tests/test_x.py", None);
    new.base_commit = commit.to_string();
    let environment = plan(&repo, &tree, &new).unwrap();
    assert_eq!(environment.packages_as_of.as_deref(), Some("2024-03-09T16:00:00Z"));
    let text = dockerfile(&environment).unwrap();
    assert!(!text.contains("REPAIRBENCH_OVERRIDES=/") && !text.contains(relax), "{text}");
}
