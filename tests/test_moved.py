"""Old module paths fail with a message naming their new home; the public names still work."""

import importlib

import pytest

import ocrr
from ocrr.utils.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_names_its_new_home(old):
    with pytest.raises(ModuleNotFoundError, match=f"{old.rsplit('.', 1)[0]}.* has moved: import (ocrr|tests)\\."):
        importlib.import_module(old)


def test_every_new_home_imports():
    for home in MOVED.values():
        importlib.import_module(home.split(" ")[0])


def test_old_submodules_of_the_sweep_package_name_the_engine():
    with pytest.raises(ModuleNotFoundError, match="import ocrr.engine.sweep instead"):
        importlib.import_module("ocrr.sweep.grid")


def test_an_unknown_module_is_an_ordinary_import_error():
    with pytest.raises(ModuleNotFoundError, match="No module named 'ocrr.no_such_module'"):
        importlib.import_module("ocrr.no_such_module")


def test_public_names_keep_working():
    from ocrr.audit.store import DurableLedger as old
    from ocrr.checks import check_system
    from ocrr.ledger import DurableLedger, Ledger
    from ocrr.systems import make_system

    assert old is DurableLedger
    assert callable(ocrr.open_substrate) and callable(check_system) and callable(make_system)
    assert Ledger.open is not None
