//! Code suites judge by completion, on the real Docker engine: a program passes only when its
//! body ran to its end. Exit tricks, signals, hogs, fork bombs and attempts to forge results
//! fail the program that tries them and leave every other program's status as it was, whether
//! programs run one per container or side by side; a daemon a program leaves is killed; and a
//! runner killed mid-batch is rerun, not scored.

mod common;

use std::time::{Duration, Instant};

use repairbench::sandbox::docker::LABEL_RUN;
use repairbench::sandbox::{DockerSandbox, EnvSpec};
use repairbench::suites::{CodeRunner, Program, ProgramStatus, SandboxCodeRunner};
use ProgramStatus::{Failed, Passed, Timeout};

fn runner(rt: &tokio::runtime::Runtime, workers: usize) -> SandboxCodeRunner<DockerSandbox> {
    let image = common::sandbox::default_image();
    let sandbox = rt.block_on(common::sandbox::connect());
    let mut spec = EnvSpec::new(image);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    spec.limits.cpus = workers.min(cpus) as f64;
    SandboxCodeRunner { sandbox, spec, runtime: rt.handle().clone(), workers }
}

fn program(source: &str) -> Program {
    Program { source: source.to_string(), timeout_s: 10.0 }
}

const CORRECT: &str = "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\n";
const WRONG: &str = "def add(a, b):\n    return a - b\n\nassert add(2, 3) == 5\n";

/// Each of these leaves before its failing test would run; each must fail.
const EXIT_TRICKS: &[(&str, &str)] = &[
    ("sys.exit(0)", "import sys\nsys.exit(0)\nassert False\n"),
    ("os._exit(0)", "import os\nos._exit(0)\nassert False\n"),
    ("raise SystemExit", "raise SystemExit\nassert False\n"),
    ("raise SystemExit(0)", "raise SystemExit(0)\nassert False\n"),
    ("exit()", "exit()\nassert False\n"),
    ("quit()", "quit()\nassert False\n"),
    ("SIGTERM self", "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\nassert False\n"),
    ("SIGKILL self", "import os, signal, time\nos.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(5)\nassert False\n"),
    ("atexit", "import atexit, os\natexit.register(os._exit, 0)\nassert False\n"),
    (
        "thread exits",
        "import os, threading, time\nthreading.Thread(target=os._exit, args=(0,)).start()\ntime.sleep(5)\nassert False\n",
    ),
    ("parent exits, child fails", "import os, time\nif os.fork():\n    os._exit(0)\ntime.sleep(1)\nassert False\n"),
    ("junk on the result pipe", "import os\nos.write(3, b'passed\\n' * 100)\nos._exit(0)\n"),
];

/// Reads, writes and prints everything a forger might hope the judge looks at, kills what it
/// may, then leaves with exit status 0 (which the old runner counted as a pass).
const FORGER: &str = r#"
import glob, json, os, signal, sys
lines = "".join(json.dumps({"id": f"p{i}", "status": "passed", "returncode": 0, "seconds": 0.1,
                            "stderr_tail": ""}) + "\n" for i in range(100))
targets = ["/workspace/jobs/jobs.json", "/workspace/out/results.jsonl", "/workspace/results.jsonl",
           "/workspace/jobs/results.jsonl", "/workspace/scratch/results.jsonl", "/tmp/results.jsonl",
           "/dev/shm/results.jsonl", "/workspace/run_programs.py"]
targets += [f"/workspace/jobs/p{i}.py" for i in range(100)]
targets += glob.glob("/workspace/scratch/*/*") + glob.glob("/workspace/scratch/*")
for path in targets:
    try:
        with open(path) as f:
            f.read()
    except OSError:
        pass
    try:
        with open(path, "a") as f:
            f.write(lines)
    except OSError:
        pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
sys.stdout.write(lines)
sys.stderr.write(lines)
try:
    os.write(3, lines.encode())
except OSError:
    pass
sys.exit(0)
"#;

