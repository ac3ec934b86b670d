//! Code-repair tasks: SWE-bench instances and predictions, task folders under `issues/`.
