//! Suites read their published datasets from the hub when no `--data` is given: `eval mmlu`
//! against a hub on a loopback port (tests/common/hub.rs) that serves Parquet files this test
//! writes with pyarrow, at the commit the suite pins. The files land in the hub cache layout and
//! a second run reads them from there; `--data` on the same files gives the same items; the
//! manifest names the repository, commit and sha256 of each file; offline and gated datasets
//! fail with errors that say what to do instead.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::hub::{Hub, Repo};
use serde_json::{json, Value};

/// MMLU-layout rows written here: 22 test rows over two subjects, five dev rows each.
fn mmlu_rows() -> (Vec<Value>, Vec<Value>) {
    let (mut test, mut dev) = (Vec::new(), Vec::new());
    for i in 0..20usize {
        let (a, b) = (i + 2, 3 * i + 1);
        let choices = [a + b + 1, a + b, a * b, a + b + 10].map(|n| n.to_string());
        let row = json!({
            "question": format!("What is {a} + {b}?"),
            "subject": "elementary_mathematics",
            "choices": choices,
            "answer": 1,
        });
        if i < 5 {
            dev.push(row)
        } else {
            test.push(row)
        }
    }
    let planets = ["Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"];
    for (i, planet) in planets.iter().chain(&planets[..4]).enumerate() {
        let row = json!({
            "question": format!("Which planet is number {} from the Sun?", i % 8 + 1),
            "subject": "astronomy",
            "choices": [*planet, planets[(i + 1) % 8], planets[(i + 2) % 8], "Pluto"],
            "answer": 0,
        });
        if i < 5 {
            dev.push(row)
        } else {
            test.push(row)
        }
    }
    (test, dev)
}

/// `rows` as a Parquet file, written by pyarrow (the hub's writer): `choices` a list of
/// strings, `answer` an int64, snappy-compressed.
fn parquet(rows: &[Value], path: &Path) -> Vec<u8> {
    let script =
        "import json, sys\nimport pyarrow as pa, pyarrow.parquet as pq\nrows = json.load(sys.stdin)\n\
                  pq.write_table(pa.Table.from_pylist(rows), sys.argv[1], compression='snappy')\n";
    let mut child = Command::new(common::venv::hf())
        .args(["-c", script, path.to_str().unwrap()])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        Value::from(rows.to_vec()).to_string().as_bytes(),
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
    std::fs::read(path).unwrap()
}

