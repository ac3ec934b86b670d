#!/usr/bin/env python3
"""Runs many untrusted Python programs inside one sandbox container.

Usage: run_programs.py JOBS_DIR RESULTS_FILE WORKERS

JOBS_DIR/jobs.json lists {"id", "file", "timeout"}; each program runs in its own process
group, in its own scratch directory, with its own timeout and an address-space limit. One
JSON line per program is appended to RESULTS_FILE as soon as it ends, so a killed container
still leaves the finished results. Exit status 0 means "passed".
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MEMORY_LIMIT_BYTES = 2 << 30


def limit_child():
    os.setsid()
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ValueError, OSError):
        pass


def run_one(jobs_dir, scratch_root, job):
    program = os.path.abspath(os.path.join(jobs_dir, job["file"]))
    scratch = os.path.join(scratch_root, job["id"].replace("/", "_"))
    os.makedirs(scratch, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-I", program],
        cwd=scratch,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limit_child,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": scratch, "HOME": scratch},
    )
    try:
        _, err = proc.communicate(timeout=job["timeout"])
        status = "passed" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = proc.communicate()
        status = "timeout"
    shutil.rmtree(scratch, ignore_errors=True)
    tail = (err or b"")[-2000:].decode("utf-8", "replace")
    return {
        "id": job["id"],
        "status": status,
        "returncode": proc.returncode,
        "seconds": round(time.monotonic() - start, 3),
        "stderr_tail": tail,
    }


def main():
    jobs_dir, results_file, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(os.path.join(jobs_dir, "jobs.json")) as f:
        jobs = json.load(f)
    # The results directory is made here, by the sandbox user: what the archive unpacks
    # belongs to root and is read-only to us.
    os.makedirs(os.path.dirname(os.path.abspath(results_file)), exist_ok=True)
    scratch_root = os.path.join(os.path.dirname(os.path.abspath(results_file)), "scratch")
    os.makedirs(scratch_root, exist_ok=True)
    lock = threading.Lock()
    with open(results_file, "a") as out:
        def record(job):
            try:
                result = run_one(jobs_dir, scratch_root, job)
            except Exception as exc:  # the harness itself failed for this job
                result = {"id": job["id"], "status": "error", "returncode": None, "seconds": 0.0,
                          "stderr_tail": repr(exc)}
            with lock:
                out.write(json.dumps(result) + "\n")
                out.flush()

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            list(pool.map(record, jobs))


if __name__ == "__main__":
    main()
