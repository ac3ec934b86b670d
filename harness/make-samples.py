#!/usr/bin/env python3
"""Regenerates the bundled sample repair tasks in issues/ (run from the repository root).

Each sample is a small project (Python, Rust, Go or Node) with a real-looking bug. The script
builds its git history with fixed authors and dates (so commit ids are the same on every
machine), writes the base commit as issues/NAME/repo.bundle, and the SWE-bench instance as
issues/NAME/task.json: `patch` is the fix to the sources, `test_patch` the tests that show the
bug; `environment` and `ci_jobs` only for the samples that define them. A sample's `wrong_fix`
is written as a patch under tests/fixtures/swe/. FAIL_TO_PASS and PASS_TO_PASS are listed here
by hand; `cargo test --test swe_grade` checks them for real (gold must resolve every sample in
the sandbox, the empty patch none).

The samples with services (`services`, `service_checks`) are in service_samples.py.

Usage: make-samples.py [ISSUES_DIR [FIXTURES_DIR]] (defaults: issues, tests/fixtures/swe).
Needs only python3 and git.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Sample Maintainer",
    "GIT_AUTHOR_EMAIL": "maintainer@example.com",
    "GIT_COMMITTER_NAME": "Sample Maintainer",
    "GIT_COMMITTER_EMAIL": "maintainer@example.com",
    "GIT_AUTHOR_DATE": "2024-03-01T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-03-01T12:00:00+00:00",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


def write(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", newline="\n") as f:
            f.write(text.lstrip("\n"))


PYPROJECT = """
[project]
name = "{name}"
version = "0.3.1"
requires-python = ">=3.8"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

SAMPLES = []

# ---------------------------------------------------------------------------------------------
SAMPLES.append({
    "dir": "textkit-slugify",
    "repo": "acme/textkit",
    "instance_id": "acme__textkit-101",
    "created_at": "2024-03-04T09:12:00Z",
    "version": "0.3",
    "problem_statement": """slugify() leaves repeated and trailing dashes

`textkit.slug.slugify` is used to build URLs from article titles, but titles with several
punctuation characters in a row produce doubled dashes, and titles ending in punctuation
produce a trailing dash:

```python
>>> from textkit.slug import slugify
>>> slugify("Hello,  World!")
'hello---world-'
```

Expected `'hello-world'`: runs of separators should collapse into a single dash and there
should be no dash at either end.
""",
    "hints_text": "The per-character loop in slug.py emits one dash per non-alphanumeric character.",
    "base": {
        "pyproject.toml": PYPROJECT.format(name="textkit"),
        "README.md": "# textkit\n\nSmall text helpers: slugs, wrapping, case conversion.\n",
        "textkit/__init__.py": '"""Small text helpers."""\n\nfrom .case import snake_to_camel\nfrom .slug import slugify\nfrom .wrap import wrap\n\n__all__ = ["slugify", "snake_to_camel", "wrap"]\n',
        "textkit/slug.py": '''
"""URL slugs from free text."""

import unicodedata


def _ascii(text):
    normalized = unicodedata.normalize("NFKD", text)
    return normalized.encode("ascii", "ignore").decode("ascii")


def slugify(text, separator="-"):
    """Lower-case ASCII slug of `text`, words joined by `separator`."""
    out = []
    for char in _ascii(text).lower():
        if char.isalnum():
            out.append(char)
        else:
            out.append(separator)
    return "".join(out)
''',
        "textkit/wrap.py": '''
"""Greedy word wrapping."""


def wrap(text, width=70):
    """Split `text` into lines of at most `width` characters (long words stay whole)."""
    if width < 1:
        raise ValueError("width must be positive")
    lines = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
''',
        "textkit/case.py": '''
"""Identifier case conversion."""


def snake_to_camel(name):
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
''',
        "tests/test_slug.py": '''
from textkit.slug import slugify


def test_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_accents_are_dropped():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_custom_separator():
    assert slugify("a b c", separator="_") == "a_b_c"
''',
        "tests/test_wrap.py": '''
import pytest

from textkit.wrap import wrap


def test_wraps_at_width():
    assert wrap("the quick brown fox", width=10) == ["the quick", "brown fox"]


def test_long_word_kept_whole():
    assert wrap("supercalifragilistic is long", width=5) == ["supercalifragilistic", "is", "long"]


def test_rejects_zero_width():
    with pytest.raises(ValueError):
        wrap("x", width=0)
''',
        "tests/test_case.py": '''
from textkit.case import snake_to_camel


def test_snake_to_camel():
    assert snake_to_camel("max_line_length") == "maxLineLength"
''',
    },
    "fix": {
        "textkit/slug.py": '''
"""URL slugs from free text."""

import unicodedata


def _ascii(text):
    normalized = unicodedata.normalize("NFKD", text)
    return normalized.encode("ascii", "ignore").decode("ascii")


def slugify(text, separator="-"):
    """Lower-case ASCII slug of `text`, words joined by `separator`."""
    words = []
    current = []
    for char in _ascii(text).lower():
        if char.isalnum():
            current.append(char)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return separator.join(words)
''',
    },
    "tests": {
        "tests/test_slug.py": '''
from textkit.slug import slugify


def test_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_accents_are_dropped():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_custom_separator():
    assert slugify("a b c", separator="_") == "a_b_c"


def test_repeated_separators_collapse():
    assert slugify("Hello,  World") == "hello-world"


def test_no_separator_at_the_ends():
    assert slugify("  Hello World!") == "hello-world"
''',
    },
    "FAIL_TO_PASS": [
        "tests/test_slug.py::test_repeated_separators_collapse",
        "tests/test_slug.py::test_no_separator_at_the_ends",
    ],
    "PASS_TO_PASS": [
        "tests/test_slug.py::test_simple_words",
        "tests/test_slug.py::test_accents_are_dropped",
        "tests/test_slug.py::test_custom_separator",
    ],
})

# ---------------------------------------------------------------------------------------------
SAMPLES.append({
    "dir": "intervals-touching",
    "repo": "acme/intervals",
    "instance_id": "acme__intervals-42",
    "created_at": "2024-03-11T15:40:00Z",
    "version": "1.2",
    "problem_statement": """merge() keeps touching intervals apart

Closed intervals that share an end point should merge, but they are returned separately:

```python
>>> from intervals import Interval, merge
>>> merge([Interval(1, 3), Interval(3, 5)])
[Interval(1, 3), Interval(3, 5)]
```

Expected `[Interval(1, 5)]`. Overlapping intervals (`(1, 4)` and `(3, 5)`) merge correctly.
This also makes `total_length` count shared end points twice in our reports.
""",
    "hints_text": "",
    "base": {
        "pyproject.toml": PYPROJECT.format(name="intervals"),
        "README.md": "# intervals\n\nClosed numeric intervals: overlap tests, merging, coverage.\n",
        "intervals/__init__.py": '"""Closed numeric intervals."""\n\nfrom .core import Interval\nfrom .merge import merge, total_length\n\n__all__ = ["Interval", "merge", "total_length"]\n',
        "intervals/core.py": '''
"""The Interval type."""


class Interval:
    """The closed interval [start, end]."""

    __slots__ = ("start", "end")

    def __init__(self, start, end):
        if end < start:
            raise ValueError(f"end {end} is before start {start}")
        self.start = start
        self.end = end

    def __eq__(self, other):
        return isinstance(other, Interval) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self):
        return hash((self.start, self.end))

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"

    @property
    def length(self):
        return self.end - self.start

    def overlaps(self, other):
        return self.start <= other.end and other.start <= self.end
''',
        "intervals/merge.py": '''
"""Merging sets of intervals."""

from .core import Interval


def merge(intervals):
    """The smallest list of disjoint intervals covering the same points, sorted."""
    ordered = sorted(intervals, key=lambda i: (i.start, i.end))
    merged = []
    for interval in ordered:
        if merged and interval.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, interval.end))
        else:
            merged.append(interval)
    return merged


def total_length(intervals):
    """Length of the union of `intervals`."""
    return sum(i.length for i in merge(intervals))
''',
        "tests/test_core.py": '''
import pytest

from intervals import Interval


def test_rejects_reversed():
    with pytest.raises(ValueError):
        Interval(5, 1)


def test_overlaps_includes_end_points():
    assert Interval(1, 3).overlaps(Interval(3, 4))
    assert not Interval(1, 2).overlaps(Interval(3, 4))


def test_length():
    assert Interval(2, 7).length == 5
''',
        "tests/test_merge.py": '''
from intervals import Interval, merge, total_length


def test_overlapping_merge():
    assert merge([Interval(3, 5), Interval(1, 4)]) == [Interval(1, 5)]


def test_disjoint_stay_apart():
    assert merge([Interval(5, 6), Interval(1, 2)]) == [Interval(1, 2), Interval(5, 6)]


def test_total_length_of_overlaps():
    assert total_length([Interval(0, 2), Interval(1, 4)]) == 4
''',
    },
    "fix": {
        "intervals/merge.py": '''
"""Merging sets of intervals."""

from .core import Interval


def merge(intervals):
    """The smallest list of disjoint intervals covering the same points, sorted."""
    ordered = sorted(intervals, key=lambda i: (i.start, i.end))
    merged = []
    for interval in ordered:
        # Closed intervals that share an end point overlap.
        if merged and interval.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Interval(last.start, max(last.end, interval.end))
        else:
            merged.append(interval)
    return merged


def total_length(intervals):
    """Length of the union of `intervals`."""
    return sum(i.length for i in merge(intervals))
''',
    },
    "tests": {
        "tests/test_merge.py": '''
from intervals import Interval, merge, total_length


def test_overlapping_merge():
    assert merge([Interval(3, 5), Interval(1, 4)]) == [Interval(1, 5)]


def test_disjoint_stay_apart():
    assert merge([Interval(5, 6), Interval(1, 2)]) == [Interval(1, 2), Interval(5, 6)]


def test_total_length_of_overlaps():
    assert total_length([Interval(0, 2), Interval(1, 4)]) == 4


def test_touching_intervals_merge():
    assert merge([Interval(3, 5), Interval(1, 3)]) == [Interval(1, 5)]
''',
    },
    "FAIL_TO_PASS": ["tests/test_merge.py::test_touching_intervals_merge"],
    "PASS_TO_PASS": [
        "tests/test_merge.py::test_overlapping_merge",
        "tests/test_merge.py::test_disjoint_stay_apart",
        "tests/test_merge.py::test_total_length_of_overlaps",
    ],
})

