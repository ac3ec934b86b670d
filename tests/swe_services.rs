//! Multi-service tasks on the real Docker engine: the three service samples validate (gold
//! resolves, without a patch FAIL_TO_PASS fails and PASS_TO_PASS passes, service checks
//! included); a service that never becomes ready is `env_error` with its log tail, one that
//! crashes during the tests is named in the detail; nothing is left after a normal run, a
//! timed-out run or an interrupted one; two groups cannot reach each other's services.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sandbox::{assert_run_left_nothing, connect, default_image, resources_of_pid};
use repairbench::grade::Verdict;
use repairbench::repair::{self, validate, GradePlan, GradeReport};
use repairbench::report::ConsoleProgress;
use repairbench::sandbox::services::{ServiceGroup, ServiceSpec};
use repairbench::sandbox::{DockerSandbox, EnvSpec, Job};
use repairbench::tasks::PredictionSource;

const SAMPLES: [&str; 3] = ["shop-api-postgres", "jobs-redis-worker", "kvstore-client-server"];

fn issue(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("issues").join(name)
}

/// A dataset folder holding copies of the named sample folders.
fn dataset(dir: &Path, samples: &[&str]) -> PathBuf {
    let root = dir.join("dataset");
    for name in samples {
        std::fs::create_dir_all(root.join(name)).unwrap();
        for file in ["task.json", "repo.bundle"] {
            std::fs::copy(issue(name).join(file), root.join(name).join(file)).unwrap();
        }
    }
    root
}

/// The kvstore sample as a new task folder, its task edited by `edit`.
fn kv_variant(dir: &Path, folder: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let root = dir.join(folder);
    std::fs::create_dir_all(root.join("kv")).unwrap();
    std::fs::copy(issue("kvstore-client-server").join("repo.bundle"), root.join("kv/repo.bundle")).unwrap();
    let mut task: serde_json::Value =
        serde_json::from_slice(&std::fs::read(issue("kvstore-client-server").join("task.json")).unwrap())
            .unwrap();
    edit(&mut task);
    std::fs::write(root.join("kv/task.json"), serde_json::to_vec_pretty(&task).unwrap()).unwrap();
    root
}

fn plan(dataset: &Path, predictions: PredictionSource, out: &Path, image: &str, timeout_s: u64) -> GradePlan {
    let mut plan = common::swe::grade_plan(dataset, predictions, out, &out.join("cache"), image);
    plan.settings.timeout = Duration::from_secs(timeout_s);
    plan.settings.flaky_reruns = 0;
    plan
}