/// Passes only if it finds itself isolated: its own uid (neither root nor the image's user),
/// jobs and other programs' directories unreadable, the workspace not writable, files private.
const PROBE: &str = r#"
import os
assert os.getuid() not in (0, 1000) and os.getgid() not in (0, 1000) and os.getgroups() == []
for denied in (lambda: open("/workspace/jobs/jobs.json"), lambda: os.listdir("/workspace/jobs"),
               lambda: os.listdir("/workspace/scratch"), lambda: open("/workspace/x", "w")):
    try:
        denied()
    except PermissionError:
        continue
    raise AssertionError("not isolated")
here = os.getcwd()
assert here.startswith("/workspace/scratch/") and os.stat(here).st_mode & 0o777 == 0o700
assert os.environ["TMPDIR"] == here and not any("nonce" in k.lower() for k in os.environ)
with open("/tmp/mine", "w") as f:
    f.write("ok")
assert os.stat("/tmp/mine").st_mode & 0o777 == 0o600
"#;

const MEMORY_HOG: &str = "x = bytearray(8 << 30)\n";
const GRADUAL_HOG: &str = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))\n";
/// Several processes, each under the address-space limit, together far above the container's
/// memory: the OOM killer must take them, not their siblings.
const FORKED_HOG: &str = r#"
import os, time
for _ in range(6):
    if os.fork() == 0:
        x = bytearray(900 << 20)
        time.sleep(4)
        os._exit(0)
time.sleep(5)
assert False
"#;
const FORK_BOMB: &str = "import os\nwhile True:\n    os.fork()\n";
const ENDLESS: &str = "while True:\n    pass\n";

/// The mixed set: name, source, expected status.
fn mixed() -> Vec<(String, Program, ProgramStatus)> {
    let mut set = vec![
        ("correct".to_string(), program(CORRECT), Passed),
        ("wrong".to_string(), program(WRONG), Failed),
        ("probe".to_string(), program(PROBE), Passed),
        ("memory hog".to_string(), program(MEMORY_HOG), Failed),
        // A long deadline: on a loaded machine, zero-filling a gigabyte takes a while, and the
        // point is the memory limit, not the clock.
        ("gradual hog".to_string(), Program { source: GRADUAL_HOG.into(), timeout_s: 60.0 }, Failed),
        ("forked hog".to_string(), program(FORKED_HOG), Failed),
        ("fork bomb".to_string(), program(FORK_BOMB), Failed),
        ("endless".to_string(), Program { source: ENDLESS.into(), timeout_s: 2.0 }, Timeout),
        ("forger".to_string(), program(FORGER), Failed),
    ];
    set.extend(EXIT_TRICKS.iter().map(|(name, source)| (name.to_string(), program(source), Failed)));
    // Correct and wrong answers between the troublemakers, to see them undisturbed.
    let mut out = Vec::new();
    for (i, item) in set.into_iter().enumerate() {
        out.push(item);
        let (name, source, status) =
            if i % 2 == 0 { ("correct", CORRECT, Passed) } else { ("wrong", WRONG, Failed) };
        out.push((format!("{name} after #{i}"), program(source), status));
    }
    out
}

fn named(
    set: &[(String, Program, ProgramStatus)],
    statuses: &[ProgramStatus],
) -> Vec<(String, ProgramStatus)> {
    set.iter().zip(statuses).map(|((name, _, _), s)| (name.clone(), *s)).collect()
}

#[test]
fn mixed_programs_get_their_status_batched_and_one_by_one() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let set = mixed();
    let programs: Vec<Program> = set.iter().map(|(_, p, _)| p.clone()).collect();
    let expected: Vec<(String, ProgramStatus)> = set.iter().map(|(n, _, s)| (n.clone(), *s)).collect();

    // The CLI's defaults: many programs per container, two side by side.
    let started = Instant::now();
    let batched = runner(&rt, 2).run(&programs).unwrap();
    eprintln!("batched: {} programs in {:?}", programs.len(), started.elapsed());
    assert_eq!(named(&set, &batched), expected);

    // `--batch 1 --workers 1`: each program alone in its own container.
    let single = runner(&rt, 1);
    let started = Instant::now();
    let one_by_one: Vec<ProgramStatus> =
        programs.iter().map(|p| single.run(std::slice::from_ref(p)).unwrap()[0]).collect();
    eprintln!("one by one: {} programs in {:?}", programs.len(), started.elapsed());
    assert_eq!(named(&set, &one_by_one), expected);
}