# ---------------------------------------------------------------------------------------------
SAMPLES.append({
    "dir": "invoicer-rounding",
    "repo": "acme/invoicer",
    "instance_id": "acme__invoicer-7",
    "created_at": "2024-04-02T08:05:00Z",
    "version": "2.0",
    "problem_statement": """Invoice amounts are a cent short when the exact value ends in half a cent

Our accountant noticed totals one cent lower than her spreadsheet. `to_cents` rounds with
binary floats, so values that end in exactly half a cent sometimes round down:

```python
>>> from invoicer.money import to_cents
>>> to_cents(2.675)
267
>>> to_cents(0.125)
12
```

Commercial rounding (half up) gives 268 and 13. Line totals go through the same function, so
`Invoice.total_cents()` is affected too.
""",
    "hints_text": "Go through decimal.Decimal(str(amount)) and quantize with ROUND_HALF_UP.",
    "base": {
        "pyproject.toml": PYPROJECT.format(name="invoicer"),
        "README.md": "# invoicer\n\nInvoices with line items, discounts and tax, in integer cents.\n",
        "invoicer/__init__.py": '"""Invoices in integer cents."""\n',
        "invoicer/money.py": '''
"""Conversions between amounts and integer cents."""


def to_cents(amount):
    """`amount` in currency units (float or str) as integer cents, rounded half up."""
    return int(round(float(amount) * 100))


def format_cents(cents):
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"
''',
        "invoicer/invoice.py": '''
"""Invoices made of line items."""

from dataclasses import dataclass, field

from .money import format_cents, to_cents


@dataclass
class Line:
    description: str
    unit_price: float
    quantity: int = 1

    def cents(self):
        return to_cents(self.unit_price * self.quantity)


@dataclass
class Invoice:
    lines: list = field(default_factory=list)
    discount_percent: float = 0.0

    def add(self, description, unit_price, quantity=1):
        self.lines.append(Line(description, unit_price, quantity))
        return self

    def subtotal_cents(self):
        return sum(line.cents() for line in self.lines)

    def total_cents(self):
        subtotal = self.subtotal_cents()
        discount = to_cents(subtotal * self.discount_percent / 100 / 100)
        return subtotal - discount

    def render(self):
        rows = [f"{line.description}: {format_cents(line.cents())}" for line in self.lines]
        rows.append(f"TOTAL: {format_cents(self.total_cents())}")
        return "\\n".join(rows)
''',
        "tests/test_money.py": '''
from invoicer.money import format_cents, to_cents


def test_whole_amounts():
    assert to_cents(12) == 1200
    assert to_cents("3.10") == 310


def test_format_cents():
    assert format_cents(1234) == "12.34"
    assert format_cents(-5) == "-0.05"
''',
        "tests/test_invoice.py": '''
from invoicer.invoice import Invoice


def test_subtotal():
    invoice = Invoice().add("pen", 1.5, 4).add("pad", 2.25)
    assert invoice.subtotal_cents() == 825


def test_discount():
    invoice = Invoice(discount_percent=10).add("chair", 40)
    assert invoice.total_cents() == 3600


def test_render():
    invoice = Invoice().add("pen", 1.5, 2)
    assert invoice.render() == "pen: 3.00\\nTOTAL: 3.00"
''',
    },
    "fix": {
        "invoicer/money.py": '''
"""Conversions between amounts and integer cents."""

from decimal import ROUND_HALF_UP, Decimal


def to_cents(amount):
    """`amount` in currency units (float or str) as integer cents, rounded half up."""
    # str() first: Decimal(2.675) is 2.67499999..., the float's binary value.
    exact = Decimal(str(amount)) * 100
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def format_cents(cents):
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"
''',
    },
    "tests": {
        "tests/test_money.py": '''
from invoicer.money import format_cents, to_cents


def test_whole_amounts():
    assert to_cents(12) == 1200
    assert to_cents("3.10") == 310


def test_format_cents():
    assert format_cents(1234) == "12.34"
    assert format_cents(-5) == "-0.05"


def test_half_cent_rounds_up():
    assert to_cents(2.675) == 268
    assert to_cents(0.125) == 13
''',
        "tests/test_invoice.py": '''
from invoicer.invoice import Invoice


def test_subtotal():
    invoice = Invoice().add("pen", 1.5, 4).add("pad", 2.25)
    assert invoice.subtotal_cents() == 825


def test_discount():
    invoice = Invoice(discount_percent=10).add("chair", 40)
    assert invoice.total_cents() == 3600


def test_render():
    invoice = Invoice().add("pen", 1.5, 2)
    assert invoice.render() == "pen: 3.00\\nTOTAL: 3.00"


def test_line_with_half_cent_total():
    invoice = Invoice().add("washer", 0.145, 5)
    assert invoice.total_cents() == 73
''',
    },
    "FAIL_TO_PASS": [
        "tests/test_money.py::test_half_cent_rounds_up",
        "tests/test_invoice.py::test_line_with_half_cent_total",
    ],
    "PASS_TO_PASS": [
        "tests/test_money.py::test_whole_amounts",
        "tests/test_money.py::test_format_cents",
        "tests/test_invoice.py::test_subtotal",
        "tests/test_invoice.py::test_discount",
        "tests/test_invoice.py::test_render",
    ],
})


# ---------------------------------------------------------------------------------------------
# src/ layout with a runtime dependency: the tests import the installed package, so the grader
# has to install the project (and `packaging`) before they can even be collected.
LEDGER_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "ledger"
version = "0.4.0"
description = "A project's release history: versions, dates and changes, read from CHANGELOG.md"
readme = "README.md"
requires-python = ">=3.8"
dependencies = ["packaging>=23"]

[project.optional-dependencies]
test = ["pytest"]

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

LEDGER_RELEASES = '''
"""Releases of a project, looked up by version."""

from dataclasses import dataclass
from datetime import date
from typing import Tuple

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Release:
    version: Version
    date: date
    changes: Tuple[str, ...] = ()


def parse_version(text):
    """`text` as a PEP 440 version; ValueError when it is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"not a version: {text!r}") from None


class Ledger:
    """Each release recorded once; iteration yields the newest first."""

    def __init__(self):
        self._releases = {}

    def __len__(self):
        return len(self._releases)

    def __iter__(self):
        return iter(sorted(self._releases.values(), key=lambda r: r.version, reverse=True))

    def add(self, version, released, changes=()):
        parsed = parse_version(version)
{add_body}
        return release

    def get(self, version):
        """The release of `version`; KeyError when there is none."""
{get_body}

    def latest(self, prereleases=False):
        """The highest release (skipping pre-releases unless asked), or None."""
        candidates = [r for r in self._releases.values() if prereleases or not r.version.is_prerelease]
        return max(candidates, key=lambda r: r.version, default=None)

    def since(self, version):
        """Releases newer than `version`, oldest first."""
        floor = parse_version(version)
        return sorted((r for r in self._releases.values() if r.version > floor), key=lambda r: r.version)
'''

LEDGER_TEST_RELEASES = '''
from datetime import date

import pytest
from packaging.version import Version

from ledger import Ledger


def make(*versions):
    ledger = Ledger()
    for n, version in enumerate(versions):
        ledger.add(version, date(2024, 1, 1 + n))
    return ledger


def test_latest_skips_prereleases():
    ledger = make("1.0.0", "1.1.0rc1", "0.9.0")
    assert ledger.latest().version == Version("1.0.0")


def test_latest_with_prereleases():
    ledger = make("1.0.0", "1.1.0rc1")
    assert ledger.latest(prereleases=True).version == Version("1.1.0rc1")


def test_since_orders_by_version_not_text():
    ledger = make("1.9.0", "1.10.0", "1.2.0")
    assert [str(r.version) for r in ledger.since("1.2.0")] == ["1.9.0", "1.10.0"]


def test_invalid_version_is_rejected():
    with pytest.raises(ValueError, match="not a version"):
        make("next")


def test_same_release_twice_is_rejected():
    ledger = make("2.0.0")
    with pytest.raises(ValueError, match="already recorded"):
        ledger.add("2.0.0", date(2024, 2, 1))


def test_get_unknown_release():
    with pytest.raises(KeyError):
        make("1.0.0").get("3.0.0")
'''

LEDGER_TEST_RELEASES_NEW = '''

def test_get_accepts_equivalent_spellings():
    ledger = make("v2.0.0", "2.1")
    assert ledger.get("2.0").date == date(2024, 1, 1)
    assert ledger.get("v2.1.0").date == date(2024, 1, 2)


def test_equivalent_spellings_are_one_release():
    ledger = make("1.2.0")
    with pytest.raises(ValueError, match="already recorded"):
        ledger.add("v1.2", date(2024, 3, 1))
    assert len(ledger) == 1
'''

