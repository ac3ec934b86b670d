//! A project with a C extension module, written here as a scripted history: its environment
//! gets a compiler and Python's headers, and the extension is built again from the tree under
//! test before each run. The bug and its fix are in the C source, so gold resolves only if the
//! patched C is compiled, and the unpatched tree fails only if the environment commit's build
//! is not what runs. `swe validate` checks both.

mod common;

use common::scripted::ScriptedRepo;

const SETUP_PY: &str = "from setuptools import Extension, setup\n\nsetup(\n    name=\"fastsum\",\n    version=\"0.1\",\n    packages=[\"fastsum\"],\n    ext_modules=[Extension(\"fastsum._speedups\", [\"fastsum/_speedups.c\"])],\n)\n";

const SPEEDUPS_C: &str = r#"#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Sum of a list of integers. */
static PyObject *total(PyObject *self, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) {
        return NULL;
    }
    Py_ssize_t n = PyList_Size(list);
    long sum = 0;
    for (Py_ssize_t i = 0; i < LAST; i++) {
        long value = PyLong_AsLong(PyList_GetItem(list, i));
        if (value == -1 && PyErr_Occurred()) {
            return NULL;
        }
        sum += value;
    }
    return PyLong_FromLong(sum);
}

static PyMethodDef methods[] = {
    {"total", total, METH_VARARGS, "Sum of a list of integers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
"#;

const TESTS: &str = "from fastsum import total\n\n\ndef test_empty_is_zero():\n    assert total([]) == 0\n";

#[test]
fn a_c_extension_is_compiled_and_rebuilt_from_the_tree_under_test() {
    let dir = tempfile::tempdir().unwrap();
    let repo = ScriptedRepo::init(&dir.path().join("repo"), "2024-05-01T10:00:00+00:00");
    let base = repo.commit(
        &[
            ("setup.py", SETUP_PY.to_owned()),
            ("fastsum/__init__.py", "from ._speedups import total\n".to_owned()),
            ("fastsum/_speedups.c", SPEEDUPS_C.replace("LAST", "n - 1")),
            ("tests/test_total.py", TESTS.to_owned()),
        ],
        "fastsum",
    );
    let patch = repo.diff(&base, &[("fastsum/_speedups.c", SPEEDUPS_C.replace("LAST", "n"))]);
    let test_patch = repo.diff(
        &base,
        &[(
            "tests/test_total.py",
            format!("{TESTS}\n\ndef test_sums_every_item():\n    assert total([1, 2, 3]) == 6\n"),
        )],
    );

    let dataset = dir.path().join("fastsum-c-extension");
    let task = serde_json::json!({
        "repo": "acme/fastsum", "instance_id": "acme__fastsum-3", "base_commit": base,
        "environment_setup_commit": base, "patch": patch, "test_patch": test_patch,
        "problem_statement": "total() leaves out the last item: total([1, 2, 3]) is 3.",
        "hints_text": "", "created_at": "2024-05-01T10:00:00Z", "version": "0.1",
        "FAIL_TO_PASS": ["tests/test_total.py::test_sums_every_item"],
        "PASS_TO_PASS": ["tests/test_total.py::test_empty_is_zero"],
    });
    repo.task_folder(&dataset, &task);

    let out = dir.path().join("validate");
    let output = common::cli::run(
        &["swe", "validate", "--dataset", dataset.to_str().unwrap(), "--out", out.to_str().unwrap()],
        None,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 valid, 0 invalid"), "{stdout}");
}
