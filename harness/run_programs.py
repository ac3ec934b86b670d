#!/usr/bin/env python3
"""Runs many untrusted Python programs inside one sandbox container, as their judge.

Usage: run_programs.py JOBS_DIR SCRATCH_DIR WORKERS MEMORY_BYTES NPROC

Runs as the container's supervisor (uid 0 with only CAP_SETUID, CAP_SETGID and CAP_KILL).
JOBS_DIR (root-only) holds jobs.json ({"id", "file", "timeout"}) and the sources; no program
can read them. Each program runs in a forked child that drops to a uid of its own, with
rlimits, in a private 0700 directory under SCRATCH_DIR (mode 1733), and receives its source
and a fresh nonce over a pipe. A wrapper execs the source and, only when it returned normally,
writes the nonce to a pipe only the runner reads and calls os._exit(0), so no exit status,
signal, atexit hook or printed text can pass a program. When a program ends, every process of
its uid is killed. One JSON line per program goes to this runner's own stdout (the exec's
output stream), which programs cannot write to: "passed", "failed", "timeout", or "error"
when the harness itself could not run the program.

Limit: the nonce lives in the program's own process (the wrapper's frame) until it is
written, so code in that process could in principle dig it out by introspection
(sys._getframe, gc, /proc/self/mem). Other programs cannot: they run as other uids.
"""
import json
import os
import resource
import secrets
import selectors
import signal
import sys
import time

# Runs in the program's process. stdin carries the nonce line, then the source.
WRAPPER = r"""
import os, sys, types
def _judge(write=os.write, exit_=os._exit):
    data = sys.stdin.buffer.read()
    nonce, _, source = data.partition(b"\n")
    del data
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    try:
        exec(compile(source, "program.py", "exec"), module.__dict__)
    except BaseException:
        try:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
        exit_(1)
    try:
        write(3, nonce)
    finally:
        exit_(0)
_judge()
"""

STDERR_TAIL = 1000
# Enough for a nonce plus whatever junk a program writes to the result pipe first.
RESULT_KEEP = 4096


def log(message):
    sys.stderr.write(f"run_programs: {message}\n")
    sys.stderr.flush()