SAMPLES.append({
    "dir": "ledger-src-layout",
    "repo": "acme/ledger",
    "instance_id": "acme__ledger-58",
    "created_at": "2024-05-13T10:21:00Z",
    "version": "0.4",
    "problem_statement": """Ledger.get() can't find a release written as "v2.0.0" or "2.0"

Our CHANGELOG.md headings use a `v` prefix (`## v2.0.0 - 2024-04-30`) while the release
script asks for the version as people type it, so lookups fail even though the release is
there:

```python
>>> from ledger import parse
>>> ledger = parse(open("CHANGELOG.md").read())
>>> ledger.get("2.0.0")
Traceback (most recent call last):
  ...
KeyError: 'no release 2.0.0'
```

`ledger.get("v2.0.0")` works. The same thing lets a changelog record one release twice
(`## 1.2 - ...` and `## 1.2.0 - ...` are both accepted), and then `len(ledger)` and the
rendered changelog are wrong.

Versions are already parsed with `packaging` (sorting and `latest()` are right), so
`1.2`, `1.2.0` and `v1.2.0` should all be the same release.

ledger 0.4.0, packaging 24.0, Python 3.11.
""",
    "hints_text": "The dict of releases is keyed by the version string as given rather than by the parsed Version.",
    "base": {
        "pyproject.toml": LEDGER_PYPROJECT,
        "README.md": """
# ledger

A project's release history (versions, dates, changes) read from and written back to
`CHANGELOG.md`. Versions follow PEP 440 and are compared with `packaging`.

```python
from ledger import parse
ledger = parse(open("CHANGELOG.md").read())
print(ledger.latest().version)
```

Development: `pip install -e '.[test]' && pytest`.
""",
        "src/ledger/__init__.py": '''
"""A project's release history."""

from .changelog import parse, render
from .releases import Ledger, Release, parse_version

__all__ = ["Ledger", "Release", "parse", "parse_version", "render"]
''',
        "src/ledger/releases.py": LEDGER_RELEASES.replace("{add_body}", """\
        if version in self._releases:
            raise ValueError(f"release {version} is already recorded")
        release = Release(parsed, released, tuple(changes))
        self._releases[version] = release""").replace("{get_body}", """\
        try:
            return self._releases[version]
        except KeyError:
            raise KeyError(f"no release {version}") from None"""),
        "src/ledger/changelog.py": '''
"""Reading and writing the release sections of CHANGELOG.md."""

import re
from datetime import date

from .releases import Ledger

HEADING = re.compile(r"^## \\[?(?P<version>[^\\]\\s]+)\\]? - (?P<date>\\d{4}-\\d{2}-\\d{2})\\s*$")


def parse(text):
    """The releases of a changelog: `## VERSION - YYYY-MM-DD` headings and `- change` items."""
    ledger = Ledger()
    current = None
    for line in text.splitlines():
        match = HEADING.match(line)
        if match:
            if current:
                ledger.add(*current)
            current = (match["version"], date.fromisoformat(match["date"]), [])
        elif current and line.startswith("- "):
            current[2].append(line[2:].strip())
    if current:
        ledger.add(*current)
    return ledger


def render(ledger):
    lines = ["# Changelog", ""]
    for release in ledger:
        lines += [f"## {release.version} - {release.date.isoformat()}", ""]
        lines += [f"- {change}" for change in release.changes]
        lines.append("")
    return "\\n".join(lines)
''',
        "tests/test_releases.py": LEDGER_TEST_RELEASES,
        "tests/test_changelog.py": '''
from datetime import date

from ledger import parse, render

CHANGELOG = """# Changelog

## [1.1.0] - 2024-02-10

- Add `since()`
- Faster parsing

## 1.0.0 - 2024-01-05

- First release
"""


def test_parse_headings_and_changes():
    ledger = parse(CHANGELOG)
    assert len(ledger) == 2
    newest = ledger.latest()
    assert (str(newest.version), newest.date) == ("1.1.0", date(2024, 2, 10))
    assert newest.changes == ("Add `since()`", "Faster parsing")


def test_render_round_trip():
    text = render(parse(CHANGELOG))
    assert text.startswith("# Changelog\\n\\n## 1.1.0 - 2024-02-10\\n")
    assert render(parse(text)) == text
''',
    },
    "fix": {
        "src/ledger/releases.py": LEDGER_RELEASES.replace("{add_body}", """\
        # Keyed by the parsed version: "1.2", "1.2.0" and "v1.2.0" are the same release.
        if parsed in self._releases:
            raise ValueError(f"release {version} is already recorded")
        release = Release(parsed, released, tuple(changes))
        self._releases[parsed] = release""").replace("{get_body}", """\
        try:
            return self._releases[parse_version(version)]
        except KeyError:
            raise KeyError(f"no release {version}") from None"""),
    },
    "tests": {
        "tests/test_releases.py": LEDGER_TEST_RELEASES + LEDGER_TEST_RELEASES_NEW,
    },
    "FAIL_TO_PASS": [
        "tests/test_releases.py::test_get_accepts_equivalent_spellings",
        "tests/test_releases.py::test_equivalent_spellings_are_one_release",
    ],
    "PASS_TO_PASS": [
        "tests/test_releases.py::test_latest_skips_prereleases",
        "tests/test_releases.py::test_latest_with_prereleases",
        "tests/test_releases.py::test_since_orders_by_version_not_text",
        "tests/test_releases.py::test_invalid_version_is_rejected",
        "tests/test_releases.py::test_same_release_twice_is_rejected",
        "tests/test_releases.py::test_get_unknown_release",
        "tests/test_changelog.py::test_parse_headings_and_changes",
        "tests/test_changelog.py::test_render_round_trip",
    ],
})

# ---------------------------------------------------------------------------------------------
# A Rust crate with one registry dependency and its Cargo.lock; unit tests in src/lib.rs,
# integration tests in tests/ranges.rs, one #[ignore] test and one doctest (in neither list).
# Test ids are `<source file of the test binary>::<libtest name>`. The bug and the fix are in
# src/set.rs, so the patch touches no file that a test id names.
RANGESET_CARGO = '''
[package]
name = "rangeset"
version = "0.2.0"
edition = "2021"
rust-version = "1.70"
description = "Sets of u32 values kept as sorted inclusive ranges, parsed from and printed as \\"1-3,7,9-12\\""
license = "MIT"

[dependencies]
itoa = "1"
'''

