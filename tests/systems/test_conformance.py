"""Conformance: every registered system passes ocrr.checks (one test per system and check).

The systems are those in the registry at collection time, so a system another module
registers is covered without touching this file. A system whose construction or fit needs
an optional extra that is not installed is skipped, saying which. What each check asserts,
and the capabilities that choose them (``learns``, ``reads_text``), are in ocrr.checks.
"""

from __future__ import annotations

from ocrr.checks import parametrize_with_checks
from ocrr.systems.registry import registered_names


@parametrize_with_checks(registered_names())
def test_registered_system(system, check):
    check(system)
