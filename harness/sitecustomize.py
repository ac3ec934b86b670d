"""repairbench's import order for every Python process of a test run or CI job.

The commands run with PYTHONSAFEPATH=1, so Python no longer puts the directory it starts
from (the repository root for `python -m ...` and `python -c ...`, a script's folder for
`python script.py`) first on sys.path, where a module the patch added there (`hmac.py`,
`pyflakes/`) would be imported in place of the standard library's or a tool's. This module
(found through PYTHONPATH, in a folder with a random name the patch cannot know; it runs
before any code of the repository) puts that directory back
at the end instead, followed by the task's own PYTHONPATH entries, so the project still
imports as its tests expect while the standard library and installed packages come first.

It imports nothing: `sys` is built in and `os` was loaded before sys.path was read.
"""
import os
import sys


def _append_start_directory():
    start = sys.argv[0] if sys.argv else ""
    if start in ("", "-c", "-m"):
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.abspath(start))
    here = os.path.dirname(os.path.abspath(__file__))
    extra = []
    try:
        with open(os.path.join(here, "path-after"), encoding="utf-8") as f:
            extra = [line.rstrip("\n") for line in f if line.strip()]
    except OSError:
        pass
    for entry in [first] + extra:
        if entry not in sys.path:
            sys.path.append(entry)


_append_start_directory()
del _append_start_directory