def default_registry_source():
    """The default registry's source id as cargo writes it in lock files, read from our own
    Cargo.lock, so it is written in one place only."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "Cargo.lock")) as f:
        for line in f:
            if line.startswith('source = "registry+'):
                return line.split('"')[1]
    raise SystemExit("no registry source line in Cargo.lock")


# Written by `cargo generate-lockfile` (rust-version < 1.78 keeps it at lockfile version 3,
# which older cargo reads too); kept here so the script needs no cargo and the ids stay fixed.
RANGESET_LOCK = '''
# This file is automatically @generated by Cargo.
# It is not intended for manual editing.
version = 3

[[package]]
name = "itoa"
version = "1.0.19"
source = "{registry}"
checksum = "3bd1574e617a9a6c1f8f8181bd7e841e1f20e4277607ef28945765188d6284d4"

[[package]]
name = "rangeset"
version = "0.2.0"
dependencies = [
 "itoa",
]
'''

RANGESET_LIB = '''
//! Sets of `u32` values kept as sorted, disjoint inclusive ranges.
//!
//! Sets are written the way people type page or port lists: `"1-3,7,9-12"`.
//!
//! ```
//! use rangeset::RangeSet;
//!
//! let set: RangeSet = "9-12, 1-3,7,4".parse().unwrap();
//! assert_eq!(set.to_string(), "1-4,7,9-12");
//! assert!(set.contains(10));
//! assert_eq!(set.len(), 9);
//! ```

mod parse;
mod set;

pub use parse::ParseError;
pub use set::RangeSet;

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::RangeInclusive;

    fn ranges(set: &RangeSet) -> Vec<RangeInclusive<u32>> {
        set.ranges().collect()
    }

    #[test]
    fn merges_adjacent() {
        let mut set = RangeSet::new();
        set.insert(4..=6);
        set.insert(1..=3);
        assert_eq!(ranges(&set), vec![1..=6]);
    }

    #[test]
    fn merges_overlapping() {
        let mut set = RangeSet::new();
        set.insert(1..=5);
        set.insert(3..=9);
        set.insert(20..=30);
        set.insert(8..=21);
        assert_eq!(ranges(&set), vec![1..=30]);
    }

    #[test]
    fn keeps_gaps() {
        let mut set = RangeSet::new();
        set.insert(10..=12);
        set.insert(1..=2);
        set.insert(5..=5);
        assert_eq!(ranges(&set), vec![1..=2, 5..=5, 10..=12]);
    }

    #[test]
    fn contains_checks_both_ends() {
        let mut set = RangeSet::new();
        set.insert(3..=5);
        set.insert(9..=9);
        let inside: Vec<u32> = (0..12).filter(|&v| set.contains(v)).collect();
        assert_eq!(inside, vec![3, 4, 5, 9]);
    }

    #[test]
    fn empty_range_changes_nothing() {
        let mut set = RangeSet::new();
        #[allow(clippy::reversed_empty_ranges)]
        set.insert(5..=4);
        assert!(set.is_empty());
    }
{new_tests}}
'''

RANGESET_LIB_NEW_TESTS = '''
    #[test]
    fn merges_at_the_top_of_the_range() {
        let mut set = RangeSet::new();
        set.insert(u32::MAX - 1..=u32::MAX);
        set.insert(10..=20);
        set.insert(u32::MAX - 5..=u32::MAX - 2);
        assert_eq!(ranges(&set), vec![10..=20, u32::MAX - 5..=u32::MAX]);
    }
'''

RANGESET_SET = '''
//! The set type: sorted, disjoint, non-adjacent inclusive ranges.

use std::fmt;
use std::ops::RangeInclusive;

/// A set of `u32` values. Overlapping and adjacent ranges are merged on insertion, so
/// `ranges()` yields each run of consecutive values once, in ascending order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<(u32, u32)>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of values in the set.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|&(start, end)| u64::from(end - start) + 1).sum()
    }

    pub fn ranges(&self) -> impl Iterator<Item = RangeInclusive<u32>> + '_ {
        self.ranges.iter().map(|&(start, end)| start..=end)
    }

    pub fn contains(&self, value: u32) -> bool {
        let after = self.ranges.partition_point(|&(start, _)| start <= value);
        after > 0 && self.ranges[after - 1].1 >= value
    }

    /// Adds every value of `range`; an empty range changes nothing.
    pub fn insert(&mut self, range: RangeInclusive<u32>) {
        let (mut start, mut end) = (*range.start(), *range.end());
        if start > end {
            return;
        }
        let mut merged = Vec::with_capacity(self.ranges.len() + 1);
        let mut placed = false;
        for &(s, e) in &self.ranges {
{gap_before}
                // Entirely before the new range, with a gap.
                merged.push((s, e));
{gap_after}
                // Entirely after it, with a gap.
                if !placed {
                    merged.push((start, end));
                    placed = true;
                }
                merged.push((s, e));
            } else {
                // Overlapping or adjacent: absorbed into the new range.
                start = start.min(s);
                end = end.max(e);
            }
        }
        if !placed {
            merged.push((start, end));
        }
        self.ranges = merged;
    }

    /// Adds every value of `other`.
    pub fn union(&mut self, other: &RangeSet) {
        for range in other.ranges() {
            self.insert(range);
        }
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buffer = itoa::Buffer::new();
        for (i, &(start, end)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(buffer.format(start))?;
            if end != start {
                f.write_str("-")?;
                f.write_str(buffer.format(end))?;
            }
        }
        Ok(())
    }
}
'''

RANGESET_PARSE = '''
//! Reading sets from `"1-3,7,9-12"`.

use std::fmt;
use std::str::FromStr;

use crate::RangeSet;

/// Why a string is not a range set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    item: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid range {:?}: expected N or N-M with N <= M", self.item)
    }
}

impl std::error::Error for ParseError {}

impl FromStr for RangeSet {
    type Err = ParseError;

    /// Comma-separated values (`7`) and ranges (`1-3`); spaces around items are ignored
    /// and the empty string is the empty set.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut set = RangeSet::new();
        if text.trim().is_empty() {
            return Ok(set);
        }
        for item in text.split(',') {
            let item = item.trim();
            let error = || ParseError { item: item.to_string() };
            let (start, end) = match item.split_once('-') {
                Some((start, end)) => (start.trim(), end.trim()),
                None => (item, item),
            };
            let start: u32 = start.parse().map_err(|_| error())?;
            let end: u32 = end.parse().map_err(|_| error())?;
            if start > end {
                return Err(error());
            }
            set.insert(start..=end);
        }
        Ok(set)
    }
}
'''

RANGESET_TESTS = '''
use rangeset::RangeSet;

fn parse(text: &str) -> RangeSet {
    text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[test]
fn parses_empty() {
    let set = parse("");
    assert!(set.is_empty());
    assert_eq!(set.to_string(), "");
}

#[test]
fn parses_and_prints_sorted() {
    assert_eq!(parse("7, 1-3,5").to_string(), "1-3,5,7");
    assert_eq!(parse("2-4,1,5").to_string(), "1-5");
}

#[test]
fn rejects_reversed_and_garbage() {
    for text in ["5-1", "a", "1-", "1,,2", "-3"] {
        let err = text.parse::<RangeSet>().unwrap_err();
        assert!(err.to_string().starts_with("invalid range"), "{text:?}: {err}");
    }
}

#[test]
fn len_counts_values() {
    assert_eq!(parse("1-3,10,20-29").len(), 14);
    assert_eq!(parse("0-4294967295").len(), 1 << 32);
}

#[test]
fn union_merges_both_sets() {
    let mut a = parse("1-3,10-12");
    a.union(&parse("4-5,11-20"));
    assert_eq!(a.to_string(), "1-5,10-20");
}

{new_tests}#[test]
#[ignore = "slow: two million single-value inserts"]
fn single_values_merge_into_one_range() {
    let mut set = RangeSet::new();
    for value in (0..2_000_000u32).rev() {
        set.insert(value..=value);
    }
    assert_eq!(set.to_string(), "0-1999999");
}
'''

RANGESET_TESTS_NEW = '''#[test]
fn parses_ranges_ending_at_max() {
    let set = parse("4294967290-4294967295,7");
    assert_eq!(set.to_string(), "7,4294967290-4294967295");
    assert!(set.contains(u32::MAX) && set.contains(7) && !set.contains(8));
}

'''


def rangeset_set(overflow_safe):
    if overflow_safe:
        before = (
            "            // saturating_add: nothing comes after a range that ends at u32::MAX.\n"
            "            if e.saturating_add(1) < start {"
        )
        after = "            } else if end.saturating_add(1) < s {"
    else:
        before = "            if e + 1 < start {"
        after = "            } else if end + 1 < s {"
    return RANGESET_SET.replace("{gap_before}", before).replace("{gap_after}", after)


SAMPLES.append({
    "dir": "rangeset-rust",
    "repo": "acme/rangeset",
    "instance_id": "acme__rangeset-23",
    "created_at": "2024-06-03T14:02:00Z",
    "version": "0.2",
    "problem_statement": """Panic "attempt to add with overflow" when a range ends at u32::MAX

We keep sets of 32-bit ids in a `RangeSet` and parse them from config. Any set where one
range ends at `u32::MAX` panics as soon as a second range is added:

```rust
let set: RangeSet = "4294967290-4294967295,7".parse().unwrap();
```

```
thread 'main' panicked at src/set.rs:45:16:
attempt to add with overflow
```

Same with `insert`: `set.insert(u32::MAX - 1..=u32::MAX); set.insert(10..=20);`.

In release builds there is no panic, but the result is wrong: the ranges come out unsorted
(`"4294967290-4294967295,7"` is printed back unchanged instead of `"7,4294967290-4294967295"`)
and `contains()` then misses values that are in the set.

rangeset 0.2.0, rustc 1.75.
""",
    "hints_text": "The adjacency checks in `insert` compute `end + 1`, which overflows for u32::MAX.",
    "base": {
        "Cargo.toml": RANGESET_CARGO,
        "Cargo.lock": RANGESET_LOCK.replace("{registry}", default_registry_source()),
        ".gitignore": "/target\n",
        "README.md": """
# rangeset

Sets of `u32` values kept as sorted, merged inclusive ranges, parsed from and printed as
`"1-3,7,9-12"` (page lists, port lists, id ranges).

