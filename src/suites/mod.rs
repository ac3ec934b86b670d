//! Standard benchmarks (HumanEval, MBPP, GSM8K, MMLU, HellaSwag, ARC, GPQA) defined in
//! `harness/suites/` and driven through the same inference core.