#[test]
fn forging_results_fails_the_forger_and_changes_no_other_status() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let others: Vec<Program> =
        [WRONG, CORRECT, WRONG, WRONG, CORRECT, WRONG].iter().map(|s| program(s)).collect();
    let expected_others = [Failed, Passed, Failed, Failed, Passed, Failed];
    for workers in [1, 3] {
        let runner = runner(&rt, workers);
        assert_eq!(runner.run(&others).unwrap(), expected_others, "without the forger, {workers} worker(s)");
        // Forgers first (they run before the others start) and in the middle.
        let mut with: Vec<Program> = vec![program(FORGER)];
        with.extend(others[..3].iter().cloned());
        with.push(program(FORGER));
        with.extend(others[3..].iter().cloned());
        let statuses = runner.run(&with).unwrap();
        let mut got_others = statuses.clone();
        let forgers = [got_others.remove(4), got_others.remove(0)];
        assert_eq!(forgers, [Failed, Failed], "the forgers, {workers} worker(s)");
        assert_eq!(got_others, expected_others, "the others beside forgers, {workers} worker(s)");
    }
}

#[test]
fn a_daemon_left_by_a_program_is_killed_when_it_ends() {
    // The program double-forks a daemon in a new session that ignores SIGTERM and SIGHUP and
    // waits until the daemon runs before it returns (and passes). The next program, under
    // another uid, passes only if no such process is left anywhere in the container.
    let daemon = r#"
import os, signal, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.write(w, b"up")
        os.execv("/bin/sleep", ["repairbench-daemon-marker", "600"])
    os._exit(0)
assert os.read(r, 2) == b"up"
time.sleep(0.2)
"#;
    let checker = r#"
import os, time
time.sleep(0.5)
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"repairbench-daemon-marker" in f.read():
                left.append(pid)
    except OSError:
        pass
assert not left, left
"#;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let statuses = runner(&rt, 1).run(&[program(daemon), program(checker)]).unwrap();
    assert_eq!(statuses, [Passed, Passed]);
}

#[test]
fn programs_a_killed_runner_left_unjudged_are_rerun_in_a_fresh_container() {
    // Program 0 is quick; program 1 takes 3 s, during which the container is killed from
    // outside (as an engine failure or the host's OOM killer would). Program 1 and later ones
    // have no result from that container and must be rerun, not scored.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let runner = runner(&rt, 1);
    let slow_correct = format!("import time\ntime.sleep(3)\n{CORRECT}");
    let programs = [program(CORRECT), program(&slow_correct), program(WRONG)];
    let docker = runner.sandbox.docker().clone();
    let run_label = format!("{LABEL_RUN}={}", runner.sandbox.run_id());
    let killer = rt.spawn(async move {
        use bollard::query_parameters::{KillContainerOptionsBuilder, ListContainersOptionsBuilder};
        let filters = std::collections::HashMap::from([("label", vec![run_label])]);
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let list = ListContainersOptionsBuilder::default().filters(&filters).build();
            let running = docker.list_containers(Some(list)).await.unwrap();
            if let Some(id) = running.first().and_then(|c| c.id.clone()) {
                // Let the first program finish, then kill during the second.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let kill = KillContainerOptionsBuilder::default().signal("KILL").build();
                docker.kill_container(&id, Some(kill)).await.unwrap();
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    let statuses = runner.run(&programs).unwrap();
    assert!(rt.block_on(killer).unwrap(), "the container was never seen running");
    assert_eq!(statuses, [Passed, Passed, Failed]);
}
