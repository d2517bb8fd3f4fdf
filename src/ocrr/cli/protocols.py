"""``ocrr protocols``: the registered protocols, their options and metrics."""

from __future__ import annotations

from ocrr.cli.common import add_command
from ocrr.protocols import PROTOCOLS, make_protocol
from ocrr.protocols.registry import options_of
from ocrr.specs import describe, format_value


def add_parser(sub) -> None:
    p = add_command(sub, "protocols", run, help="list registered protocols; with NAME, that protocol's options")
    p.add_argument("name", nargs="?", default=None, help="a protocol: list its options (type, allowed, default, help)")


def run(args) -> int:
    if args.name:
        protocol = make_protocol(args.name)  # an unknown name fails here, naming the close ones
        print(f"{protocol.name}: {protocol.summary_text.rstrip('.')}. Metrics: {', '.join(protocol.metrics)}.")
        print(describe(options_of(protocol.name)))
        print(f"Set as {protocol.name}:key=value, e.g. --protocol {protocol.spec()}")
        return 0
    print(
        f"{len(PROTOCOLS)} protocols. Set options as --protocol name:key=value, e.g. --protocol heldout:every=25; "
        "'ocrr protocols NAME' explains each option."
    )
    width = max(map(len, PROTOCOLS))
    for name, cls in PROTOCOLS.items():  # the registry itself: a registered protocol cannot be left out
        options = ", ".join(f"{k}={format_value(o.default)}" for k, o in options_of(cls).items())
        print()
        print(f"{name:<{width}}  {cls.summary_text}")
        print(f"{'':<{width}}  metrics: {', '.join(cls.metrics) or '(none)'}")
        print(f"{'':<{width}}  options: {options or '(none)'}")
    return 0
