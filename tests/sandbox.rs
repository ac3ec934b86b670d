//! The sandbox's security and accounting properties, on the real Docker engine.

mod common;

use std::time::{Duration, Instant};

use common::sandbox::{assert_run_left_nothing, connect, default_image};
use repairbench::kernel::scheduler::{run_pool, PoolError};
use repairbench::sandbox::services::{ServiceGroup, ServiceSpec};
use repairbench::sandbox::{archive, EnvSpec, ExecRequest, Job, Sandbox, SandboxUser, Verdict};

fn job(cmd: &[&str], timeout_s: u64) -> Job {
    Job {
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: Duration::from_secs(timeout_s),
        ..Default::default()
    }
}

fn sh(script: &str, timeout_s: u64) -> Job {
    job(&["sh", "-c", script], timeout_s)
}

fn spec() -> EnvSpec {
    EnvSpec::new(default_image())
}

#[tokio::test(flavor = "multi_thread")]
async fn code_runs_as_an_unprivileged_user_without_capabilities() {
    let sandbox = connect().await;
    let out = sandbox
        .run_job(
            &spec(),
            &sh("id -u; id -g; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status", 30),
            None,
        )
        .await
        .unwrap();
    assert_eq!(out.result.verdict, Verdict::Exit(0), "stderr: {}", out.result.stderr);
    let lines: Vec<&str> = out.result.stdout.lines().collect();
    assert_eq!(lines[0], "1000");
    assert_eq!(lines[1], "1000");
    assert!(out.result.stdout.contains("CapEff:\t0000000000000000"), "{}", out.result.stdout);
    assert!(out.result.stdout.contains("CapBnd:\t0000000000000000"), "{}", out.result.stdout);
    assert!(out.result.stdout.contains("NoNewPrivs:\t1"), "{}", out.result.stdout);
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_supervisor_is_root_with_three_capabilities_and_execs_run_as_it() {
    let sandbox = connect().await;
    let mut spec = spec();
    spec.user = SandboxUser::Supervisor;
    let env = sandbox.create(&spec).await.unwrap();
    let script = "id -u; id -g; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; \
                  touch /workspace/x 2>/dev/null && echo workspace-writable; \
                  python3 -c 'import os; os.setgroups([]); os.setgid(4242); os.setuid(4242); print(os.getuid())'";
    let request = ExecRequest {
        cmd: ["sh", "-c", script].map(String::from).to_vec(),
        timeout: Duration::from_secs(30),
        workdir: None,
        env: vec![],
    };
    let out = sandbox.exec(&env, &request).await.unwrap();
    sandbox.destroy(env).await.unwrap();
    assert_eq!(out.verdict, Verdict::Exit(0), "stderr: {}", out.stderr);
    // CAP_KILL (5), CAP_SETGID (6), CAP_SETUID (7) and nothing else; no DAC override, so the
    // unprivileged user's workspace is not writable to it.
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[..2], ["0", "0"], "{}", out.stdout);
    assert!(out.stdout.contains("CapEff:\t00000000000000e0"), "{}", out.stdout);
    assert!(out.stdout.contains("CapBnd:\t00000000000000e0"), "{}", out.stdout);
    assert!(out.stdout.contains("NoNewPrivs:\t1"), "{}", out.stdout);
    assert!(!out.stdout.contains("workspace-writable"), "{}", out.stdout);
    assert_eq!(lines.last(), Some(&"4242"), "it can switch to any uid: {}", out.stdout);
    assert_run_left_nothing(&sandbox).await;
}

/// Binds a server to `localhost` and connects to it by name.
const LOCALHOST: &str = "import socket; s = socket.socket(); s.bind(('localhost', 0)); s.listen(); \
socket.create_connection(('localhost', s.getsockname()[1]), timeout=3); print('localhost ok')";