```rust
let mut set: rangeset::RangeSet = "1-3,7".parse()?;
set.insert(4..=5);
assert_eq!(set.to_string(), "1-5,7");
```
""",
        "src/lib.rs": RANGESET_LIB.replace("{new_tests}", ""),
        "src/set.rs": rangeset_set(overflow_safe=False),
        "src/parse.rs": RANGESET_PARSE,
        "tests/ranges.rs": RANGESET_TESTS.replace("{new_tests}", ""),
    },
    "fix": {
        "src/set.rs": rangeset_set(overflow_safe=True),
    },
    "tests": {
        "src/lib.rs": RANGESET_LIB.replace("{new_tests}", RANGESET_LIB_NEW_TESTS),
        "tests/ranges.rs": RANGESET_TESTS.replace("{new_tests}", RANGESET_TESTS_NEW),
    },
    # Not listed: the #[ignore] test tests/ranges.rs::single_values_merge_into_one_range and
    # the doctest in src/lib.rs.
    "FAIL_TO_PASS": [
        "src/lib.rs::tests::merges_at_the_top_of_the_range",
        "tests/ranges.rs::parses_ranges_ending_at_max",
    ],
    "PASS_TO_PASS": [
        "src/lib.rs::tests::merges_adjacent",
        "src/lib.rs::tests::merges_overlapping",
        "src/lib.rs::tests::keeps_gaps",
        "src/lib.rs::tests::contains_checks_both_ends",
        "src/lib.rs::tests::empty_range_changes_nothing",
        "tests/ranges.rs::parses_empty",
        "tests/ranges.rs::parses_and_prints_sorted",
        "tests/ranges.rs::rejects_reversed_and_garbage",
        "tests/ranges.rs::len_counts_values",
        "tests/ranges.rs::union_merges_both_sets",
    ],
})

# ---------------------------------------------------------------------------------------------
# A Go module (go 1.19, standard library only) with a table-driven test using subtests. Test
# ids are `<package import path>::<TestName>` and `...::<TestName>/<subtest>` (spaces in subtest
# names become underscores, as Go prints them). The sources are written here with four-space
# indentation; go_source() turns it into gofmt's tabs.
def go_source(text):
    return re.sub(r"^(?:    )+", lambda m: "\t" * (len(m.group(0)) // 4), text, flags=re.M)


DURFMT_GO = go_source('''
// Package durfmt formats durations the way people write them in logs and dashboards:
// "1d2h3s", "45m", "-1m30s", and parses them back.
package durfmt

import (
    "errors"
    "strconv"
    "strings"
    "time"
)

// Day is 24 hours; durfmt ignores daylight saving and leap seconds.
const Day = 24 * time.Hour

var units = []struct {
    size   time.Duration
    suffix string
}{
    {Day, "d"},
    {time.Hour, "h"},
    {time.Minute, "m"},
    {time.Second, "s"},
}

// Format returns d rounded to the nearest second, in days, hours, minutes and seconds,
// largest first, leaving out zero units: 26h0m3s is "1d2h3s". Anything under half a second
// is "0s".
func Format(d time.Duration) string {
    if d < 0 {
        return "-" + Format(-d)
    }
{format_loop}
            b.WriteString(strconv.FormatInt(int64(n), 10))
            b.WriteString(u.suffix)
        }
    }
    if b.Len() == 0 {
        return "0s"
    }
    return b.String()
}

// Parse reads what Format writes, and anything time.ParseDuration accepts, with "d" for days
// allowed as the first unit: "2d", "1d12h", "90m", "1.5h".
func Parse(s string) (time.Duration, error) {
    rest, neg := s, strings.HasPrefix(s, "-")
    if neg {
        rest = s[1:]
    }
    var days time.Duration
    if i := strings.IndexByte(rest, 'd'); i >= 0 {
        n, err := strconv.ParseUint(rest[:i], 10, 16)
        if err != nil {
            return 0, errors.New("durfmt: invalid day count in " + strconv.Quote(s))
        }
        days = time.Duration(n) * Day
        rest = rest[i+1:]
    }
    var d time.Duration
    if rest != "" {
        var err error
        if d, err = time.ParseDuration(rest); err != nil {
            return 0, errors.New("durfmt: invalid duration " + strconv.Quote(s))
        }
        if d < 0 {
            return 0, errors.New("durfmt: sign inside " + strconv.Quote(s))
        }
    } else if days == 0 {
        return 0, errors.New("durfmt: invalid duration " + strconv.Quote(s))
    }
    if neg {
        return -(days + d), nil
    }
    return days + d, nil
}
''')

DURFMT_LOOP_BUGGY = go_source('''    var b strings.Builder
    for i, u := range units {
        n := d / u.size
        d -= n * u.size
        if i == len(units)-1 && d >= u.size/2 {
            n++ // round the remaining fraction of a second
        }
        if n > 0 {''')

DURFMT_LOOP_FIXED = go_source('''    // Round before splitting, so that a carry reaches the larger units: rounding only what is
    // left for the seconds turned 59.6s into "60s" instead of "1m".
    d = d.Round(time.Second)
    var b strings.Builder
    for _, u := range units {
        n := d / u.size
        d -= n * u.size
        if n > 0 {''')

DURFMT_TEST = go_source('''
package durfmt

import (
    "testing"
    "time"
)

func TestFormat(t *testing.T) {
    tests := []struct {
        name string
        in   time.Duration
        want string
    }{
        {"zero", 0, "0s"},
        {"seconds only", 45 * time.Second, "45s"},
        {"skips zero units", 26*time.Hour + 3*time.Second, "1d2h3s"},
        {"negative", -90 * time.Second, "-1m30s"},
        {"rounds half a second up", 1500 * time.Millisecond, "2s"},
        {"drops less than half a second", 1400 * time.Millisecond, "1s"},
        {"under half a second is zero", 400 * time.Millisecond, "0s"},
{new_rows}	}
    for _, tt := range tests {
        t.Run(tt.name, func(t *testing.T) {
            if got := Format(tt.in); got != tt.want {
                t.Errorf("Format(%v) = %q, want %q", tt.in, got, tt.want)
            }
        })
    }
}

func TestParse(t *testing.T) {
    tests := []struct {
        in   string
        want time.Duration
    }{
        {"2d", 2 * Day},
        {"1d12h", 36 * time.Hour},
        {"90m", 90 * time.Minute},
        {"-1m30s", -90 * time.Second},
        {"1.5h", 90 * time.Minute},
    }
    for _, tt := range tests {
        t.Run(tt.in, func(t *testing.T) {
            got, err := Parse(tt.in)
            if err != nil || got != tt.want {
                t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
            }
        })
    }
}

func TestParseRejects(t *testing.T) {
    for _, in := range []string{"", "d", "xd", "1d-2h", "soon"} {
        if d, err := Parse(in); err == nil {
            t.Errorf("Parse(%q) = %v, want an error", in, d)
        }
    }
}

func TestRoundTrip(t *testing.T) {
    for _, d := range []time.Duration{0, time.Second, 59 * time.Minute, 3*Day + 4*time.Minute, -Day} {
        got, err := Parse(Format(d))
        if err != nil || got != d {
            t.Errorf("Parse(Format(%v)) = %v, %v", d, got, err)
        }
    }
}
''')

DURFMT_TEST_NEW_ROWS = go_source('''        {"rounds up into the next minute", 59*time.Second + 600*time.Millisecond, "1m"},
        {"carries into hours and days", 23*time.Hour + 59*time.Minute + 59500*time.Millisecond, "1d"},
''')

DURFMT_IMPORT = "github.com/acme/durfmt"

SAMPLES.append({
    "dir": "durfmt-go",
    "repo": "acme/durfmt",
    "instance_id": "acme__durfmt-31",
    "created_at": "2024-06-20T07:48:00Z",
    "version": "1.3",
    "problem_statement": """Format prints "60s" instead of carrying into the minute

Durations just under a full minute are printed with 60 seconds:

```go
fmt.Println(durfmt.Format(59600 * time.Millisecond))                          // 60s
fmt.Println(durfmt.Format(23*time.Hour + 59*time.Minute + 59500*time.Millisecond)) // 23h59m60s
```

Expected `1m` and `1d`. We show job run times on a dashboard and "2h59m60s" keeps getting
reported as a bug by users. Values that round down (`59.4s` → `59s`) are fine, and so is
rounding that does not carry (`1.5s` → `2s`).

durfmt v1.3.0, go 1.19.
""",
    "hints_text": "Format rounds only the seconds that are left after taking out the larger units.",
    "base": {
        "go.mod": f"module {DURFMT_IMPORT}\n\ngo 1.19\n",
        "README.md": """
# durfmt

Formats `time.Duration` values the way people write them (`1d2h3s`, `45m`, `-1m30s`) and
parses them back; days are allowed as the first unit.

