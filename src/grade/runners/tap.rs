//! TAP version 13 as `node --test --test-reporter=tap` prints it (Node 18 and newer) to
//! per-test statuses.
//!
//! Nesting is by indentation, four spaces a level: `# Subtest: name`, then the children, then
//! the parent's own `ok N - name` / `not ok N - name`, each test point optionally followed by
//! a YAML diagnostics block (`---` ... `...`). Names are unescaped (`\#` -> `#`, `\\` -> `\`);
//! a `# SKIP` or `# TODO` directive follows the name.
//!
//! Id: `<file>::<suite> > <test>` for a test under a file wrapper, `<suite> > <test>` without
//! one, the path running from the outermost test (or `describe`) down to the leaf, joined with
//! ` > `. Only leaves are tests: a parent whose children are listed is not itself one. Node up
//! to 18.18 wraps each test file in a top-level subtest named by its path, which gives
//! `<file>`, relative to the working directory `/workspace` (`test/slug.test.js::slug > joins
//! words`). Node from 18.19 on (and 20+) prints no wrapper, so there is no file part: the
//! `location` diagnostic would give one, but Node prints it only for failing tests and suites,
//! and an id must not change with the outcome: to get the file part there, run one file at a
//! time and read each run with [`parse_for_file`]. A file that fails to load still appears as a
//! top-level test named by its path, and is recorded as `<file>::(file)` with status Error.
//!
//! Status: `# SKIP` -> Skipped; `# TODO` -> Xfail when not ok, Passed when ok; otherwise ok ->
//! Passed and not ok (including cancelled) -> Failed. A suite that fails while all its children
//! passed (a failing `after` hook) and a subtest that never finished are problems; a test that
//! never finished is also Failed.

use super::{Counts, RunnerReport};
use crate::grade::TestStatus;

/// Where the sandbox mounts the repository; file paths are made relative to it.
const WORKDIR: &str = "/workspace/";
const SCRIPT_EXTENSIONS: [&str; 6] = [".js", ".mjs", ".cjs", ".ts", ".mts", ".cts"];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Directive {
    None,
    Skip,
    Todo,
}

#[derive(Debug)]
struct Point {
    name: String,
    ok: bool,
    directive: Directive,
    suite: bool,
    failure_type: Option<String>,
    error: Option<String>,
    children: Vec<Point>,
}

impl Point {
    fn new(name: String, ok: bool, directive: Directive, children: Vec<Point>) -> Self {
        Point { name, ok, directive, suite: false, failure_type: None, error: None, children }
    }

    fn status(&self) -> TestStatus {
        match (self.directive, self.ok) {
            (Directive::Skip, _) => TestStatus::Skipped,
            (Directive::Todo, false) => TestStatus::Xfail,
            (_, true) => TestStatus::Passed,
            (Directive::None, false) => TestStatus::Failed,
        }
    }

    fn failed(&self) -> bool {
        !self.ok && self.directive == Directive::None
    }
}

/// `ok 3 - name \# with hash # SKIP why` -> (ok, name, directive).
fn test_point(content: &str) -> Option<(bool, String, Directive)> {
    let (ok, rest) = match content.strip_prefix("not ok") {
        Some(rest) => (false, rest),
        None => (true, content.strip_prefix("ok")?),
    };
    let rest = rest.strip_prefix(' ').filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))?;
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    let rest = rest.strip_prefix(" - ").or_else(|| rest.strip_prefix(' ')).unwrap_or(rest);
    let mut name = String::new();
    let mut directive = Directive::None;
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next @ ('#' | '\\')) => name.push(next),
                Some(next) => {
                    name.push('\\');
                    name.push(next);
                }
                None => name.push('\\'),
            },
            '#' => {
                let word = chars.as_str().trim_start().to_ascii_uppercase();
                if word.starts_with("SKIP") {
                    directive = Directive::Skip;
                } else if word.starts_with("TODO") {
                    directive = Directive::Todo;
                }
                break;
            }
            c => name.push(c),
        }
    }
    Some((ok, name.trim().to_owned(), directive))
}

fn looks_like_file(name: &str) -> bool {
    SCRIPT_EXTENSIONS.iter().any(|ext| name.ends_with(ext))
        && (name.starts_with('/') || name.starts_with("./") || !name.contains(char::is_whitespace))
}