def live_pids_of(uid):
    """Processes of `uid` that are not zombies (zombies hold nothing and are reaped by init)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uids = fields.get("Uid", "").split()
        if uids and int(uids[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def sweep(uid):
    """Kills every process of `uid`: a child becomes that uid and sends SIGKILL to all it may
    signal (kill(-1), which reaches double-forked daemons too), until none is left."""
    for _ in range(500):
        try:
            pid = os.fork()
        except OSError:
            time.sleep(0.01)
            continue
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except BaseException:
                os._exit(1)
            os._exit(0)
        os.waitpid(pid, 0)
        if not live_pids_of(uid):
            return True
        time.sleep(0.005)
    return False


class Program:
    def __init__(self, index, job, uid):
        self.index = index
        self.job = job
        self.uid = uid
        self.pid = None
        self.fds = {}  # read fd -> "stderr" | "result" | "pidfd"
        self.stderr = b""
        self.result = b""
        self.nonce = secrets.token_hex(32).encode()
        self.scratch_name = secrets.token_hex(16)
        self.started = time.monotonic()
        self.deadline = self.started + float(job["timeout"])


def child_setup(program, scratch_root, limits, src_r, err_w, res_w, setup_w):
    """In the forked child: become the program's own unprivileged uid and exec the wrapper.
    Never returns; a failure is reported on setup_w (closed on exec) and exits 127."""
    try:
        os.setsid()
        try:
            # The kernel's OOM killer takes programs before the runner.
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        memory, nproc, timeout = limits
        cpu = int(timeout) + 5
        for kind, value in (
            (resource.RLIMIT_AS, memory),
            (resource.RLIMIT_NPROC, nproc),
            (resource.RLIMIT_FSIZE, 64 << 20),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, 256),
        ):
            hard = resource.getrlimit(kind)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(kind, (value, value))
        os.setgroups([])
        os.setgid(program.uid)
        os.setuid(program.uid)
        os.umask(0o077)
        # Unguessable, so no program can squat a later program's directory in advance.
        scratch = os.path.join(scratch_root, program.scratch_name)
        os.mkdir(scratch, 0o700)
        os.chdir(scratch)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(src_r, 0)
        os.dup2(devnull, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, 3)
        os.set_inheritable(3, True)
        keep = setup_w
        os.closerange(4, keep)
        os.closerange(keep + 1, 65536)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": scratch,
            "TMPDIR": scratch,
            "LANG": "C.UTF-8",
            # Fewer malloc arenas: threads would otherwise reserve address space fast.
            "MALLOC_ARENA_MAX": "2",
        }
        os.execve(sys.executable, [sys.executable, "-I", "-c", WRAPPER], env)
    except BaseException as exc:
        try:
            os.write(setup_w, repr(exc).encode()[:2000] or b"?")
        finally:
            os._exit(127)


def start(program, jobs_dir, scratch_root, limits, selector):
    with open(os.path.join(jobs_dir, program.job["file"]), "rb") as f:
        source = f.read()
    src_r, src_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    setup_r, setup_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child_setup(program, scratch_root, limits, src_r, err_w, res_w, setup_w)
    program.pid = pid
    for fd in (src_r, err_w, res_w, setup_w):
        os.close(fd)
    # Empty at EOF: the exec succeeded (setup_w is close-on-exec).
    failure = b""
    while True:
        chunk = os.read(setup_r, 4096)
        if not chunk:
            break
        failure += chunk
    os.close(setup_r)
    for fd, kind in ((err_r, "stderr"), (res_r, "result")):
        os.set_blocking(fd, False)
        program.fds[fd] = kind
        selector.register(fd, selectors.EVENT_READ, program)
    try:
        pidfd = os.pidfd_open(pid)
        program.fds[pidfd] = "pidfd"
        selector.register(pidfd, selectors.EVENT_READ, program)
    except (AttributeError, OSError):
        pass
    if failure:
        os.close(src_w)
        raise RuntimeError("program setup failed: " + failure.decode("utf-8", "replace"))
    try:
        os.write(src_w, program.nonce + b"\n")
        view = memoryview(source)
        while view:
            view = view[os.write(src_w, view):]
    except BrokenPipeError:
        pass  # it ended before reading its source: judged by how it ended
    finally:
        os.close(src_w)


def drain(program, fd):
    kind = program.fds[fd]
    if kind == "pidfd":
        return
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            return
        if kind == "stderr":
            program.stderr = (program.stderr + chunk)[-STDERR_TAIL:]
        else:
            program.result = (program.result + chunk)[-RESULT_KEEP:]


def finish(program, wait_status, timed_out, selector, error=None):
    swept = sweep(program.uid)
    for fd in list(program.fds):
        drain(program, fd)
        selector.unregister(fd)
        os.close(fd)
    program.fds.clear()
    returncode = None
    if error is not None or not swept:
        status = "error"
    elif timed_out:
        status = "timeout"
    else:
        returncode = os.waitstatus_to_exitcode(wait_status)
        # Only the wrapper, after the program body returned, knows the nonce and exits 0.
        status = "passed" if returncode == 0 and program.nonce in program.result else "failed"
    line = {
        "id": program.job["id"],
        "status": status,
        "returncode": returncode,
        "seconds": round(time.monotonic() - program.started, 3),
        "stderr_tail": program.stderr.decode("utf-8", "replace"),
    }
    if error is not None:
        line["harness_error"] = error
    elif not swept:
        line["harness_error"] = "processes of the program survived SIGKILL"
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main():
    jobs_dir, scratch_root = sys.argv[1], sys.argv[2]
    workers, memory, nproc = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    with open(os.path.join(jobs_dir, "jobs.json")) as f:
        jobs = json.load(f)
    # A random uid range per run: rlimits per uid count processes across the whole host, so
    # concurrent runs (or host users) must not share a program's uid.
    uid_base = 100_000 + secrets.randbelow(30_000) * 65536  # below 2**31
    if len(jobs) >= 65536:
        raise SystemExit("too many programs for one container")
    selector = selectors.DefaultSelector()
    pending = list(enumerate(jobs))
    pending.reverse()
    running = {}
    while pending or running:
        while pending and len(running) < max(1, workers):
            index, job = pending.pop()
            program = Program(index, job, uid_base + index)
            try:
                start(program, jobs_dir, scratch_root, (memory, nproc, float(job["timeout"])), selector)
            except Exception as exc:  # the harness failed for this program
                log(f"{job['id']}: {exc!r}")
                if program.pid:
                    os.waitpid(program.pid, 0)
                finish(program, 0, False, selector, error=repr(exc))
                continue
            running[program.pid] = program
        now = time.monotonic()
        next_deadline = min(p.deadline for p in running.values()) if running else now
        has_pidfd = all("pidfd" in p.fds.values() for p in running.values())
        wait = max(0.0, next_deadline - now)
        for key, _ in selector.select(timeout=wait if has_pidfd else min(wait, 0.02)):
            drain(key.data, key.fd)
        now = time.monotonic()
        for pid, program in list(running.items()):
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                finish(program, wait_status, False, selector)
            elif now >= program.deadline:
                sweep(program.uid)
                os.waitpid(pid, 0)
                finish(program, 0, True, selector)
            else:
                continue
            del running[pid]


if __name__ == "__main__":
    main()