```go
durfmt.Format(26*time.Hour + 3*time.Second) // "1d2h3s"
d, err := durfmt.Parse("1d12h")            // 36h0m0s
```
""",
        "durfmt.go": DURFMT_GO.replace("{format_loop}", DURFMT_LOOP_BUGGY),
        "durfmt_test.go": DURFMT_TEST.replace("{new_rows}", ""),
    },
    "fix": {
        "durfmt.go": DURFMT_GO.replace("{format_loop}", DURFMT_LOOP_FIXED),
    },
    "tests": {
        "durfmt_test.go": DURFMT_TEST.replace("{new_rows}", DURFMT_TEST_NEW_ROWS),
    },
    # The parent TestFormat fails with its failing subtests, so it is listed with them.
    "FAIL_TO_PASS": [
        f"{DURFMT_IMPORT}::TestFormat",
        f"{DURFMT_IMPORT}::TestFormat/rounds_up_into_the_next_minute",
        f"{DURFMT_IMPORT}::TestFormat/carries_into_hours_and_days",
    ],
    "PASS_TO_PASS": [
        f"{DURFMT_IMPORT}::TestFormat/zero",
        f"{DURFMT_IMPORT}::TestFormat/seconds_only",
        f"{DURFMT_IMPORT}::TestFormat/skips_zero_units",
        f"{DURFMT_IMPORT}::TestFormat/negative",
        f"{DURFMT_IMPORT}::TestFormat/rounds_half_a_second_up",
        f"{DURFMT_IMPORT}::TestFormat/drops_less_than_half_a_second",
        f"{DURFMT_IMPORT}::TestFormat/under_half_a_second_is_zero",
        f"{DURFMT_IMPORT}::TestParse",
        f"{DURFMT_IMPORT}::TestParse/2d",
        f"{DURFMT_IMPORT}::TestParse/1d12h",
        f"{DURFMT_IMPORT}::TestParse/90m",
        f"{DURFMT_IMPORT}::TestParse/-1m30s",
        f"{DURFMT_IMPORT}::TestParse/1.5h",
        f"{DURFMT_IMPORT}::TestParseRejects",
        f"{DURFMT_IMPORT}::TestRoundTrip",
    ],
})

# ---------------------------------------------------------------------------------------------
# A Node project with no dependencies, tested with `node --test` (node:test and node:assert
# only; runs on Node 18 and 20). Test ids: `test/parse.test.js::<describe> > <test>` for tests
# in a describe block, `test/parse.test.js::<test>` for top-level ones; the describe suite itself
# is not listed.
CSVLINE_PACKAGE = r'''
{
  "name": "csvline",
  "version": "1.1.0",
  "description": "Parse and format single CSV lines (RFC 4180 quoting)",
  "type": "commonjs",
  "main": "src/index.js",
  "files": ["src"],
  "scripts": {
    "test": "node --test"
  },
  "engines": {
    "node": ">=18"
  },
  "license": "MIT"
}
'''

CSVLINE_PARSE = r'''
'use strict';

/**
 * Splits one CSV line into its fields. Fields may be quoted with double quotes, so that they
 * can hold the delimiter; inside quotes a doubled quote ("") stands for one quote character.
 *
 * @param {string} line one line, without its line break
 * @param {{delimiter?: string}} [options]
 * @returns {string[]}
 */
function parseLine(line, { delimiter = ',' } = {}) {
  if (delimiter.length !== 1 || delimiter === '"') {
    throw new TypeError(`delimiter must be one character other than '"', got ${JSON.stringify(delimiter)}`);
  }
  const fields = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (quoted) {
      if (ch === '"') {
        quoted = false;
      } else {
        field += ch;
      }
    } else if (ch === '"') {
      quoted = true;
    } else if (ch === delimiter) {
      fields.push(field);
      field = '';
    } else {
      field += ch;
    }
  }
  if (quoted) {
    throw new SyntaxError(`unterminated quoted field in: ${line}`);
  }
  fields.push(field);
  return fields;
}

module.exports = { parseLine };
'''

CSVLINE_PARSE_FIXED = r'''
'use strict';

/**
 * Splits one CSV line into its fields. Fields may be quoted with double quotes, so that they
 * can hold the delimiter; inside quotes a doubled quote ("") stands for one quote character.
 *
 * @param {string} line one line, without its line break
 * @param {{delimiter?: string}} [options]
 * @returns {string[]}
 */
function parseLine(line, { delimiter = ',' } = {}) {
  if (delimiter.length !== 1 || delimiter === '"') {
    throw new TypeError(`delimiter must be one character other than '"', got ${JSON.stringify(delimiter)}`);
  }
  const fields = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (quoted) {
      if (ch === '"' && line[i + 1] === '"') {
        // A doubled quote inside quotes is one literal quote.
        field += '"';
        i++;
      } else if (ch === '"') {
        quoted = false;
      } else {
        field += ch;
      }
    } else if (ch === '"') {
      quoted = true;
    } else if (ch === delimiter) {
      fields.push(field);
      field = '';
    } else {
      field += ch;
    }
  }
  if (quoted) {
    throw new SyntaxError(`unterminated quoted field in: ${line}`);
  }
  fields.push(field);
  return fields;
}

module.exports = { parseLine };
'''

CSVLINE_PARSE_TEST = r'''
'use strict';

const { describe, it, test } = require('node:test');
const assert = require('node:assert');

const { parseLine } = require('../src');

describe('parseLine', () => {
  it('splits on commas', () => {
    assert.deepStrictEqual(parseLine('a,b,c'), ['a', 'b', 'c']);
  });

  it('keeps empty fields', () => {
    assert.deepStrictEqual(parseLine(',x,'), ['', 'x', '']);
  });

  it('keeps delimiters inside quotes', () => {
    assert.deepStrictEqual(parseLine('1,"Smith, John",3'), ['1', 'Smith, John', '3']);
  });

  it('rejects an unterminated quote', () => {
    assert.throws(() => parseLine('a,"b'), SyntaxError);
  });

  it('takes another delimiter', () => {
    assert.deepStrictEqual(parseLine('a;"b;c"', { delimiter: ';' }), ['a', 'b;c']);
  });
});

test('an empty line is one empty field', () => {
  assert.deepStrictEqual(parseLine(''), ['']);
});
'''

CSVLINE_PARSE_TEST_NEW = r'''
'use strict';

const { describe, it, test } = require('node:test');
const assert = require('node:assert');

const { formatLine, parseLine } = require('../src');

describe('parseLine', () => {
  it('splits on commas', () => {
    assert.deepStrictEqual(parseLine('a,b,c'), ['a', 'b', 'c']);
  });

  it('keeps empty fields', () => {
    assert.deepStrictEqual(parseLine(',x,'), ['', 'x', '']);
  });

  it('keeps delimiters inside quotes', () => {
    assert.deepStrictEqual(parseLine('1,"Smith, John",3'), ['1', 'Smith, John', '3']);
  });

  it('rejects an unterminated quote', () => {
    assert.throws(() => parseLine('a,"b'), SyntaxError);
  });

  it('takes another delimiter', () => {
    assert.deepStrictEqual(parseLine('a;"b;c"', { delimiter: ';' }), ['a', 'b;c']);
  });

  it('unescapes doubled quotes', () => {
    assert.deepStrictEqual(parseLine('"say ""hi""",x'), ['say "hi"', 'x']);
    assert.deepStrictEqual(parseLine('""""'), ['"']);
  });
});

test('an empty line is one empty field', () => {
  assert.deepStrictEqual(parseLine(''), ['']);
});

test('round-trips fields with quotes and commas', () => {
  const fields = ['12" vinyl', 'Smith, "Jo"', ''];
  assert.deepStrictEqual(parseLine(formatLine(fields)), fields);
});
'''

SAMPLES.append({
    "dir": "csvline-node",
    "repo": "acme/csvline",
    "instance_id": "acme__csvline-12",
    "created_at": "2024-07-08T16:30:00Z",
    "version": "1.1",
    "problem_statement": '''parseLine drops escaped quotes ("") inside quoted fields

A field that contains a double quote is written with the quote doubled, as RFC 4180 says
(and as our own `formatLine` does), but `parseLine` loses those quotes:

```js
const { formatLine, parseLine } = require('csvline');

parseLine('"say ""hi""",x');
// [ 'say hi', 'x' ]   expected [ 'say "hi"', 'x' ]

parseLine(formatLine(['12" vinyl']));
// [ '12 vinyl' ]      expected [ '12" vinyl' ]
```

So anything we export with `formatLine` and read back with `parseLine` loses its quote
characters (product names with inch marks, quoted nicknames...). Commas inside quotes work.

csvline 1.1.0 on Node 18.19 and 20.11.
''',
    "hints_text": "",
    "base": {
        "package.json": CSVLINE_PACKAGE,
        ".gitignore": "node_modules/\n",
        "README.md": """
# csvline

Parse and format single CSV lines, with RFC 4180 quoting. No dependencies.

```js
const { parseLine, formatLine } = require('csvline');
parseLine('1,"Smith, John",3'); // ['1', 'Smith, John', '3']
formatLine(['x,y', 2]);          // '"x,y",2'
```

`npm test` runs the tests with `node --test` (Node 18 or later).
""",
        "src/index.js": r'''
'use strict';

const { parseLine } = require('./parse');
const { formatLine } = require('./format');

module.exports = { parseLine, formatLine };
''',
        "src/parse.js": CSVLINE_PARSE,
        "src/format.js": r'''
'use strict';

/**
 * Joins fields into one CSV line, quoting those that hold the delimiter, a quote or a line
 * break (quotes inside are doubled).
 *
 * @param {Array<string|number|null|undefined>} fields
 * @param {{delimiter?: string}} [options]
 * @returns {string}
 */
