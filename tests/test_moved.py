"""Old module paths: one table (ocrr.utils.moved.MOVED) says where each went. A moved path fails
with a message naming its new home; an alias still imports, as the module that holds its names
now, with a DeprecationWarning naming it."""

import importlib
import sys
import warnings
from pathlib import Path

import pytest

import ocrr
from ocrr.utils.moved import MOVED, new_home

FAILING = sorted(old for old, home in MOVED.items() if not home.still_imports and not old.endswith(".*"))
ALIASES = sorted(old for old, home in MOVED.items() if home.still_imports and not old.endswith(".*"))


@pytest.fixture
def fresh_imports(monkeypatch):
    """Forget the old paths imported so far, so each test sees its first import (and its warning)."""
    for name in [n for n in sys.modules if n in MOVED]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.filterwarnings("ignore:ocrr.audit has moved")  # ocrr.audit.cli's package still imports
@pytest.mark.parametrize("old", FAILING)
def test_an_old_module_path_names_its_new_home(old):
    with pytest.raises(ModuleNotFoundError, match=f"{old.rsplit('.', 1)[0]}.* has moved: import (ocrr|tests)\\."):
        importlib.import_module(old)


@pytest.mark.parametrize("old", ALIASES)
def test_an_alias_imports_the_new_module_with_a_warning_naming_it(old, fresh_imports):
    home = MOVED[old].module
    with warnings.catch_warnings(record=True) as caught:  # its old package's warning too
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert f"{old} has moved: import {home} instead" in [str(w.message) for w in caught]
    new = importlib.import_module(home)
    if hasattr(new, "__path__"):  # an old package: a stand-in that has the new package's names
        assert all(getattr(module, name) is getattr(new, name) for name in new.__all__)
    else:
        assert module is new
        assert new.__spec__.name == home  # the new module keeps its own spec


def test_the_warning_points_at_the_users_import(fresh_imports):
    with pytest.warns(DeprecationWarning) as caught:
        from ocrr.audit.store import DurableLedger as old
    assert {Path(w.filename).name for w in caught} == {Path(__file__).name}
    from ocrr.ledger import DurableLedger

    assert old is DurableLedger


def test_names_from_an_old_package_are_the_new_ones(fresh_imports):
    with pytest.warns(DeprecationWarning, match="ocrr.audit has moved: import ocrr.ledger instead"):
        from ocrr.audit import Ledger as old
    from ocrr.ledger import Ledger

    assert old is Ledger


def test_an_alias_leaves_the_new_package_untouched(fresh_imports):
    import ocrr.ledger.store

    with pytest.warns(DeprecationWarning):
        importlib.import_module("ocrr.audit.store")  # is ocrr.ledger.sqlite.store, not ocrr.ledger.store
    assert ocrr.ledger.store is sys.modules["ocrr.ledger.store"]
    assert "ocrr.audit.store" not in {m.__name__ for m in vars(ocrr.ledger).values() if hasattr(m, "__spec__")}


def test_a_folder_an_old_package_left_behind_does_not_pass_for_it(tmp_path, monkeypatch, fresh_imports):
    """git leaves an old package's untracked __pycache__ folder behind: without the table coming
    first, it would import as an empty namespace package."""
    for old in ("audit", "sweep"):
        (tmp_path / old / "__pycache__").mkdir(parents=True)
    monkeypatch.setattr(ocrr, "__path__", [*ocrr.__path__, str(tmp_path)])
    with pytest.warns(DeprecationWarning, match="ocrr.audit has moved"):
        from ocrr.audit import Ledger  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="ocrr.sweep has moved"):
        importlib.import_module("ocrr.sweep")


def test_every_new_home_imports():
    for old, home in MOVED.items():
        if not old.endswith(".*"):
            importlib.import_module(home.module)


def test_no_entry_hides_a_module_that_exists():
    """An old path that is a module or package in src/ would never reach the table."""
    src = Path(ocrr.__file__).parent.parent
    for old in MOVED:
        path = src / old.replace(".*", "").replace(".", "/")
        assert not path.with_suffix(".py").exists() and not (path / "__init__.py").exists(), old


def test_old_submodules_of_a_moved_package_keep_their_names_under_the_new_one():
    with pytest.raises(ModuleNotFoundError, match="ocrr.sweep has moved: import ocrr.engine.sweep instead"):
        importlib.import_module("ocrr.sweep.grid")  # its package fails first
    assert str(new_home("ocrr.sweep.grid")) == "ocrr.engine.sweep.grid"
    assert str(new_home("ocrr.sweep.cmr_preset")) == "ocrr.studies.cmr_preset"  # its own entry comes first


def test_a_split_module_names_where_the_rest_went():
    with pytest.raises(ModuleNotFoundError, match=r"import ocrr.protocols.summary \(held-out summaries: ocrr"):
        importlib.import_module("ocrr.metrics")


def test_an_unknown_module_is_an_ordinary_import_error():
    with pytest.raises(ModuleNotFoundError, match="No module named 'ocrr.no_such_module'"):
        importlib.import_module("ocrr.no_such_module")


def test_an_unknown_submodule_of_an_old_package_is_an_ordinary_import_error(fresh_imports):
    with pytest.warns(DeprecationWarning), pytest.raises(ModuleNotFoundError, match="No module named 'ocrr.audit.x'"):
        importlib.import_module("ocrr.audit.x")


def test_public_names_keep_working():
    from ocrr.checks import check_system
    from ocrr.ledger import Ledger
    from ocrr.systems import make_system

    assert callable(ocrr.open_substrate) and callable(check_system) and callable(make_system)
    assert Ledger.open is not None
