"""repairbench's results plugin for pytest: the only way test results leave the sandbox.

repairbench loads it with `-p` (it is imported before any conftest, plugin or test code),
together with a hand-off file beside it that holds a secret key and where to write the
results. At import it reads the hand-off and deletes its own folder, so neither the key nor
the paths are left on disk, in the environment or in argv. It points pytest's JUnit writer at
a private temporary file, and when pytest is done (after every other plugin's last hook) it
signs the JUnit XML with HMAC-SHA256 under the key and writes XML and signature to the
results path. repairbench accepts results only with a valid signature, and cross-checks them
against pytest's `-rA` summary.

Its imports cannot be shadowed by a module of the repository: they are all made here, at
import, while the folders of the workspace (the repository, the task's PYTHONPATH) are taken
off sys.path, so they come from the standard library alone; `pytest` is already loaded, and
nothing is imported later. (The commands also run with PYTHONSAFEPATH=1, and a patch adding
a module named after a standard-library one is refused before anything runs.)

Code under test runs in the same process and could, with effort, reach into this module;
that limit is stated in the README's Trust model.
"""
import os
import sys

# The plugin sits in a folder of its own at the workspace's root.
_workspace = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_kept = sys.path[:]
sys.path[:] = [
    p for p in _kept if p and not os.path.abspath(p).startswith(_workspace + os.sep) and os.path.abspath(p) != _workspace
]
try:
    import hashlib
    import hmac
    import json
    import shutil
    import tempfile
finally:
    sys.path[:] = _kept
del _kept

import pytest


def _take_handoff():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "handoff.json")) as f:
        handoff = json.load(f)
    shutil.rmtree(here, ignore_errors=True)
    return handoff


_handoff = _take_handoff()
_key = bytes.fromhex(_handoff["key"])
_results_path = _handoff["results"]
_junit_dir = tempfile.mkdtemp(prefix="junit-")
_junit_path = os.path.join(_junit_dir, "report.xml")
del _handoff

# The environment's rebuild of compiled extensions from the tree under test (an image that has
# them holds this script; the path is repairbench's `BEFORE_TESTS`). It runs here, once the key is
# only in this process's memory, so nothing the tree's build starts can read the hand-off file.
_REBUILD = "/opt/repairbench/before-tests"
if os.path.exists(_REBUILD):
    import subprocess

    sys.stdout.flush()
    if subprocess.run([_REBUILD]).returncode != 0:
        # os._exit, since pytest.exit takes no return code before pytest 5 (era environments).
        sys.stderr.write("the compiled extensions did not build from the tree under test\n")
        sys.stderr.flush()
        os._exit(90)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Before the JUnit plugin's own pytest_configure reads the option.
    config.option.xmlpath = _junit_path


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    try:
        with open(_junit_path, "rb") as f:
            xml = f.read()
    except OSError:
        return  # nothing to sign: repairbench reports the results as missing
    finally:
        shutil.rmtree(_junit_dir, ignore_errors=True)
    mac = hmac.new(_key, xml, hashlib.sha256).hexdigest()
    partial = _results_path + ".partial"
    with open(partial, "w") as f:
        json.dump({"junit_hex": xml.hex(), "hmac_sha256": mac}, f)
    os.replace(partial, _results_path)
