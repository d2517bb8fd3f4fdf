"""``ocrr protocols``: the registered protocols, their options and metrics."""

from __future__ import annotations

from rich.table import Table

from ocrr.cli.common import console
from ocrr.protocols import PROTOCOLS, make_protocol
from ocrr.protocols.base import COMMON_OPTIONS
from ocrr.specs import describe


def add_parser(sub) -> None:
    p = sub.add_parser("protocols", help="list registered protocols; with NAME, that protocol's options")
    p.add_argument("name", nargs="?", default=None, help="a protocol: list its options (type, allowed, default, help)")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.name:
        protocol = make_protocol(args.name)  # an unknown name fails here, naming the close ones
        print(f"{protocol.name}: {protocol.summary_text.rstrip('.')}. Metrics: {', '.join(protocol.metrics)}.")
        print(describe({**protocol.options, **COMMON_OPTIONS}))
        print(f"Set as {protocol.name}:key=value, e.g. --protocol {protocol.spec()}")
        return 0
    table = Table(title="registered protocols (options as name:key=value, e.g. --protocol heldout:every=25)")
    table.add_column("name", no_wrap=True)
    table.add_column("options (default)", overflow="fold")
    table.add_column("metrics")
    table.add_column("what it is")
    for name, cls in PROTOCOLS.items():
        options = ", ".join(f"{k}={o.default}" + (f" ({o.help})" if o.help else "") for k, o in cls.options.items())
        table.add_row(name, options or "(none)", ", ".join(cls.metrics), cls.summary_text)
    console().print(table)
    return 0