#[tokio::test(flavor = "multi_thread")]
async fn no_network_only_loopback_and_a_local_server_is_unreachable() {
    let sandbox = connect().await;
    let image = default_image();
    // A server of our own on a private network of ours; a client on that network reaches it
    // by name (so the server really serves), the sandbox without network does not.
    let mut server = ServiceSpec::new(
        "server",
        image.clone(),
        ["python3", "-m", "http.server", "8000", "--bind", "0.0.0.0", "--directory", "/tmp"]
            .map(String::from)
            .to_vec(),
    );
    server.ready = Some(
        [
            "python3",
            "-c",
            "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)",
        ]
        .map(String::from)
        .to_vec(),
    );
    let group = ServiceGroup::start(&sandbox, &[server], Duration::from_secs(30)).await.unwrap();
    let inspect =
        sandbox.docker().inspect_container(&group.container("server").unwrap(), None).await.unwrap();
    let server_ip =
        inspect.network_settings.unwrap().networks.unwrap()[group.network()].ip_address.clone().unwrap();
    assert!(!server_ip.is_empty());

    let fetch = |host: &str| {
        format!(
            "import urllib.request\ntry:\n    urllib.request.urlopen('http://{host}:8000/', timeout=3)\n    print('reached')\n\
             except Exception as e:\n    print('unreachable', type(e).__name__)\n"
        )
    };
    let control =
        group.run_job(&spec(), &job(&["python3", "-c", &fetch("server")], 30), None, "client").await.unwrap();
    assert_eq!(control.result.stdout.trim(), "reached", "control client: {:?}", control.result);

    let isolated = sandbox
        .run_job(
            &spec(),
            &job(
                &[
                    "sh",
                    "-c",
                    &format!(
                        "ls /sys/class/net; python3 -c \"{}\"; python3 -c \"{LOCALHOST}\"",
                        fetch(&server_ip)
                    ),
                ],
                30,
            ),
            None,
        )
        .await
        .unwrap();
    let lines: Vec<&str> = isolated.result.stdout.lines().collect();
    assert_eq!(lines[0], "lo", "interfaces: {}", isolated.result.stdout);
    assert!(lines[1].starts_with("unreachable"), "sandbox reached the server: {}", isolated.result.stdout);
    // Loopback still works by name: a test server on `localhost` (Django's live server) is
    // found although the engine writes no hosts file for a container without network.
    assert_eq!(lines.get(2), Some(&"localhost ok"), "{:?}", isolated.result);
    group.teardown().await.unwrap();
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_bomb_is_contained_by_the_pids_limit_and_reported() {
    let sandbox = connect().await;
    let mut spec = spec();
    spec.limits.pids = 64;
    let started = Instant::now();
    // The shell keeps the container alive while the bomb spreads; the deadline ends it.
    let bomb = job(&["bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 60"], 5);
    let out = sandbox.run_job(&spec, &bomb, None).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(out.result.verdict, Verdict::Timeout);
    // Reported: forks beyond the limit failed instead of exhausting the host.
    assert!(
        out.result.stderr.contains("fork: retry: Resource temporarily unavailable"),
        "stderr: {}",
        out.result.stderr
    );
    // The engine and host are fine: the next job runs normally.
    let next = sandbox.run_job(&spec, &sh("echo alive", 30), None).await.unwrap();
    assert_eq!((next.result.verdict, next.result.stdout.as_str()), (Verdict::Exit(0), "alive\n"));
    assert_run_left_nothing(&sandbox).await;
}

const HOG: &str = "a = []\nwhile True:\n    a.append('x' * 10**7)\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_hog_ends_as_oom_as_main_process_and_as_exec() {
    let sandbox = connect().await;
    let mut spec = spec();
    spec.limits.memory_bytes = 128 << 20;
    let out = sandbox.run_job(&spec, &job(&["python3", "-c", HOG], 60), None).await.unwrap();
    assert_eq!(out.result.verdict, Verdict::Oom);

    let env = sandbox.create(&spec).await.unwrap();
    let request = |cmd: &[&str]| ExecRequest {
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: Duration::from_secs(60),
        workdir: None,
        env: vec![],
    };
    let hog = sandbox.exec(&env, &request(&["python3", "-c", HOG])).await.unwrap();
    assert_eq!(hog.verdict, Verdict::Oom);
    // A later plain SIGKILL is not mistaken for a second OOM kill.
    let killed = sandbox.exec(&env, &request(&["sh", "-c", "kill -9 $$"])).await.unwrap();
    assert_eq!(killed.verdict, Verdict::Exit(137));
    sandbox.destroy(env).await.unwrap();
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_loop_times_out_within_two_seconds_of_its_deadline() {
    let sandbox = connect().await;
    let deadline = Duration::from_secs(3);
    let mut endless = job(&["python3", "-c", "while True: pass"], 3);
    endless.timeout = deadline;
    let out = sandbox.run_job(&spec(), &endless, None).await.unwrap();
    assert_eq!(out.result.verdict, Verdict::Timeout);
    assert!(out.result.duration >= deadline, "{:?}", out.result.duration);
    assert!(out.result.duration < deadline + Duration::from_secs(2), "{:?}", out.result.duration);

    let env = sandbox.create(&spec()).await.unwrap();
    let request = ExecRequest {
        cmd: ["sh", "-c", "while :; do :; done"].map(String::from).to_vec(),
        timeout: deadline,
        workdir: None,
        env: vec![],
    };
    let started = Instant::now();
    let result = sandbox.exec(&env, &request).await.unwrap();
    assert_eq!(result.verdict, Verdict::Timeout);
    assert!(started.elapsed() < deadline + Duration::from_secs(2), "{:?}", started.elapsed());
    // The killed environment says so instead of hanging.
    let after = sandbox.exec(&env, &request).await.unwrap();
    assert!(matches!(after.verdict, Verdict::Error(_)), "{:?}", after.verdict);
    sandbox.destroy(env).await.unwrap();
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_workspace_and_tmp_are_writable() {
    let sandbox = connect().await;
    let script = "for p in /etc/x /x /usr/lib/x /home/x /var/tmp/x /workspace/x /tmp/x; do \
                  if touch $p 2>/dev/null; then echo \"$p writable\"; else echo \"$p denied\"; fi; done";
    let out = sandbox.run_job(&spec(), &sh(script, 30), None).await.unwrap();
    assert_eq!(
        out.result.stdout,
        "/etc/x denied\n/x denied\n/usr/lib/x denied\n/home/x denied\n/var/tmp/x denied\n\
         /workspace/x writable\n/tmp/x writable\n"
    );
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn output_over_the_cap_is_truncated_and_flagged() {
    let sandbox = connect().await;
    let mut spec = spec();
    spec.limits.output_cap_bytes = 1000;
    // A long log whose summary comes last: the first and last 500 bytes are kept.
    let script = "import sys\nsys.stdout.write('x' * 1000000 + 'SUMMARY')\nsys.stderr.write('short')\n";
    let out = sandbox.run_job(&spec, &job(&["python3", "-c", script], 30), None).await.unwrap();
    assert_eq!(out.result.verdict, Verdict::Exit(0));
    let cut = format!("\n[... {} bytes cut here by the output cap ...]\n", 1_000_007 - 1000);
    assert_eq!(out.result.stdout, format!("{}{cut}{}SUMMARY", "x".repeat(500), "x".repeat(493)));
    assert!(out.result.stdout_truncated);
    assert_eq!(out.result.stderr, "short");
    assert!(!out.result.stderr_truncated);
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn files_go_in_and_out_as_tar_and_a_failing_command_is_a_result() {
    let sandbox = connect().await;
    let spec = spec();
    let env = sandbox.create(&spec).await.unwrap();
    let program = b"import pathlib\npathlib.Path('out/result.txt').write_text(str(6 * 7))\n";
    sandbox
        .copy_in(&env, "/workspace", archive::tar_files(&[("prog.py", program.as_slice(), false)]))
        .await
        .unwrap();
    let request = |cmd: &str| ExecRequest {
        cmd: vec!["sh".into(), "-c".into(), cmd.into()],
        timeout: Duration::from_secs(30),
        workdir: None,
        env: vec![("ANSWER_FILE".into(), "out/result.txt".into())],
    };
    let ran =
        sandbox.exec(&env, &request("mkdir out && python3 prog.py && echo $ANSWER_FILE")).await.unwrap();
    assert_eq!((ran.verdict.clone(), ran.stdout.as_str()), (Verdict::Exit(0), "out/result.txt\n"), "{ran:?}");
    let files = archive::untar_files(&sandbox.copy_out(&env, "/workspace/out").await.unwrap()).unwrap();
    assert_eq!(files, vec![("out/result.txt".to_string(), b"42".to_vec())]);
    let failed = sandbox.exec(&env, &request("echo oops >&2; exit 3")).await.unwrap();
    assert_eq!((failed.verdict, failed.stderr.as_str()), (Verdict::Exit(3), "oops\n"));
    sandbox.destroy(env).await.unwrap();

    // The one-shot path copies in before and out after.
    let mut one_shot = sh("cat prog.py | wc -l > lines.txt", 30);
    one_shot.files_in = Some(archive::tar_files(&[("prog.py", program.as_slice(), false)]));
    one_shot.copy_out = Some("lines.txt".into());
    let out = sandbox.run_job(&spec, &one_shot, None).await.unwrap();
    let files = archive::untar_files(&out.files_out.unwrap()).unwrap();
    assert_eq!(files, vec![("lines.txt".to_string(), b"2\n".to_vec())]);
    assert_run_left_nothing(&sandbox).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pool_runs_jobs_at_once_and_one_failure_does_not_stop_the_others() {
    let sandbox = connect().await;
    let spec = spec();
    let items: Vec<usize> = (0..6).collect();
    let results = run_pool(
        items,
        3,
        |_, n| {
            let sandbox = sandbox.clone();
            let mut spec = spec.clone();
            if n == 2 {
                spec.image = "repairbench/no-such-image:missing".into();
            }
            async move { sandbox.run_job(&spec, &sh(&format!("echo {n}"), 30), None).await }
        },
        |_, _| {},
    )
    .await;
    for (n, r) in results.into_iter().enumerate() {
        match r {
            Err(PoolError::Failed(e)) if n == 2 => assert!(e.to_string().contains("not found"), "{e}"),
            Ok(out) => assert_eq!(out.result.stdout, format!("{n}\n")),
            other => panic!("job {n}: {other:?}"),
        }
    }
    assert_run_left_nothing(&sandbox).await;
}

/// Bytes free on the file system holding Docker's data (where a disk-backed volume would grow).
async fn docker_disk_free(sandbox: &repairbench::sandbox::DockerSandbox) -> u64 {
    let root =
        sandbox.docker().info().await.unwrap().docker_root_dir.unwrap_or_else(|| "/var/lib/docker".into());
    let out = std::process::Command::new("df").args(["-B1", "--output=avail"]).arg(&root).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_3_gb_write_stops_at_the_workspace_cap_and_never_reaches_the_host_disk() {
    let sandbox = connect().await;
    let spec = spec();
    let cap = spec.limits.workspace_bytes;
    assert_eq!(cap, 1 << 30, "the documented default");
    let env = sandbox.create(&spec).await.unwrap();
    let free_before = docker_disk_free(&sandbox).await;
    let request = ExecRequest {
        cmd: ["sh", "-c", "dd if=/dev/zero of=/workspace/fill bs=1M count=3072 2>&1; echo exit=$?; stat -c %s /workspace/fill"]
            .map(String::from)
            .to_vec(),
        timeout: Duration::from_secs(120),
        workdir: None,
        env: Vec::new(),
    };
    let out = sandbox.exec(&env, &request).await.unwrap();
    let free_during = docker_disk_free(&sandbox).await;
    sandbox.destroy(env).await.unwrap();
    assert!(out.stdout.contains("No space left on device"), "{out:?}");
    assert!(out.stdout.contains("exit=1"), "{out:?}");
    let written: u64 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!(written <= cap && written > cap / 2, "stopped at the cap: {written} bytes");
    // The workspace is memory-backed: the host's disk did not take the write (allowing for
    // whatever else the machine wrote meanwhile).
    let grown = free_before.saturating_sub(free_during);
    assert!(grown < 256 << 20, "the host disk lost {grown} bytes");
    assert_run_left_nothing(&sandbox).await;
}
