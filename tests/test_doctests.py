"""The runnable examples in the docstrings of the public API's entry points: each must run as
written (a failing example fails the test command, which runs this file with the others)."""

from __future__ import annotations

import doctest
import importlib

import pytest

# (module, the entry point whose docstring holds the examples)
ENTRY_POINTS = [
    ("ocrr.systems.substrate.persistent", "open_substrate"),
    ("ocrr.engine.experiment", "run_experiment"),
    ("ocrr.checks", "check_system"),
    ("ocrr.ledger.sqlite.file", "Ledger"),
    ("ocrr.ledger.verify", "verify_inclusion"),
]
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run_examples(module, name: str) -> doctest.TestResults:
    """Run the examples of ``module.name``'s own docstring in the module's namespace, as
    ``doctest.testmod`` would (not those of its methods: they are not entry points)."""
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    for test in doctest.DocTestFinder(recurse=False).find(getattr(module, name), name, module, globs=vars(module)):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("module_name, name", ENTRY_POINTS, ids=[name for _, name in ENTRY_POINTS])
def test_the_examples_in_an_entry_points_docstring_run_as_written(module_name, name):
    results = run_examples(importlib.import_module(module_name), name)
    assert results.attempted > 0, f"{module_name}.{name} has no examples"
    assert results.failed == 0, f"{results.failed} example(s) of {module_name}.{name} failed (printed above)"


def test_a_wrong_example_is_a_failure(capsys):
    module = type(importlib)("wrong_example")
    exec('def double(x):\n    """\n    >>> double(2)\n    5\n    """\n    return 2 * x\n', vars(module))
    assert run_examples(module, "double") == doctest.TestResults(failed=1, attempted=1)
    assert "Expected:\n    5\nGot:\n    4" in capsys.readouterr().out