fn relative(path: &str) -> &str {
    let path = path.strip_prefix(WORKDIR).unwrap_or(path);
    path.strip_prefix("./").unwrap_or(path)
}

fn unquote(value: &str) -> String {
    let value = value.trim();
    let inner = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\''));
    inner.map(|v| v.replace("''", "'")).unwrap_or_else(|| value.to_owned())
}

#[derive(Default)]
struct Parser {
    /// Finished points per nesting level, not yet claimed by their parent.
    pending: Vec<Vec<Point>>,
    /// Names announced by `# Subtest:` per level, until their test point comes.
    open: Vec<Option<String>>,
    /// Level of the last test point, whose YAML block may follow.
    last: Option<usize>,
    /// Indent of the `---` of the YAML block being read.
    yaml: Option<usize>,
    stated: Counts,
    saw_summary: bool,
}

impl Parser {
    fn level_slot<T: Default>(list: &mut Vec<T>, level: usize) -> &mut T {
        if list.len() <= level {
            list.resize_with(level + 1, T::default);
        }
        &mut list[level]
    }

    fn line(&mut self, line: &str, report: &mut RunnerReport) {
        let content = line.trim_start_matches(' ');
        let indent = line.len() - content.len();
        if let Some(block) = self.yaml {
            if indent == block && content == "..." {
                self.yaml = None;
            } else if let Some((key, value)) = content.split_once(':').filter(|_| indent == block) {
                let point = self.last.and_then(|l| self.pending.get_mut(l)).and_then(|p| p.last_mut());
                if let Some(point) = point {
                    match key {
                        "type" => point.suite = unquote(value) == "suite",
                        "failureType" => point.failure_type = Some(unquote(value)),
                        // A block scalar (`|-`) would need the lines below; the code says enough.
                        "error" if !value.trim_start().starts_with(['|', '>']) => {
                            point.error = Some(unquote(value))
                        }
                        _ => {}
                    }
                }
            }
            return;
        }
        let level = indent / 4;
        if let Some(name) = content.strip_prefix("# Subtest: ") {
            *Self::level_slot(&mut self.open, level) = Some(name.to_owned());
            self.open.truncate(level + 1);
        } else if let Some((ok, name, directive)) = test_point(content) {
            let children = self.pending.get_mut(level + 1).map(std::mem::take).unwrap_or_default();
            Self::level_slot(&mut self.pending, level).push(Point::new(name, ok, directive, children));
            if let Some(open) = self.open.get_mut(level) {
                *open = None;
            }
            self.last = Some(level);
        } else if content == "---" && self.last.is_some_and(|l| indent == l * 4 + 2) {
            self.yaml = Some(indent);
        } else if content.starts_with("Bail out!") {
            report.problems.push(format!("TAP: {content}"));
        } else if indent == 0 {
            self.summary_line(content);
        }
    }

    fn summary_line(&mut self, content: &str) {
        let Some((key, value)) = content.strip_prefix("# ").and_then(|c| c.split_once(' ')) else {
            return;
        };
        let Ok(n) = value.trim().parse::<usize>() else {
            return;
        };
        match key {
            "pass" => self.stated.passed += n,
            "fail" | "cancelled" => self.stated.failed += n,
            "skipped" | "todo" => self.stated.skipped += n,
            _ => return,
        }
        self.saw_summary = true;
    }

    /// Closes subtests that were announced and never finished (the process died), innermost
    /// first, and returns the top-level points.
    fn finish(mut self, report: &mut RunnerReport) -> Vec<Point> {
        for level in (0..self.open.len().max(self.pending.len())).rev() {
            let children = self.pending.get_mut(level + 1).map(std::mem::take).unwrap_or_default();
            let open = self.open.get_mut(level).and_then(Option::take);
            match open {
                Some(name) => {
                    report.problems.push(format!("subtest {name} started but never finished"));
                    let point = Point::new(name, false, Directive::None, children);
                    Self::level_slot(&mut self.pending, level).push(point);
                }
                None => Self::level_slot(&mut self.pending, level).extend(children),
            }
        }
        self.pending.into_iter().next().unwrap_or_default()
    }
}

