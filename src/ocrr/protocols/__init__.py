"""Scenario builders: which items a system is fitted on, corrected on and evaluated on."""

from ocrr.protocols.heldout import heldout_scenario
from ocrr.protocols.scenario import Scenario

__all__ = ["Scenario", "heldout_scenario"]