function formatLine(fields, { delimiter = ',' } = {}) {
  return fields
    .map((value) => {
      const text = value === null || value === undefined ? '' : String(value);
      if (text.includes(delimiter) || /["\r\n]/.test(text)) {
        return `"${text.replace(/"/g, '""')}"`;
      }
      return text;
    })
    .join(delimiter);
}

module.exports = { formatLine };
''',
        "test/parse.test.js": CSVLINE_PARSE_TEST,
        "test/format.test.js": r'''
'use strict';

const { test } = require('node:test');
const assert = require('node:assert');

const { formatLine } = require('../src');

test('plain fields are joined', () => {
  assert.strictEqual(formatLine(['a', 1, null]), 'a,1,');
});

test('fields with delimiters or quotes are quoted', () => {
  assert.strictEqual(formatLine(['x,y', 'say "hi"']), '"x,y","say ""hi"""');
});
''',
    },
    "fix": {
        "src/parse.js": CSVLINE_PARSE_FIXED,
    },
    "tests": {
        "test/parse.test.js": CSVLINE_PARSE_TEST_NEW,
    },
    "FAIL_TO_PASS": [
        "test/parse.test.js::parseLine > unescapes doubled quotes",
        "test/parse.test.js::round-trips fields with quotes and commas",
    ],
    "PASS_TO_PASS": [
        "test/parse.test.js::parseLine > splits on commas",
        "test/parse.test.js::parseLine > keeps empty fields",
        "test/parse.test.js::parseLine > keeps delimiters inside quotes",
        "test/parse.test.js::parseLine > rejects an unterminated quote",
        "test/parse.test.js::parseLine > takes another delimiter",
        "test/parse.test.js::an empty line is one empty field",
        "test/format.test.js::plain fields are joined",
        "test/format.test.js::fields with delimiters or quotes are quoted",
    ],
})

# ---------------------------------------------------------------------------------------------
# A Python project graded by its CI jobs as well as its tests: .gitlab-ci.yml has a lint job
# (pyflakes, which the task's environment installs; jobs install nothing, the sandbox has no
# network) and a test job. Job ids are `ci:<job>`. `wrong_fix` fixes the bug but leaves an
# unused import, so its tests pass and ci:lint fails; it is written to
# tests/fixtures/swe/slugger-lint-breaking.patch for the grader's tests.
SLUGGER_CORE = '''
"""Slugs for titles."""

import re
{extra_import}import unicodedata

_RUNS = re.compile(r"[^a-z0-9]+")


def slugify(title, separator="-", max_length=None):
    """Lower-case ASCII slug of `title`; with `max_length`, at most that many characters."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    slug = _RUNS.sub(separator, ascii_title.lower()).strip(separator)
    if max_length is not None and len(slug) > max_length:
{truncate}
    return slug
'''

SLUGGER_TRUNCATE_BUGGY = "        slug = slug[:max_length]"
SLUGGER_TRUNCATE_FIXED = """\
        # The cut can fall just after a separator: never end the slug with one.
        slug = slug[:max_length].rstrip(separator)"""


def slugger_core(truncate, extra_import=""):
    return SLUGGER_CORE.replace("{extra_import}", extra_import).replace("{truncate}", truncate)


SLUGGER_TEST_CORE = '''
from slugger import slugify


def test_lowercases_and_joins_words():
    assert slugify("Hello World") == "hello-world"


def test_strips_accents_and_punctuation():
    assert slugify("  Crème brûlée, again!") == "creme-brulee-again"


def test_custom_separator():
    assert slugify("a b c", separator="_") == "a_b_c"


def test_max_length_cuts_long_slugs():
    assert slugify("Hello World", max_length=8) == "hello-wo"
    assert slugify("Hi", max_length=8) == "hi"
'''

SLUGGER_TEST_CORE_NEW = '''

def test_max_length_never_ends_in_separator():
    assert slugify("Hello World", max_length=6) == "hello"
    assert slugify("a b c d", max_length=4) == "a-b"
'''

SLUGGER_TEST_REGISTRY = '''
from slugger import SlugRegistry


def test_first_claim_is_the_plain_slug():
    assert SlugRegistry().claim("Release Notes") == "release-notes"


def test_repeated_titles_are_numbered():
    registry = SlugRegistry()
    assert [registry.claim("Intro") for _ in range(3)] == ["intro", "intro-2", "intro-3"]


def test_taken_slugs_are_skipped():
    registry = SlugRegistry(taken=["faq", "faq-2"])
    assert registry.claim("FAQ") == "faq-3"
    assert "faq-3" in registry
'''

SLUGGER_TEST_REGISTRY_NEW = '''

def test_truncated_titles_are_numbered_cleanly():
    registry = SlugRegistry(max_length=6)
    assert registry.claim("Hello World") == "hello"
    assert registry.claim("Hello Wonderful") == "hello-2"
'''

SAMPLES.append({
    "dir": "slugger-ci-lint",
    "repo": "acme/slugger",
    "instance_id": "acme__slugger-77",
    "created_at": "2024-08-19T11:15:00Z",
    "version": "1.0",
    "problem_statement": """Slugs cut by max_length can end with a dash

With `max_length`, `slugify` cuts the slug at that many characters even when the cut falls
right after a separator, so the slug ends with a dash:

```python
>>> from slugger import slugify
>>> slugify("Hello World", max_length=6)
'hello-'
>>> slugify("a b c d", max_length=4)
'a-b-'
```

Expected `'hello'` and `'a-b'`. `SlugRegistry(max_length=...)` inherits the problem and then
numbers the duplicates with a double dash: claiming "Hello World" and then "Hello Wonderful"
gives `hello-` and `hello--2` instead of `hello` and `hello-2`. Those ugly URLs are already
live on our wiki.

slugger 1.0.2, Python 3.11.
""",
    "hints_text": "Strip trailing separators after truncating.",
    "base": {
        "pyproject.toml": """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "slugger"
version = "1.0.2"
description = "URL slugs for titles, unique within a namespace"
requires-python = ">=3.8"

[project.optional-dependencies]
test = ["pytest"]

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["src"]
""",
        ".gitlab-ci.yml": """
# Our runners' image has python3, pytest and pyflakes: the jobs install nothing.
stages: [lint, test]

lint:
  stage: lint
  script:
    - python3 -m pyflakes src tests

test:
  stage: test
  script:
    - python3 -m pytest -q
""",
        "README.md": """
# slugger

URL slugs for titles (`"Crème brûlée, again!"` → `creme-brulee-again`), optionally cut to a
maximum length, and unique within a namespace (`intro`, `intro-2`, ...).

CI runs `python3 -m pyflakes src tests` and `python3 -m pytest -q`.
""",
        "src/slugger/__init__.py": '''
"""URL slugs for titles."""

from .core import slugify
from .registry import SlugRegistry

__all__ = ["SlugRegistry", "slugify"]
''',
        "src/slugger/core.py": slugger_core(SLUGGER_TRUNCATE_BUGGY),
        "src/slugger/registry.py": '''
"""Unique slugs within one namespace (a blog, a wiki space)."""

from .core import slugify


class SlugRegistry:
    """Hands out each slug once; repeats get -2, -3, ... after the (possibly cut) slug."""

    def __init__(self, taken=(), separator="-", max_length=None):
        self._taken = set(taken)
        self.separator = separator
        self.max_length = max_length

    def __contains__(self, slug):
        return slug in self._taken

    def claim(self, title):
        base = slugify(title, self.separator, self.max_length)
        slug, n = base, 2
        while slug in self._taken:
            slug = f"{base}{self.separator}{n}"
            n += 1
        self._taken.add(slug)
        return slug
''',
        "tests/test_core.py": SLUGGER_TEST_CORE,
        "tests/test_registry.py": SLUGGER_TEST_REGISTRY,
    },
    "fix": {
        "src/slugger/core.py": slugger_core(SLUGGER_TRUNCATE_FIXED),
    },
    # Fixes the bug, but keeps an import left over from trying textwrap.shorten: pyflakes
    # reports it, so ci:lint fails while every test passes.
    "wrong_fix": {
        "name": "slugger-lint-breaking.patch",
        "files": {
            "src/slugger/core.py": slugger_core(SLUGGER_TRUNCATE_FIXED, extra_import="import textwrap\n"),
        },
    },
    "tests": {
        "tests/test_core.py": SLUGGER_TEST_CORE + SLUGGER_TEST_CORE_NEW,
        "tests/test_registry.py": SLUGGER_TEST_REGISTRY + SLUGGER_TEST_REGISTRY_NEW,
    },
    "FAIL_TO_PASS": [
        "tests/test_core.py::test_max_length_never_ends_in_separator",
        "tests/test_registry.py::test_truncated_titles_are_numbered_cleanly",
        "ci:test",
    ],
    "PASS_TO_PASS": [
        "tests/test_core.py::test_lowercases_and_joins_words",
        "tests/test_core.py::test_strips_accents_and_punctuation",
        "tests/test_core.py::test_custom_separator",
        "tests/test_core.py::test_max_length_cuts_long_slugs",
        "tests/test_registry.py::test_first_claim_is_the_plain_slug",
        "tests/test_registry.py::test_repeated_titles_are_numbered",
        "tests/test_registry.py::test_taken_slugs_are_skipped",
        "ci:lint",
    ],
    "ci_jobs": ["lint", "test"],
    "environment": {"pip": ["pyflakes==3.2.0"]},
})

# ---------------------------------------------------------------------------------------------
# The layout and runner of Django's own repository, in a project of ours: `tests/runtests.py`
# (our script, which accepts the arguments SWE-bench passes Django's and runs the labels with
# unittest at verbosity 2) and SWE-bench's django ids: `test_name (module.Class)`, or a test's
# docstring line.
DJANGO_STYLE_RUNTESTS = '''
#!/usr/bin/env python3
"""Runs the test labels given (`months.tests`) as Django's tests/runtests.py runs them:
unittest's text runner at the verbosity asked for."""

import argparse
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("labels", nargs="*")
    parser.add_argument("--verbosity", type=int, default=1)
    parser.add_argument("--settings")
    parser.add_argument("--parallel", type=int, default=1)
    args = parser.parse_args()
    sys.path[:0] = [HERE, os.path.dirname(HERE)]
    import minical

    print(f"Testing against minical installed in {os.path.dirname(minical.__file__)!r}")
    loader = unittest.defaultTestLoader
    if args.labels:
        suite = loader.loadTestsFromNames(args.labels)
    else:
        suite = loader.discover(HERE, pattern="tests.py", top_level_dir=HERE)
    print(f"Found {suite.countTestCases()} test(s).")
    print("System check identified no issues (0 silenced).")
    result = unittest.TextTestRunner(verbosity=args.verbosity).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
'''

DJANGO_STYLE_CALENDAR = '''
"""Calendar arithmetic."""


def is_leap(year):
    """Whether `year` has a 29 February."""
    return year % 4 == 0{fixed}


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError(f"month {{month}} is not 1 to 12")
    if month == 2:
        return 29 if is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31
'''

DJANGO_STYLE_TESTS = '''
import unittest

from minical.calendar import days_in_month, is_leap


class DaysInMonthTests(unittest.TestCase):
    def test_thirty_day_months(self):
        self.assertEqual([days_in_month(2023, m) for m in (4, 6, 9, 11)], [30] * 4)

    def test_leap_february(self):
        """February has 29 days in a leap year."""
        self.assertEqual(days_in_month(2024, 2), 29)

    def test_rejects_month_thirteen(self):
        with self.assertRaises(ValueError):
            days_in_month(2024, 13)
{added}'''

SAMPLES.append({
    "dir": "calendar-django-style",
    "repo": "acme/minical",
    "instance_id": "acme__minical-12",
    "created_at": "2024-04-02T10:00:00Z",
    "version": "0.2",
    "problem_statement": """1900 and 2100 counted as leap years

`days_in_month(1900, 2)` returns 29; 1900 was not a leap year (a year divisible by 100 is not,
unless it is divisible by 400). Our payroll tool computes 2100's February wrong for the same
reason.
""",
    "hints_text": "",
    "base": {
        "README.md": "# minical\n\nSmall calendar helpers. Tests: `tests/runtests.py months.tests`.\n",
        "minical/__init__.py": '"""Small calendar helpers."""\n',
        "minical/calendar.py": DJANGO_STYLE_CALENDAR.format(fixed=""),
        "tests/runtests.py": DJANGO_STYLE_RUNTESTS,
        "tests/test_sqlite.py": '"""Settings module the runner is given (nothing to set here)."""\n',
        "tests/months/__init__.py": "",
        "tests/months/tests.py": DJANGO_STYLE_TESTS.format(added=""),
    },
    "fix": {
        "minical/calendar.py": DJANGO_STYLE_CALENDAR.format(
            fixed=" and (year % 100 != 0 or year % 400 == 0)"
        ),
    },
    "tests": {
        "tests/months/tests.py": DJANGO_STYLE_TESTS.format(added='''
    def test_century_february(self):
        self.assertEqual(days_in_month(1900, 2), 28)
        self.assertEqual(days_in_month(2000, 2), 29)

    def test_century_not_divisible_by_400(self):
        """A year divisible by 100 but not by 400 is not a leap year."""
        self.assertFalse(is_leap(2100))
'''),
    },
    "FAIL_TO_PASS": [
        "test_century_february (months.tests.DaysInMonthTests)",
        "A year divisible by 100 but not by 400 is not a leap year.",
    ],
    "PASS_TO_PASS": [
        "test_thirty_day_months (months.tests.DaysInMonthTests)",
        "February has 29 days in a leap year.",
        "test_rejects_month_thirteen (months.tests.DaysInMonthTests)",
    ],
})

# ---------------------------------------------------------------------------------------------
# The layout and runner of SymPy's repository, in a project of ours: tests inside the package
# (`tinypoly/tests/test_*.py`), `bin/test` (our script, printing what SymPy's runner prints with
# --verbose) and SWE-bench's sympy ids, the bare test names.
SYMPY_STYLE_BIN_TEST = '''
#!/usr/bin/env python3
"""Runs the test functions of the files given, printing as SymPy's bin/test --verbose does."""

import importlib.util
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH = 80


def run_file(path, failures):
    spec = importlib.util.spec_from_file_location("tested_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [(n, f) for n, f in vars(module).items() if n.startswith("test_") and callable(f)]
    sys.stdout.write(f"{path}[{len(tests)}] ")
    counts = {"passed": 0, "failed": 0, "exceptions": 0}
    file_failed = False
    for name, function in tests:
        line = f"\\n{name} "
        try:
            function()
            line += "ok"
            counts["passed"] += 1
        except AssertionError:
            line += "F"
            counts["failed"] += 1
            failures.append((path, name, traceback.format_exc()))
            file_failed = True
        except Exception:
            line += "E"
            counts["exceptions"] += 1
            failures.append((path, name, traceback.format_exc()))
            file_failed = True
        sys.stdout.write(line)
        last = len(line) - 1
    mark = "[FAIL]" if file_failed else "[OK]"
    sys.stdout.write(" " * max(1, WIDTH - last - len(mark)) + mark + "\\n\\n")
    return counts


def main():
    files = [a for a in sys.argv[1:] if not a.startswith("-")]
    sys.path.insert(0, ROOT)
    print(" test process starts ".center(WIDTH, "="))
    print()
    start = time.time()
    failures = []
    totals = {"passed": 0, "failed": 0, "exceptions": 0}
    for path in files:
        for key, n in run_file(path, failures).items():
            totals[key] += n
    for path, name, text in failures:
        print("_" * WIDTH)
        print(f" {path}:{name} ".center(WIDTH, "_"))
        print(text)
    parts = [f"{totals['passed']} passed"]
    if totals["failed"]:
        parts.append(f"{totals['failed']} failed")
    if totals["exceptions"]:
        parts.append(f"{totals['exceptions']} exceptions")
    print(f" tests finished: {', '.join(parts)}, in {time.time() - start:.2f} seconds ".center(WIDTH, "="))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
'''

SYMPY_STYLE_POLY = '''
"""Polynomials as coefficient lists, lowest degree first."""


def evaluate(coeffs, x):
    """The polynomial's value at `x` (Horner's rule)."""
    value = 0
    for c in reversed(coeffs):
        value = value * x + c
    return value


def add(p, q):
    n = max(len(p), len(q))
    return [(p[i] if i < len(p) else 0) + (q[i] if i < len(q) else 0) for i in range(n)]


def derivative(coeffs):
    """The derivative's coefficients; a constant's derivative is the zero polynomial [0]."""
    {body}
'''

SYMPY_STYLE_TESTS = '''
from tinypoly.poly import add, derivative, evaluate


def test_evaluate():
    assert evaluate([1, 2, 3], 2) == 17


def test_add():
    assert add([1, 2], [3, 4, 5]) == [4, 6, 5]


def test_derivative():
    assert derivative([5, 3, 2]) == [3, 4]
{added}'''

SAMPLES.append({
    "dir": "poly-sympy-style",
    "repo": "acme/tinypoly",
    "instance_id": "acme__tinypoly-7",
    "created_at": "2024-04-09T16:30:00Z",
    "version": "1.0",
    "problem_statement": """derivative() of a constant is an empty list

`derivative([5])` returns `[]`, which `evaluate` then treats as... nothing, and `add` pads
oddly. The docstring promises the zero polynomial `[0]`.
""",
    "hints_text": "",
    "base": {
        "README.md": "# tinypoly\n\nPolynomials as lists. Tests: `bin/test tinypoly/tests/test_poly.py`.\n",
        "bin/test": SYMPY_STYLE_BIN_TEST,
        "tinypoly/__init__.py": '"""Polynomials as coefficient lists."""\n',
        "tinypoly/poly.py": SYMPY_STYLE_POLY.format(
            body="return [i * c for i, c in enumerate(coeffs)][1:]"
        ),
        "tinypoly/tests/__init__.py": "",
        "tinypoly/tests/test_poly.py": SYMPY_STYLE_TESTS.format(added=""),
    },
    "fix": {
        "tinypoly/poly.py": SYMPY_STYLE_POLY.format(
            body="return [i * c for i, c in enumerate(coeffs)][1:] or [0]"
        ),
    },
    "tests": {
        "tinypoly/tests/test_poly.py": SYMPY_STYLE_TESTS.format(added='''

def test_derivative_of_constant():
    assert derivative([5]) == [0]
    assert evaluate(derivative([5]), 3) == 0
'''),
    },
    "FAIL_TO_PASS": ["test_derivative_of_constant"],
    "PASS_TO_PASS": ["test_evaluate", "test_add", "test_derivative"],
})


def diff(repo, base, files):
    """`files` written over `base` as a diff against it (new files included); the work tree
    goes back to `base` afterwards."""
    write(repo, files)
    git(repo, "add", "-A")
    out = git(repo, "diff", "--cached", "--no-color", "--full-index", base, "--", *files)
    git(repo, "reset", "-q", "--hard", base)
    git(repo, "clean", "-q", "-fd")
    return out


def build(sample, out_root, fixtures_root):
    work = tempfile.mkdtemp(prefix="repairbench-sample-")
    try:
        git(work, "init", "-q", "-b", "main")
        write(work, sample["base"])
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "Initial import")
        base = git(work, "rev-parse", "HEAD").strip()
        patch = diff(work, base, sample["fix"])
        test_patch = diff(work, base, sample["tests"])
        dest = os.path.join(out_root, sample["dir"])
        os.makedirs(dest, exist_ok=True)
        git(work, "bundle", "create", "-q", os.path.join(os.path.abspath(dest), "repo.bundle"), "HEAD", "main")
        task = {
            "repo": sample["repo"],
            "instance_id": sample["instance_id"],
            "base_commit": base,
            "patch": patch,
            "test_patch": test_patch,
            "problem_statement": sample["problem_statement"],
            "hints_text": sample["hints_text"],
            "created_at": sample["created_at"],
            "version": sample["version"],
            "environment_setup_commit": base,
            "FAIL_TO_PASS": json.dumps(sample["FAIL_TO_PASS"]),
            "PASS_TO_PASS": json.dumps(sample["PASS_TO_PASS"]),
        }
        # Only the samples that need them carry these (see issues/README.md).
        for key in ("environment", "ci_jobs", "services", "service_checks"):
            if key in sample:
                task[key] = sample[key]
        with open(os.path.join(dest, "task.json"), "w") as f:
            json.dump(task, f, indent=2)
            f.write("\n")
        print(f"{sample['dir']}: {sample['instance_id']} at {base[:12]}")
        # A wrong patch for the grader's tests, always against this base.
        if "wrong_fix" in sample:
            wrong = sample["wrong_fix"]
            path = os.path.join(fixtures_root, wrong["name"])
            os.makedirs(fixtures_root, exist_ok=True)
            with open(path, "w", newline="\n") as f:
                f.write(diff(work, base, wrong["files"]))
            print(f"  wrong patch: {path}")
    finally:
        shutil.rmtree(work)


# Samples whose tests talk to services (PostgreSQL, Redis, the project's own server).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service_samples import SERVICE_SAMPLES  # noqa: E402

SAMPLES.extend(SERVICE_SAMPLES)


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "issues"
    fixtures_root = sys.argv[2] if len(sys.argv) > 2 else os.path.join("tests", "fixtures", "swe")
    for sample in SAMPLES:
        build(sample, out_root, fixtures_root)


if __name__ == "__main__":
    main()