fn bump(counts: &mut Counts, point: &Point) {
    match (point.directive, point.ok) {
        (Directive::Skip | Directive::Todo, _) => counts.skipped += 1,
        (Directive::None, true) => counts.passed += 1,
        (Directive::None, false) => counts.failed += 1,
    }
}

/// Counts the way Node's summary does: every test point that is not a `describe` suite.
fn count(points: &[Point], all: &mut Counts, top_only: &mut Counts, top: bool) {
    for point in points {
        if !point.suite {
            bump(all, point);
            if top {
                bump(top_only, point);
            }
        }
        count(&point.children, all, top_only, false);
    }
}

fn walk(point: &Point, path: &mut Vec<String>, file: Option<&str>, report: &mut RunnerReport) {
    path.push(point.name.clone());
    let id = file.map_or_else(|| path.join(" > "), |file| format!("{file}::{}", path.join(" > ")));
    if point.children.is_empty() {
        if !point.suite {
            report.record(id, point.status());
        }
    } else {
        if point.failed() && !point.children.iter().any(Point::failed) {
            let why = [point.failure_type.as_deref(), point.error.as_deref()];
            let why: Vec<&str> = why.into_iter().flatten().collect();
            report.problems.push(format!("{id} failed on its own ({})", why.join(": ")));
        }
        for child in &point.children {
            walk(child, path, file, report);
        }
    }
    path.pop();
}

/// Parses the TAP of Node's test runner.
pub fn parse(tap: &str) -> RunnerReport {
    parse_with_file(tap, None)
}

/// Parses the TAP of `node --test <file>` run on one file: ids get that file part even where
/// Node prints no wrapper (`test/parse.test.js::<describe> > <test>`).
pub fn parse_for_file(tap: &str, file: &str) -> RunnerReport {
    parse_with_file(tap, Some(relative(file)))
}