/// `repairbench eval ARGS` with the hub at `endpoint` and its cache in `hf_home`.
fn eval(args: &[&str], hub: &str, hf_home: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = common::cli::repairbench();
    command.arg("eval").args(args).env("HF_ENDPOINT", hub).env("HF_HOME", hf_home);
    command.env_remove("HF_TOKEN").env_remove("HF_HUB_OFFLINE");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

fn samples(out: &Path) -> Vec<Value> {
    let (mut rows, bad): (Vec<Value>, _) = repairbench::report::read_jsonl(&out.join("samples.jsonl"));
    assert!(bad.is_empty(), "{bad:?}");
    rows.sort_by_key(|r| r["index"].as_u64());
    rows
}

/// What an item's result is, without where its data came from.
fn item(record: &Value) -> Value {
    json!([record["doc_id"], record["prompt"], record["choices"], record["scores"], record["extracted"]])
}

fn ok(output: &Output) {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn mmlu_comes_from_the_hub_then_from_its_cache_and_matches_local_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let suite = repairbench::suites::load_suite("mmlu").unwrap();
    let pinned = suite.def.data.hub.as_ref().expect("mmlu names its hub dataset").get_ref().clone();
    let (test, dev) = mmlu_rows();
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let test_bytes = parquet(&test, &files.join("test.parquet"));
    let dev_bytes = parquet(&dev, &files.join("dev.parquet"));
    let hub = Hub::start(vec![Repo {
        id: pinned.repo.clone(),
        commit: pinned.revision.clone(),
        files: BTreeMap::from([
            (pinned.test.clone(), test_bytes.clone()),
            (pinned.fewshot.clone().unwrap(), dev_bytes.clone()),
        ]),
        gated_token: None,
    }]);
    let hf_home = root.join("hf");

    // First run: both files fetched, with the hub's own requests, into the hub cache layout.
    let first = root.join("first");
    ok(&eval(&["mmlu", "--limit", "20", "--out", first.to_str().unwrap()], &hub.endpoint, &hf_home, &[]));
    let requests = hub.requests();
    let resolves: Vec<_> = requests.iter().filter(|r| r.path.contains("/resolve/")).collect();
    assert_eq!(resolves.len(), 4, "a HEAD and a GET for each of two files: {requests:?}");
    assert!(resolves.iter().all(|r| r.path.contains(&format!("/resolve/{}/", pinned.revision))));
    assert_eq!(requests.iter().filter(|r| r.path.starts_with("/cdn/")).count(), 2);
    let snapshot = hf_home
        .join("hub")
        .join(format!("datasets--{}", pinned.repo.replace('/', "--")))
        .join("snapshots")
        .join(&pinned.revision);
    assert_eq!(std::fs::read(snapshot.join(&pinned.test)).unwrap(), test_bytes);
    let first_items = samples(&first);
    assert_eq!(first_items.len(), 20);

    // The manifest records each file's repository, commit, path there and sha256.
    let results: Value = serde_json::from_slice(&std::fs::read(first.join("results.json")).unwrap()).unwrap();
    let data = results["config"]["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (entry, (file, bytes)) in
        data.iter().zip([(&pinned.test, &test_bytes), (pinned.fewshot.as_ref().unwrap(), &dev_bytes)])
    {
        assert_eq!(entry["hub"], json!({"repo": pinned.repo, "revision": pinned.revision, "file": file}));
        assert_eq!(entry["sha256"], repairbench::digest::sha256_hex(bytes));
    }

    // Second run: from the cache, not one request to the hub, the same items.
    let second = root.join("second");
    ok(&eval(&["mmlu", "--limit", "20", "--out", second.to_str().unwrap()], &hub.endpoint, &hf_home, &[]));
    assert_eq!(hub.requests().len(), requests.len(), "the second run asked the hub again");
    let second_items = samples(&second);
    assert_eq!(
        second_items.iter().map(item).collect::<Vec<_>>(),
        first_items.iter().map(item).collect::<Vec<_>>()
    );

    // --data on the same files (named test.parquet and dev.parquet) gives the same items.
    let local = root.join("local");
    let output = eval(
        &["mmlu", "--limit", "20", "--data", files.to_str().unwrap(), "--out", local.to_str().unwrap()],
        "http://127.0.0.1:9",
        &root.join("no-hf"),
        &[],
    );
    ok(&output);
    let local_items = samples(&local);
    assert_eq!(
        local_items.iter().map(item).collect::<Vec<_>>(),
        first_items.iter().map(item).collect::<Vec<_>>()
    );
}

#[test]
fn offline_and_gated_datasets_say_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hf_home = root.join("hf");
    // Offline with an empty cache: the error names the dataset, its commit and the --data layout.
    let output = eval(
        &["mmlu", "--out", root.join("o").to_str().unwrap()],
        "http://127.0.0.1:9",
        &hf_home,
        &[("HF_HUB_OFFLINE", "1")],
    );
    insta::assert_snapshot!(common::cli::transcript(&output, &[(root, "[TMP]")]));

    // A gated dataset without a token: no request reaches the hub, and the error says HF_TOKEN.
    let gpqa = repairbench::suites::load_suite("gpqa").unwrap();
    let pinned = gpqa.def.data.hub.as_ref().unwrap().get_ref().clone();
    assert!(pinned.gated);
    let csv = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3,Subdomain\n\
               \"What is 2 + 2?\",4,3,5,22,Arithmetic\n\
               \"Which gas do plants take in, \"\"mostly\"\"?\",Carbon dioxide,Oxygen,Helium,Neon,Biology\n";
    let hub = Hub::start(vec![Repo {
        id: pinned.repo.clone(),
        commit: pinned.revision.clone(),
        files: BTreeMap::from([(pinned.test.clone(), csv.as_bytes().to_vec())]),
        gated_token: Some("hf_test_token".into()),
    }]);
    let output = eval(&["gpqa", "--out", root.join("g").to_str().unwrap()], &hub.endpoint, &hf_home, &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("gated") && stderr.contains("HF_TOKEN") && stderr.contains(&pinned.repo),
        "{stderr}"
    );
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());

    // A wrong token: the hub's refusal, with its status and code.
    let output = eval(
        &["gpqa", "--out", root.join("g").to_str().unwrap()],
        &hub.endpoint,
        &hf_home,
        &[("HF_TOKEN", "hf_wrong")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("HTTP 401 (GatedRepo)"), "{stderr}");

    // The right token: the CSV is read (a quoted comma and quote included), and the token went
    // to the hub but not to the storage host the hub redirected to.
    let out = root.join("g-ok");
    ok(&eval(
        &["gpqa", "--out", out.to_str().unwrap()],
        &hub.endpoint,
        &hf_home,
        &[("HF_TOKEN", "hf_test_token")],
    ));
    let items = samples(&out);
    assert_eq!(items.len(), 2);
    assert!(items[1]["prompt"].as_str().unwrap().contains("Which gas do plants take in, \"mostly\"?"));
    for request in hub.requests() {
        let token = request.authorization.as_deref();
        if request.path.starts_with("/cdn/") {
            assert_eq!(token, None, "the token followed the redirect: {request:?}");
        }
    }
}