async fn grade(sandbox: &Arc<DockerSandbox>, plan: &GradePlan) -> GradeReport {
    repair::grade(repair::Grader::Local(sandbox.clone()), plan, &mut ConsoleProgress::hidden()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_samples_are_valid_tasks_and_leave_nothing_behind() {
    let image = default_image();
    let sandbox = Arc::new(connect().await);
    let dir = tempfile::tempdir().unwrap();
    let data = dataset(dir.path(), &SAMPLES);
    let plan = plan(&data, PredictionSource::Gold, &dir.path().join("validate"), &image, 120);
    let report = validate::validate(sandbox.clone(), &plan, &mut ConsoleProgress::hidden()).await.unwrap();
    assert_eq!(report.valid, 3, "{:#?}", report.instances);

    let gold: GradeReport =
        serde_json::from_slice(&std::fs::read(dir.path().join("validate/gold/report.json")).unwrap())
            .unwrap();
    let unpatched: GradeReport =
        serde_json::from_slice(&std::fs::read(dir.path().join("validate/unpatched/report.json")).unwrap())
            .unwrap();
    assert_eq!(gold.summary.resolved, 3);
    assert_eq!(unpatched.summary.resolved, 0);
    for result in &gold.instances {
        assert!(!result.services.is_empty(), "{}", result.instance_id);
        for service in &result.services {
            assert!(!service.crashed, "{}: {service:?}", result.instance_id);
            let log = dir.path().join("validate/gold").join(&result.log_dir).join(&service.log);
            assert!(log.is_file(), "{}", log.display());
        }
    }
    let shop = gold.instances.iter().find(|r| r.instance_id == "acme__shop-api-12").unwrap();
    let passed = &shop.tests_status.pass_to_pass.success;
    for check in ["service:db::schema-applied", "service:api::no-tracebacks"] {
        assert!(passed.contains(&check.to_string()), "{check} in {passed:?}");
    }
    let shop_logs = dir.path().join("validate/gold").join(&shop.log_dir).join("services");
    let api_log = std::fs::read_to_string(shop_logs.join("api.log")).unwrap();
    assert!(api_log.contains("GET /customers/3/summary"), "the tests reached the API: {api_log}");
    // Without the fix the worker really saw the malformed message, observed through the API.
    let jobs = unpatched.instances.iter().find(|r| r.instance_id == "acme__jobs-31").unwrap();
    assert_eq!(
        jobs.tests_status.fail_to_pass.failure,
        ["tests/test_jobs.py::test_tags_reach_the_worker_intact"]
    );
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_never_ready_is_env_error_with_its_log_and_a_crash_is_reported() {
    let image = default_image();
    let sandbox = Arc::new(connect().await);
    let dir = tempfile::tempdir().unwrap();
    let never = kv_variant(dir.path(), "never", |task| {
        task["services"][0]["command"] = serde_json::json!([
            "sh",
            "-c",
            "echo 'kv: reading config'; echo 'kv: fatal: no listen address'; sleep 600"
        ]);
        task["services"][0]["ready"] = serde_json::json!({"tcp": 7070, "timeout_s": 3});
    });
    let report =
        grade(&sandbox, &plan(&never, PredictionSource::Gold, &dir.path().join("never-out"), &image, 60))
            .await;
    let result = &report.instances[0];
    assert_eq!(result.verdict, Verdict::EnvError, "{result:#?}");
    assert_eq!(result.reason.as_deref(), Some("service_not_ready"));
    let detail = result.detail.as_deref().unwrap();
    assert!(detail.contains("service `kv` was not ready within 3 s"), "{detail}");
    assert!(detail.contains("kv: fatal: no listen address"), "the log tail: {detail}");

    // Ready, then gone while the tests run.
    let crash = kv_variant(dir.path(), "crash", |task| {
        task["services"][0]["command"] = serde_json::json!([
            "sh",
            "-c",
            "python3 -m kvstore.server & sleep 2; echo 'kv: out of disk'; exit 3"
        ]);
        task["test_cmd"] = "sleep 4; python3 -m pytest -q tests/test_client.py".into();
    });
    let report =
        grade(&sandbox, &plan(&crash, PredictionSource::Gold, &dir.path().join("crash-out"), &image, 60))
            .await;
    let result = &report.instances[0];
    assert_eq!(result.verdict, Verdict::Unresolved, "{result:#?}");
    let kv = &result.services[0];
    assert!(kv.crashed && kv.exit.as_deref() == Some("exit 3"), "{kv:?}");
    let detail = result.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("services crashed during the tests: `kv` (exit 3"), "{detail}");
    let log =
        std::fs::read_to_string(dir.path().join("crash-out").join(&result.log_dir).join("services/kv.log"))
            .unwrap();
    assert!(log.contains("kv: out of disk"), "{log}");
    assert_run_left_nothing(&sandbox).await;
}

/// A listener on `address` (port 0: any) counting connections until `stop` is set; returns
/// its port.
fn counting_listener(
    address: &str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (u16, Arc<std::sync::atomic::AtomicUsize>, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind(address).unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let thread = std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            if listener.accept().is_ok() {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    (port, accepted, thread)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_step_injecting_dockerfile_instructions_is_refused_before_any_build() {
    let image = default_image();
    let sandbox = Arc::new(connect().await);
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (port, accepted, listener) = counting_listener("127.0.0.1:0", stop.clone());
    // `ADD` from a URL would run in the daemon, on the host's network, where 127.0.0.1 is ours.
    let injected = format!("true\nADD http://127.0.0.1:{port}/secret /workspace/secret");
    let tasks = kv_variant(dir.path(), "injected", |task| {
        task["services"][0]["build"] = serde_json::json!({"run": [injected]});
    });
    let report =
        grade(&sandbox, &plan(&tasks, PredictionSource::Gold, &dir.path().join("out"), &image, 60)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    listener.join().unwrap();
    assert!(report.instances.is_empty(), "{:#?}", report.instances);
    assert_eq!(report.summary.invalid_input, 1, "{:#?}", report.skipped);
    let skipped = &report.skipped[0];
    assert!(
        skipped.reason.starts_with("field `services[0].build.run[0]`: control character U+000A"),
        "{skipped:?}"
    );
    assert!(skipped.location.ends_with("kv/task.json:1"), "{skipped:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "the loopback listener was reached");
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_readiness_timeout_past_the_run_s_deadline_ends_with_the_run() {
    let image = default_image();
    let sandbox = Arc::new(connect().await);
    let dir = tempfile::tempdir().unwrap();
    // A service that never listens, allowed 2^64-1 seconds by its task.
    let forever = kv_variant(dir.path(), "forever", |task| {
        task["services"][0]["command"] = serde_json::json!(["sleep", "600"]);
        task["services"][0]["ready"] = serde_json::json!({"tcp": 7070, "timeout_s": u64::MAX});
    });
    let started = Instant::now();
    let report =
        grade(&sandbox, &plan(&forever, PredictionSource::Gold, &dir.path().join("out"), &image, 15)).await;
    let took = started.elapsed();
    let result = &report.instances[0];
    assert_eq!(
        (result.verdict, result.reason.as_deref()),
        (Verdict::EnvError, Some("service_not_ready")),
        "{result:#?}"
    );
    assert!(took < Duration::from_secs(15 + 60), "the run's --timeout of 15 s bounds it: took {took:?}");
    // What is left of the run's 15 s once the group is up.
    let detail = result.detail.as_deref().unwrap_or_default();
    let waited: u64 = detail
        .split("was not ready within ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    assert!((10..=15).contains(&waited), "{detail}");
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_run_leaves_nothing() {
    let image = default_image();
    let sandbox = Arc::new(connect().await);
    let dir = tempfile::tempdir().unwrap();
    let slow = kv_variant(dir.path(), "slow", |task| task["test_cmd"] = "sleep 60".into());
    let report =
        grade(&sandbox, &plan(&slow, PredictionSource::Gold, &dir.path().join("out"), &image, 3)).await;
    assert_eq!(report.instances[0].verdict, Verdict::Timeout, "{:#?}", report.instances[0]);
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_grade_removes_its_services() {
    default_image();
    let dir = tempfile::tempdir().unwrap();
    let slow = kv_variant(dir.path(), "slow", |task| task["test_cmd"] = "sleep 120".into());
    let mut child = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["swe", "grade", "--dataset"])
        .arg(&slow)
        .args(["--predictions", "gold", "--workers", "1", "--timeout", "300", "--out"])
        .arg(dir.path().join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sandbox = connect().await;
    // The service and the test runner are both up (two containers of this process).
    let started = Instant::now();
    while resources_of_pid(&sandbox, child.id()).await.0 < 2 {
        assert!(child.try_wait().unwrap().is_none(), "grading ended before its containers started");
        assert!(started.elapsed() < Duration::from_secs(300), "no service and runner within 300 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, networks, _) = resources_of_pid(&sandbox, child.id()).await;
    assert_eq!(networks, 1, "the attempt's private network");
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(resources_of_pid(&sandbox, child.id()).await, (0, 0, 0), "containers, networks, volumes left");
}

fn http_server(image: &str) -> ServiceSpec {
    let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let mut server = ServiceSpec::new(
        "web",
        image,
        argv(&["python3", "-m", "http.server", "8000", "--bind", "0.0.0.0", "--directory", "/tmp"]),
    );
    server.ready = Some(argv(&[
        "python3",
        "-c",
        "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)",
    ]));
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn two_groups_cannot_reach_each_others_services() {
    let image = default_image();
    let sandbox = connect().await;
    // Both groups call their service `web`, as two instances of one task would.
    let web = [http_server(&image)];
    let (a, b) = tokio::join!(
        ServiceGroup::start(&sandbox, &web, Duration::from_secs(30)),
        ServiceGroup::start(&sandbox, &web, Duration::from_secs(30)),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let inspect = sandbox.docker().inspect_container(&b.container("web").unwrap(), None).await.unwrap();
    let b_ip = inspect.network_settings.unwrap().networks.unwrap()[b.network()].ip_address.clone().unwrap();
    let probe = format!(
        "import urllib.request\nfor host in ['web', '{b_ip}']:\n    try:\n        \
         urllib.request.urlopen(f'http://{{host}}:8000/', timeout=3)\n        print(host, 'reached')\n    \
         except Exception as e:\n        print(host, 'unreachable', type(e).__name__)\n"
    );
    let job = Job {
        cmd: vec!["python3".into(), "-c".into(), probe],
        timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let out = a.run_job(&EnvSpec::new(image.clone()), &job, None, "tests").await.unwrap();
    let lines: Vec<&str> = out.result.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"web reached"), "its own service: {:?}", out.result);
    assert!(lines.get(1).is_some_and(|l| l.starts_with(&format!("{b_ip} unreachable"))), "{:?}", out.result);
    a.teardown().await.unwrap();
    b.teardown().await.unwrap();
    assert_run_left_nothing(&sandbox).await;
}

/// Every IPv4 address of this host but loopback (the external one, docker0, other bridges).
fn host_addresses() -> Vec<String> {
    let out = Command::new("ip").args(["-4", "-o", "addr", "show"]).output().expect("ip from iproute2");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().skip_while(|w| *w != "inet").nth(1))
        .filter_map(|cidr| cidr.split('/').next())
        .filter(|ip| !ip.starts_with("127."))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_is_unreachable_from_a_services_network() {
    let image = default_image();
    let sandbox = connect().await;
    // A listener on every address of the host, counting whatever connects.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (port, accepted, counter) = counting_listener("0.0.0.0:0", stop.clone());
    let group = ServiceGroup::start(&sandbox, &[http_server(&image)], Duration::from_secs(30)).await.unwrap();
    let network = sandbox.docker().inspect_network(group.network(), None).await.unwrap();
    let gateways: Vec<String> = network
        .ipam
        .and_then(|ipam| ipam.config)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.gateway)
        .collect();
    let mut targets: Vec<String> = gateways.iter().map(|g| format!("{g}:{port}")).collect();
    targets.extend(host_addresses().iter().map(|ip| format!("{ip}:{port}")));
    assert!(targets.len() >= 2, "the gateway and at least one host address: {targets:?}");
    // The service by name first, as the control: the network itself works.
    let probe = format!(
        "import socket\nfor target in {targets:?}:\n    host, port = target.rsplit(':', 1)\n    try:\n        \
         socket.create_connection((host, int(port)), timeout=3).close()\n        print(target, 'reached')\n    \
         except OSError as e:\n        print(target, 'unreachable', type(e).__name__)\n",
        targets = std::iter::once("web:8000".to_string()).chain(targets.clone()).collect::<Vec<_>>()
    );
    let job = Job {
        cmd: vec!["python3".into(), "-c".into(), probe.clone()],
        timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let from_tests = group.run_job(&EnvSpec::new(image.clone()), &job, None, "tests").await.unwrap();
    let request = repairbench::sandbox::ExecRequest {
        cmd: job.cmd.clone(),
        timeout: Duration::from_secs(120),
        workdir: None,
        env: Vec::new(),
    };
    let from_service = group.exec("web", &request).await.unwrap();
    group.teardown().await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    counter.join().unwrap();
    for (who, stdout) in [("tests", &from_tests.result.stdout), ("service", &from_service.stdout)] {
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.first(), Some(&"web:8000 reached"), "{who}: the service by name: {stdout}");
        assert_eq!(lines.len(), targets.len() + 1, "{who}: {stdout}");
        for line in &lines[1..] {
            assert!(line.contains(" unreachable "), "{who} reached the host: {stdout}");
        }
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "the host's listener got a connection");
    assert_run_left_nothing(&sandbox).await;
}
