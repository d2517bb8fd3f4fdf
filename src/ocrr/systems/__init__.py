"""Systems under test: the System base class, the registry, and one module per family."""

from ocrr.batch import Batch
from ocrr.systems import catalog as _catalog  # noqa: F401  (registers the built-in systems)
from ocrr.systems.base import Footprint, System
from ocrr.systems.registry import REGISTRY, expand_systems, make_system, parse_spec

__all__ = ["Batch", "Footprint", "System", "REGISTRY", "expand_systems", "make_system", "parse_spec"]
