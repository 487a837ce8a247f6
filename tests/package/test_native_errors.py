"""Every Python exception the native module raises is made in one place,
crates/loaderx-py/src/errors.rs: the rest of the bindings return the crates'
errors or call a function of errors.rs, and name no exception class."""

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "crates" / "loaderx-py" / "src"

# What making or naming an exception class looks like in PyO3 code.
CONSTRUCTION = re.compile(
    r"new_err\s*\(|PyErr::new\b|PyErr::from_value|PyErr::from_type|import_exception!"
    r"|create_exception!|pyo3::exceptions|\bexceptions::Py\w+|loaderx\.errors"
)


def construction_sites(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if CONSTRUCTION.search(line)]


def test_the_pattern_finds_every_way_of_making_an_exception():
    made = [
        'Err(PyValueError::new_err("x"))',
        "pyo3::exceptions::PyTypeError::new_err(msg)",
        "use pyo3::exceptions::{PyBufferError, PyTypeError};",
        "PyErr::new::<PyIndexError, _>(msg)",
        "PyErr::from_value(class.call1((msg,))?)",
        "pyo3::import_exception!(loaderx.errors, OutOfRangeError);",
        'py.import("loaderx.errors")?.getattr("InvalidArgumentError")',
        "e.is_instance_of::<exceptions::PyImportError>(py)",
    ]
    for line in made:
        assert construction_sites(line) == [line], line
    for line in ('invalid_argument(format!("{x}"))', "x.py_err()?", "// the errors module"):
        assert construction_sites(line) == [], line


def test_no_exception_is_made_outside_errors_rs():
    files = sorted(SRC.glob("**/*.rs"))
    assert SRC / "errors.rs" in files and len(files) > 3
    found = {
        str(p.relative_to(SRC)): sites
        for p in files
        if p.name != "errors.rs" and (sites := construction_sites(p.read_text()))
    }
    assert found == {}
    assert construction_sites((SRC / "errors.rs").read_text())
