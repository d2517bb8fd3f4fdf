"""The check every append makes first: storage ends where the ledger does.

Inside the write transaction, after taking in what other writers committed, the stored tail
must be the held one: the head storage records (size and chain head) is the held head, the
stored hash of the last held entry is the held chain head, and no row sits at or past the held
size. Anything else means rows were removed, inserted or rewritten behind the ledger's back;
appending then would sign a head over a hole, or fork the log, so the append fails closed
(``LedgerIntegrityError``). Each store reads the four values with a few indexed point reads
(``StoredTail``): the cost of a group commit, not of a scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from ocrr.errors import LedgerIntegrityError

__all__ = ["StoredTail", "check_tail"]


@dataclass(frozen=True)
class StoredTail:
    """What storage says about its end, read in the write transaction."""

    size: int  # the size its head records
    chain_head: bytes  # the chain head its head records
    last_hash: bytes | None  # the stored hash of the last entry the ledger holds (None: no such row)
    top_id: int | None  # the highest entry id stored (None: no entries)


def check_tail(where: object, held: int, held_head: bytes, tail: StoredTail) -> None:
    """Raise ``LedgerIntegrityError``, naming what changed, unless storage's tail is the one
    held (``held`` entries ending in ``held_head``). ``where``: the ledger, as messages name it."""

    def changed(what: str, first_bad: int | None) -> LedgerIntegrityError:
        return LedgerIntegrityError(
            f"ledger {where}: {what}; nothing was appended. Stop the processes writing it and run "
            f"`ocrr ledger verify {where}`, then restore it from a backup",
            first_bad,
        )

    if tail.top_id is not None and tail.top_id >= held:
        raise changed(f"a row was inserted at id {tail.top_id} past the head {held}", held)
    if held and (tail.top_id is None or tail.top_id < held - 1):
        lo = 0 if tail.top_id is None else tail.top_id + 1
        raise changed(f"entries {lo}..{held - 1} were removed from storage behind this ledger's back", lo)
    if held and tail.last_hash != held_head:
        raise changed(f"entry {held - 1} in storage is not the one this ledger committed (its hash changed)", held - 1)
    if tail.size != held:
        raise changed(f"storage's head records {tail.size} entries but this ledger holds {held} (head rewritten)", None)
    if tail.chain_head != held_head:
        raise changed("the chain head storage records is not the one this ledger holds (head rewritten)", None)