fn parse_with_file(tap: &str, file: Option<&str>) -> RunnerReport {
    let mut report = RunnerReport::default();
    let mut parser = Parser::default();
    for line in tap.lines() {
        parser.line(line.strip_suffix('\r').unwrap_or(line), &mut report);
    }
    let (stated, saw_summary) = (parser.stated, parser.saw_summary);
    let top = parser.finish(&mut report);
    for point in &top {
        if !looks_like_file(&point.name) {
            walk(point, &mut Vec::new(), file, &mut report);
            continue;
        }
        let file = relative(&point.name);
        for child in &point.children {
            walk(child, &mut Vec::new(), Some(file), &mut report);
        }
        if point.failed() && !point.children.iter().any(Point::failed) {
            if point.children.is_empty() {
                report.record(format!("{file}::(file)"), TestStatus::Error);
            } else {
                report.problems.push(format!("{file} failed although none of its tests did"));
            }
        }
    }
    if saw_summary {
        let (mut all, mut top_only) = (Counts::default(), Counts::default());
        count(&top, &mut all, &mut top_only, true);
        // Node up to 18.18 counted only the top-level tests (one per file).
        let seen = if stated == top_only { top_only } else { all };
        report.check_summary("node --test", stated, seen);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestStatus::*;

    // Real `node --test --test-reporter=tap` of Node 18.20.4 (Debian bookworm's nodejs), run in
    // /tmp/nodeproj, the path rewritten to /workspace; stacks, durations and assertion details
    // left out.
    // Files: test/slug.test.js (describe, nested describe, skip, todo, failing, printing, t.test
    // subtests), test/broken.test.js (requires a missing module), test/todo.test.js (a passing
    // todo, a name with `#` and `\\`), t2/hooks.test.mjs (an `after` hook that throws). Node
    // 20.20's output has the same shape.
    const NODE_18_20: &str = r#"TAP version 13
# Subtest: db
    # Subtest: connects
    ok 1 - connects
      ---
      ...
    1..1
not ok 1 - db
  ---
  type: 'suite'
  location: 'file:///workspace/t2/hooks.test.mjs:2:1'
  failureType: 'hookFailed'
  error: 'teardown failed'
  code: 'ERR_TEST_FAILURE'
  ...
# node:internal/modules/cjs/loader:1143
#   throw err;
#   ^
# Error: Cannot find module './does-not-exist'
# Require stack:
# - /workspace/test/broken.test.js
#   code: 'MODULE_NOT_FOUND',
#   requireStack: [ '/workspace/test/broken.test.js' ]
# }
# Node.js v18.20.4
# Subtest: /workspace/test/broken.test.js
not ok 2 - /workspace/test/broken.test.js
  ---
  location: '/workspace/test/broken.test.js:1:1'
  failureType: 'testCodeFailure'
  exitCode: 1
  error: 'test failed'
  code: 'ERR_TEST_FAILURE'
  ...
# joining words now
# Subtest: slug
    # Subtest: lowercases
    ok 1 - lowercases
      ---
      ...
    # Subtest: joins words
    not ok 2 - joins words
      ---
      location: '/workspace/test/slug.test.js:9:3'
      failureType: 'testCodeFailure'
      error: |-
        Expected values to be strictly equal:
        
        'a-b' !== 'a_b'
        
      code: 'ERR_ASSERTION'
      ...
    # Subtest: unicode
        # Subtest: keeps accents
        ok 1 - keeps accents
          ---
          ...
        # Subtest: strips emoji
        ok 2 - strips emoji # SKIP not yet
          ---
          ...
        1..2
    ok 3 - unicode
      ---
      type: 'suite'
      ...
    # Subtest: handles tabs
    not ok 4 - handles tabs # TODO later
      ---
      location: '/workspace/test/slug.test.js:19:3'
      failureType: 'testCodeFailure'
      error: |-
        Expected values to be strictly equal:
        
        'a-b' !== 'a_b'
        
      code: 'ERR_ASSERTION'
      ...
    1..4
not ok 3 - slug
  ---
  type: 'suite'
  location: '/workspace/test/slug.test.js:5:1'
  failureType: 'subtestsFailed'
  error: '1 subtest failed'
  code: 'ERR_TEST_FAILURE'
  ...
# Subtest: top level ok
ok 4 - top level ok
  ---
  ...
# Subtest: throws
not ok 5 - throws
  ---
  location: '/workspace/test/slug.test.js:25:1'
  failureType: 'testCodeFailure'
  error: 'boom'
  code: 'ERR_TEST_FAILURE'
  ...
# Subtest: parent with subtests
    # Subtest: child one
    ok 1 - child one
      ---
      ...
    # Subtest: child two
    ok 2 - child two
      ---
      ...
    1..2
ok 6 - parent with subtests
  ---
  ...
# Subtest: todo that passes
ok 7 - todo that passes # TODO
  ---
  ...
# Subtest: name with \# hash and \\ backslash
ok 8 - name with \# hash and \\ backslash
  ---
  ...
1..8
# tests 14
# suites 3
# pass 8
# fail 3
# cancelled 0
# skipped 1
# todo 2
# duration_ms 2054.647097
"#;

    // Node up to 18.18: each file is a top-level subtest named by its path; `describe` blocks
    // are not marked as suites and the summary counts only the files. Written to that format.
    const NODE_18_OLD: &str = "TAP version 13
# Subtest: /workspace/test/math.test.js
    # Subtest: arithmetic
        # Subtest: adds
        ok 1 - adds
        # Subtest: divides
        not ok 2 - divides
          ---
          duration_ms: 0.52
          failureType: 'testCodeFailure'
          error: |-
            Expected values to be strictly equal:
            not ok 7 - forged by the message
          code: 'ERR_ASSERTION'
          ...
        1..2
    not ok 1 - arithmetic
      ---
      duration_ms: 2.1
      failureType: 'subtestsFailed'
      error: '1 subtest failed'
      ...
    1..1
not ok 1 - /workspace/test/math.test.js
  ---
  duration_ms: 61.3
  failureType: 'subtestsFailed'
  exitCode: 1
  error: '1 subtest failed'
  ...
# Subtest: ./test/other.test.mjs
    # Subtest: arithmetic
        # Subtest: adds
        ok 1 - adds
        1..1
    ok 1 - arithmetic
      ---
      duration_ms: 1.0
      ...
    1..1
ok 2 - ./test/other.test.mjs
  ---
  duration_ms: 40.2
  ...
1..2
# tests 2
# pass 1
# fail 1
# cancelled 0
# skipped 0
# todo 0
# duration_ms 120.5
";

    #[test]
    fn node_18_20_leaves_with_suite_paths() {
        let report = parse(NODE_18_20);
        let got: Vec<(&str, TestStatus)> = report.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let mut want = vec![
            ("db > connects", Passed),
            ("test/broken.test.js::(file)", Error),
            ("slug > lowercases", Passed),
            ("slug > joins words", Failed),
            ("slug > unicode > keeps accents", Passed),
            ("slug > unicode > strips emoji", Skipped),
            ("slug > handles tabs", Xfail),
            ("top level ok", Passed),
            ("throws", Failed),
            ("parent with subtests > child one", Passed),
            ("parent with subtests > child two", Passed),
            ("todo that passes", Passed),
            ("name with # hash and \\ backslash", Passed),
        ];
        want.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(got, want);
        assert_eq!(report.summary, Some(Counts { passed: 8, failed: 3, skipped: 3 }));
        // The after hook's failure belongs to no test, but it must not vanish.
        assert_eq!(report.problems, vec!["db failed on its own (hookFailed: teardown failed)".to_string()]);
    }

    #[test]
    fn node_18_old_file_wrappers_give_the_file_part() {
        let report = parse(NODE_18_OLD);
        let got: Vec<(&str, TestStatus)> = report.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            got,
            vec![
                ("test/math.test.js::arithmetic > adds", Passed),
                ("test/math.test.js::arithmetic > divides", Failed),
                ("test/other.test.mjs::arithmetic > adds", Passed),
            ]
        );
        assert_eq!(report.summary, Some(Counts { passed: 1, failed: 1, skipped: 0 }));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn a_killed_run_fails_what_never_finished() {
        let tap = "TAP version 13\n# Subtest: slug\n    # Subtest: lowercases\n    ok 1 - lowercases\n      ---\n      \
                   duration_ms: 0.4\n      ...\n    # Subtest: hangs\n";
        let report = parse(tap);
        assert_eq!(report.statuses.get("slug > lowercases"), Some(&Passed));
        assert_eq!(report.statuses.get("slug > hangs"), Some(&Failed));
        assert_eq!(report.statuses.len(), 2);
        assert_eq!(
            report.problems,
            vec!["subtest hangs started but never finished", "subtest slug started but never finished"]
        );
        assert_eq!(report.summary, None);
    }

    #[test]
    fn a_summary_that_disagrees_is_a_problem() {
        let report = parse(&NODE_18_20.replace("# pass 8", "# pass 9"));
        assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
        assert!(
            report.problems[1].starts_with("node --test: the summary says 9 passed"),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn test_points_and_directives() {
        assert_eq!(
            test_point("ok 2 - strips emoji # SKIP not yet"),
            Some((true, "strips emoji".into(), Directive::Skip))
        );
        assert_eq!(test_point("not ok 4 - tabs # todo later"), Some((false, "tabs".into(), Directive::Todo)));
        assert_eq!(test_point("ok 1 - a \\# b \\\\ c"), Some((true, "a # b \\ c".into(), Directive::None)));
        assert_eq!(test_point("ok 5"), Some((true, String::new(), Directive::None)));
        assert_eq!(test_point("okay 1 - x"), None);
        assert_eq!(test_point("ok - x"), None);
        assert!(looks_like_file("/workspace/test/a.test.js") && looks_like_file("test/b.spec.ts"));
        assert!(!looks_like_file("parses config.js files") && !looks_like_file("adds"));
    }

    #[test]
    fn a_run_of_one_file_gets_that_file_part() {
        let tap = "TAP version 13\n# Subtest: slug\n    # Subtest: lowercases\n    ok 1 - lowercases\n    1..1\n\
                   ok 1 - slug\n  ---\n  type: 'suite'\n  ...\n# Subtest: top level ok\nok 2 - top level ok\n1..2\n";
        let report = parse_for_file(tap, "/workspace/test/slug.test.js");
        let ids: Vec<&str> = report.statuses.keys().map(String::as_str).collect();
        assert_eq!(ids, ["test/slug.test.js::slug > lowercases", "test/slug.test.js::top level ok"]);
    }
}
