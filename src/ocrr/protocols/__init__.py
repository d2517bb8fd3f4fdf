"""Protocols: what a run streams and evaluates. One module per protocol, plus a registry line."""

from ocrr.protocols.base import Option, Protocol, RunSoFar
from ocrr.protocols.heldout import HeldoutProtocol, heldout_scenario
from ocrr.protocols.registry import PROTOCOLS, make_protocol, register_protocol
from ocrr.protocols.scenario import Scenario

__all__ = [
    "Option",
    "PROTOCOLS",
    "HeldoutProtocol",
    "Protocol",
    "RunSoFar",
    "Scenario",
    "heldout_scenario",
    "make_protocol",
    "register_protocol",
]
