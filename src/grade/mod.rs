//! Grading test runs: structured reports and log parsers to per-test status, then verdicts.
