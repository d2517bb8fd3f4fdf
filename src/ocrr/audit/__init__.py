"""Old name of ``ocrr.ledger``: ``ocrr.audit`` and ``ocrr.audit.<module>`` still import, and
are the same module objects as the ``ocrr.ledger`` modules that hold those names now (the
file's store and scan moved into the SQLite engine's subpackage; export and import of either
engine are ``ocrr.ledger.location``'s). New code imports ``ocrr.ledger``."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old module name -> the module under ocrr.ledger with its names now
_MODULES = {
    "merkle": "merkle",
    "verify": "verify",
    "heads": "heads",
    "scan": "sqlite.scan",
    "store": "sqlite.store",
    "transfer": "location",
}


class _Alias(importlib.abc.MetaPathFinder):
    """Finds ``ocrr.audit.X`` as ``ocrr.ledger.X`` (imported on first use, as before)."""

    def find_spec(self, fullname, path=None, target=None):
        prefix = __name__ + "."
        if fullname.startswith(prefix) and fullname[len(prefix) :] in _MODULES:
            return importlib.util.spec_from_loader(fullname, _AliasLoader())
        return None


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = importlib.import_module("ocrr.ledger." + _MODULES[spec.name.rsplit(".", 1)[1]])
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.append(_Alias())


def __getattr__(name: str):
    return getattr(importlib.import_module("ocrr.ledger"), name)
