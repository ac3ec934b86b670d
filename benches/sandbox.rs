//! Per-task overhead of the sandbox against a bare `docker run --rm IMAGE true` (docker CLI,
//! same run, interleaved so both see the same machine load), and throughput of many tiny
//! tasks at 1, 2 and 4 workers. Prints figures and ratios.
//!
//! `cargo bench --bench sandbox --profile dev [-- ROUNDS TASKS]` (defaults 20 and 100).

use std::time::{Duration, Instant};

use repairbench::kernel::scheduler::run_pool;
use repairbench::sandbox::{
    archive, ensure_default_image, DockerSandbox, EnvSpec, ExecRequest, Job, Sandbox, Verdict,
};

fn stats(samples: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let median = ms[ms.len() / 2];
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let p90 = ms[(ms.len() * 9 / 10).min(ms.len() - 1)];
    (median, mean, p90)
}

async fn docker_cli_run(args: &[&str]) -> Duration {
    let started = Instant::now();
    let status = tokio::process::Command::new("docker")
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .expect("the docker CLI is needed for the baseline");
    assert!(status.success(), "docker {args:?} failed");
    started.elapsed()
}

/// The trait path: create, copy in, exec `true` (starts the container), copy out, destroy.
async fn trait_task(sandbox: &DockerSandbox, spec: &EnvSpec, input: &[u8]) -> Duration {
    let started = Instant::now();
    let env = sandbox.create(spec).await.unwrap();
    sandbox.copy_in(&env, "/workspace", input.to_vec()).await.unwrap();
    let request = ExecRequest {
        cmd: vec!["true".into()],
        timeout: Duration::from_secs(30),
        workdir: None,
        env: vec![],
    };
    let result = sandbox.exec(&env, &request).await.unwrap();
    assert_eq!(result.verdict, Verdict::Exit(0));
    sandbox.copy_out(&env, "/workspace/input.txt").await.unwrap();
    sandbox.destroy(env).await.unwrap();
    started.elapsed()
}

/// The one-shot path: the command is the container's main process.
async fn job_task(sandbox: &DockerSandbox, spec: &EnvSpec, input: &[u8]) -> Duration {
    let started = Instant::now();
    let job = Job {
        cmd: vec!["true".into()],
        timeout: Duration::from_secs(30),
        files_in: Some(input.to_vec()),
        copy_out: Some("input.txt".into()),
        copy_out_after_timeout: false,
    };
    let out = sandbox.run_job(spec, &job, None).await.unwrap();
    assert_eq!(out.result.verdict, Verdict::Exit(0));
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = args.first().copied().unwrap_or(20);
    let tasks = args.get(1).copied().unwrap_or(100);
    let sandbox = DockerSandbox::connect().await.expect("a running Docker engine");
    let image = ensure_default_image(sandbox.docker()).await.expect("the default image");
    let spec = EnvSpec::new(image.clone());
    let input = archive::tar_files(&[("input.txt", b"hello".as_slice(), false)]);
    let bare = ["run", "--rm", image.as_str(), "true"];
    let bare_no_net = ["run", "--rm", "--network", "none", image.as_str(), "true"];

    // Warm caches (image layers, engine) before measuring.
    for _ in 0..2 {
        docker_cli_run(&bare).await;
        job_task(&sandbox, &spec, &input).await;
        trait_task(&sandbox, &spec, &input).await;
    }
    let (mut t_bare, mut t_bare_no_net, mut t_job, mut t_trait) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        t_bare.push(docker_cli_run(&bare).await);
        t_job.push(job_task(&sandbox, &spec, &input).await);
        t_bare_no_net.push(docker_cli_run(&bare_no_net).await);
        t_trait.push(trait_task(&sandbox, &spec, &input).await);
    }
    let (bare_median, bare_mean, _) = stats(&t_bare);
    println!("per-task latency over {rounds} interleaved rounds (ms): median / mean / p90, ratio of medians to bare");
    for (name, samples) in [
        ("docker run --rm IMAGE true (bare)", &t_bare),
        ("docker run --rm --network none", &t_bare_no_net),
        ("sandbox run_job (copy in, true, copy out)", &t_job),
        ("sandbox trait (create..exec true..destroy)", &t_trait),
    ] {
        let (median, mean, p90) = stats(samples);
        println!(
            "  {name:<44} {median:7.1} / {mean:7.1} / {p90:7.1}   x{:.2} (mean x{:.2})",
            median / bare_median,
            mean / bare_mean
        );
    }

    println!("throughput of {tasks} tiny tasks (run_job `true` with copy in/out):");
    let mut single = 0.0;
    for workers in [1usize, 2, 4] {
        let started = Instant::now();
        let results = run_pool(
            (0..tasks).collect::<Vec<_>>(),
            workers,
            |_, _| {
                let sandbox = sandbox.clone();
                let spec = spec.clone();
                let input = input.clone();
                async move { Ok::<_, ()>(job_task(&sandbox, &spec, &input).await) }
            },
            |_, _| {},
        )
        .await;
        let elapsed = started.elapsed().as_secs_f64();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let rate = ok as f64 / elapsed;
        if workers == 1 {
            single = rate;
        }
        println!(
            "  {workers} worker(s): {ok}/{tasks} ok in {elapsed:6.1} s = {rate:5.2} tasks/s (x{:.2} of 1 worker)",
            rate / single
        );
    }
    let left = sandbox.remove_run_resources().await.unwrap();
    assert_eq!(left.containers, 0, "the benchmark left containers");
}
