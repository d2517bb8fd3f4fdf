"""The rule a new label obeys at a ledger's append door.

A ledger is append-only and serves a label exactly as stored: "refund " or "refund\\n" would
be a class apart from "refund" for good, shown the same. So a label that is blank, starts or
ends with whitespace, or holds a control character is refused when it is appended (by
``/correct``, ``PersistentSubstrate.correct``, a durable ledger's ``extend``). Entries already
stored, and imports of them, are not checked: an older ledger is served as it is.
"""

from __future__ import annotations

import unicodedata

from ocrr.errors import OcrrError

__all__ = ["check_new_label", "label_fault"]


def label_fault(label: str) -> str | None:
    """Why ``label`` should not become a class name (None: it may). The ledger is append-only
    and a label is served exactly as stored: "refund " or "refund\\n" would be a class apart
    from "refund" for good, shown the same. Only new labels are checked: entries already
    stored (by an older version) are served as they are."""
    if not label.strip():
        return "is blank: a correction needs the class's name; send it"
    if label != label.strip():
        return f"starts or ends with whitespace, which would make it a class apart from {label.strip()!r}; strip it"
    # (isprintable: one pass in C, true for most labels, and false for any control character)
    control = None if label.isprintable() else next((c for c in label if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        return (
            f"holds the control character U+{ord(control):04X}, which a class name does not need and a "
            "screen does not show; remove it"
        )
    return None


def check_new_label(i: int, label: str) -> None:
    """One OcrrError naming item ``i``'s label and the fix when ``label_fault`` finds one."""
    fault = label_fault(label)
    if fault is not None:
        shown = repr(label) if len(label) <= 60 else repr(label[:60]) + "…"
        raise OcrrError(f"the label of item {i} ({shown}) {fault}")
