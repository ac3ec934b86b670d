//! A real Ray cluster for the tests: a head on 127.0.0.2 (no slots) and two worker nodes on
//! 127.0.0.3 and 127.0.0.4 (one `repairbench` slot each), from the pinned `ray[default]` in
//! the venv `scripts/setup` makes. Token authentication is on. Every process the cluster
//! runs is found by its command line (the cluster's own temporary folder or control-store
//! address) and stopped by pid when the cluster is dropped; `ray stop` is never used, as it
//! would stop every cluster on the machine.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const HEAD: &str = "127.0.0.2";
pub const WORKERS: [&str; 2] = ["127.0.0.3", "127.0.0.4"];
pub const TOKEN: &str = "repairbench-test-token-0123456789abcdef";

pub fn venv() -> PathBuf {
    std::env::var_os("REPAIRBENCH_RAY_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("REPAIRBENCH_CACHE").map(PathBuf::from).unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"))
                .join("repairbench")
        });
        cache.join("ray-venv")
    })
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0)).expect("a free port").local_addr().unwrap().port()
}

pub struct RayCluster {
    pub temp: PathBuf,
    pub gcs: String,
    pub dashboard: String,
    ray: PathBuf,
}

impl RayCluster {
    /// Starts the head and both workers, and waits until the head sees two slots.
    pub fn start() -> Self {
        let ray = venv().join("bin/ray");
        assert!(
            ray.exists(),
            "{} is missing: run scripts/setup (it installs the pinned ray[default] the Ray tests use)",
            ray.display()
        );
        let temp = PathBuf::from(format!("/tmp/rbray-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&temp);
        std::fs::create_dir_all(&temp).unwrap();
        let gcs_port = free_port(HEAD);
        let dashboard_port = free_port(HEAD);
        let cluster = Self {
            gcs: format!("{HEAD}:{gcs_port}"),
            dashboard: format!("http://{HEAD}:{dashboard_port}"),
            temp,
            ray,
        };
        cluster.ray_start(&[
            "--head".into(),
            format!("--node-ip-address={HEAD}"),
            format!("--port={gcs_port}"),
            format!("--dashboard-host={HEAD}"),
            format!("--dashboard-port={dashboard_port}"),
            format!("--ray-client-server-port={}", free_port(HEAD)),
            format!("--dashboard-agent-listen-port={}", free_port(HEAD)),
            format!("--temp-dir={}", cluster.temp.join("head").display()),
            "--num-cpus=1".into(),
            "--resources={\"repairbench\": 0}".into(),
        ]);
        for worker in WORKERS {
            cluster.start_worker(worker);
        }
        cluster.wait_for_slots(2.0);
        cluster
    }

    fn ray_start(&self, args: &[String]) {
        let output = Command::new(&self.ray)
            .arg("start")
            .args(args)
            .arg("--disable-usage-stats")
            .env("RAY_AUTH_MODE", "token")
            .env("RAY_AUTH_TOKEN", TOKEN)
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .output()
            .expect("running ray start");
        assert!(
            output.status.success(),
            "ray start {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts (or restarts) the worker node on `ip`, with extra environment for its processes.
    pub fn start_worker_with(&self, ip: &str, env: &[(&str, &str)]) {
        let mut command = Command::new(&self.ray);
        command
            .arg("start")
            .arg(format!("--address={}", self.gcs))
            .arg(format!("--node-ip-address={ip}"))
            .arg(format!("--dashboard-agent-listen-port={}", free_port(ip)))
            .arg(format!("--temp-dir={}", self.temp.join(ip).display()))
            .arg("--num-cpus=1")
            .arg("--resources={\"repairbench\": 1}")
            .arg("--disable-usage-stats")
            .env("RAY_AUTH_MODE", "token")
            .env("RAY_AUTH_TOKEN", TOKEN)
            .env("RAY_USAGE_STATS_ENABLED", "0");
        for (k, v) in env {
            command.env(k, v);
        }
        let output = command.output().expect("running ray start");
        assert!(
            output.status.success(),
            "ray start (worker {ip}) failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn start_worker(&self, ip: &str) {
        self.start_worker_with(ip, &[]);
    }

    pub fn executor(&self) -> String {
        format!("ray:{}", self.dashboard)
    }

    /// The head's view of the nodes: `(ip, node id, alive, slots)`.
    pub fn nodes(&self) -> Vec<(String, String, bool, f64)> {
        let value: serde_json::Value = ureq::get(format!("{}/nodes?view=summary", self.dashboard))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .ok()
            .and_then(|mut r| serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok())
            .unwrap_or_default();
        value
            .pointer("/data/summary")
            .and_then(|s| s.as_array())
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|n| {
                        let raylet = &n["raylet"];
                        (
                            raylet["nodeManagerAddress"].as_str().unwrap_or("").to_owned(),
                            raylet["nodeId"].as_str().unwrap_or("").to_owned(),
                            raylet["state"].as_str() == Some("ALIVE"),
                            raylet
                                .pointer("/resourcesTotal/repairbench")
                                .and_then(|v| v.as_f64())
                                .unwrap_or(0.0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn wait_for_slots(&self, slots: f64) {
        let started = Instant::now();
        loop {
            let alive: f64 = self.nodes().iter().filter(|n| n.2).map(|n| n.3).sum();
            if alive >= slots {
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the cluster never offered {slots} slots");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Every process of this cluster.
    pub fn pids(&self) -> Vec<u32> {
        let markers = [self.temp.to_string_lossy().into_owned(), self.gcs.clone()];
        processes()
            .into_iter()
            .filter(|(_, _, cmd)| markers.iter().any(|m| cmd.contains(m.as_str())))
            .map(|p| p.0)
            .collect()
    }

    /// SIGKILLs the worker node on `ip`: its raylet and everything under it (agents, Ray
    /// workers, job supervisors and the jobs they run).
    pub fn kill_node(&self, ip: &str) -> Vec<u32> {
        let all = processes();
        let raylets: Vec<u32> = all
            .iter()
            .filter(|(_, _, cmd)| {
                cmd.contains("raylet/raylet") && cmd.contains(&format!("--node_ip_address={ip}"))
            })
            .map(|p| p.0)
            .collect();
        let mut doomed = raylets.clone();
        let mut grew = true;
        while grew {
            grew = false;
            for (pid, ppid, _) in &all {
                if doomed.contains(ppid) && !doomed.contains(pid) {
                    doomed.push(*pid);
                    grew = true;
                }
            }
        }
        for pid in &doomed {
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        doomed
    }
}

/// `(pid, parent pid, command line)` of every process.
pub fn processes() -> Vec<(u32, u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The parent pid is the second field after the command name in parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        let cmd = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, ppid, cmd));
    }
    found
}

pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

impl Drop for RayCluster {
    fn drop(&mut self) {
        // Twice: a process can start while the first round is being killed.
        for _ in 0..2 {
            for pid in self.pids() {
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        let _ = std::fs::remove_dir_all(&self.temp);
    }
}
