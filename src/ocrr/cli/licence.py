"""The licence banner: a dataset whose licence restricts use (Leyzer: CC BY-NC-ND 4.0) is
named, with its terms, before ``ocrr run`` or ``ocrr sweep`` starts on it."""

from __future__ import annotations

from rich.markup import escape
from rich.panel import Panel

from ocrr.data import licence_terms
from ocrr.specs import spec_name


def licence_banners(screen, datasets: list[str]) -> None:
    """One panel per dataset family with licence terms (once each, however many variants)."""
    shown = set()
    for dataset in datasets:
        name, terms = spec_name(dataset), licence_terms(dataset)
        if terms and name not in shown:
            shown.add(name)
            screen.print(Panel(escape(terms), title=f"[bold]{escape(name)}: licence[/]", border_style="yellow"))
