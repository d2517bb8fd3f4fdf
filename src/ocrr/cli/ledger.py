"""The ``ocrr ledger …`` and ``ocrr serve`` commands (wired into ocrr.cli.main by ``add_parser``).

Ledger commands take a file or a PostgreSQL URL (``postgresql://…``) alike. They read the
ledger without changing it (except ``import`` and ``migrate``,
which create one, and ``verify``, which records a checkpoint when asked to, as ``index`` does
with its key); each prints JSON on stdout so its output can be piped to the standalone verifier
or a witness. ``index`` also writes its index files (``ocrr.systems.substrate.saved_index``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ocrr.cli.paths import ledger_to_read, output_file, output_from_ledger, output_path
from ocrr.errors import OcrrError
from ocrr.ledger import migrate
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.heads import Signer, TreeHead, check_origin, check_vkey
from ocrr.ledger.location import (
    as_location,
    default_origin_of,
    display,
    export_jsonl,
    export_lines,
    import_jsonl,
    is_database_url,
    scan_location,
)
from ocrr.ledger.proofs import ConsistencyProof, InclusionProof, b64, entry_fields, unb64
from ocrr.ledger.signed_state import FixedLog, SignedState, default_state_path, recorded_origin
from ocrr.ledger.transfer import root_bytes
from ocrr.ledger.verify import (
    CannotCheck,
    ProofError,
    add_trusted_root_options,
    check_files,
    trusted_root_of,
    verify_consistency,
)
from ocrr.systems.substrate.index_build import build_index_in_blocks, builds_in_blocks, check_buildable
from ocrr.systems.substrate.persistent import open_substrate, servable
from ocrr.systems.substrate.saved_index import (
    check_saveable,
    check_trained,
    index_settings,
    statement_path,
    write_saved_index,
)

LOCATION = "the ledger file, or a postgresql://… URL (its options=-csearch_path%%3D<schema> picks the schema)"


def add_parser(sub) -> None:
    led = sub.add_parser("ledger", help="check, prove and move durable ledgers: files or PostgreSQL (ocrr ledger -h)")
    lsub = led.add_subparsers(dest="ledger_command", required=True)

    v = lsub.add_parser("verify", help="check every entry, the chain and the Merkle tree; exit 1 if damaged")
    v.add_argument("path", type=as_location, help=LOCATION)
    v.add_argument(
        "--quick",
        action="store_true",
        help="trust the entries before the last checkpoint record signed by --vkey (without it: rehash all)",
    )
    v.add_argument(
        "--vkey",
        default=None,
        help="the ledger's verifier key (as `ocrr ledger keygen` prints it), or a file holding it: checkpoint "
        "records it signs are checked against the entries (and let --quick skip rehashing); others are ignored",
    )
    v.add_argument(
        "--expect-size",
        type=_entry_count,
        default=None,
        help="the size of a head you hold: also prove the file still extends it (catches truncation); "
        "with --expect-root",
    )
    v.add_argument(
        "--expect-root", default=None, help="root of that head (base64, or 64 hex digits); with --expect-size"
    )
    v.set_defaults(handler=_cmd_verify)

    h = lsub.add_parser("head", help="print the tree head (size, root, chain head); signed with --key")
    h.add_argument("path", type=as_location, help=LOCATION)
    _key_options(h)
    h.add_argument("--checkpoint", action="store_true", help="print only the signed C2SP checkpoint note")
    h.set_defaults(handler=_cmd_head)

    p = lsub.add_parser(
        "prove", help="inclusion proof of one entry (check it with `ocrr ledger check` or ocrr/ledger/verify.py)"
    )
    p.add_argument("path", type=as_location, help=LOCATION)
    p.add_argument("--entry", type=int, required=True, help="entry id")
    p.add_argument("--size", type=int, default=None, help="size of the log to prove against (default: all)")
    p.set_defaults(handler=_cmd_prove)

    c = lsub.add_parser("consistency", help="consistency proof: the log of size --from is a prefix of --to")
    c.add_argument("path", type=as_location, help=LOCATION)
    c.add_argument("--from", dest="size1", type=int, required=True)
    c.add_argument("--to", dest="size2", type=int, default=None, help="default: the current size")
    c.set_defaults(handler=_cmd_consistency)

    chk = lsub.add_parser(
        "check",
        help="check a proof document (inclusion or consistency) against a root you trust; exit 1 if it fails",
    )
    chk.add_argument("kind", choices=("inclusion", "consistency"))
    chk.add_argument("proof", help="the proof JSON (from `ocrr ledger prove` / `consistency`, or the service)")
    add_trusted_root_options(chk)
    chk.set_defaults(handler=_cmd_check)

    e = lsub.add_parser("export", help="write the ledger as JSONL (vectors as base64 little-endian float32)")
    e.add_argument("path", type=as_location, help=LOCATION)
    e.add_argument("--out", type=output_path, default=None, help="output file (default: stdout)")
    e.set_defaults(handler=_cmd_export)

    i = lsub.add_parser("import", help="create a durable ledger from a JSONL export, checked hash for hash")
    i.add_argument("jsonl", type=Path)
    i.add_argument(
        "path",
        type=as_location,
        help="the new ledger file (must not exist; built beside it, then moved in), or a postgresql:// URL "
        "of an empty schema (loaded in one transaction)",
    )
    i.add_argument(
        "--expect-size", type=_entry_count, default=None, help="refuse unless the imported log has this many entries"
    )
    i.add_argument(
        "--expect-root",
        default=None,
        help="refuse unless its Merkle root is this one (hex or base64, as `head` prints)",
    )
    i.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a signed C2SP checkpoint (the note of `ocrr ledger head --checkpoint`, or the JSON of /head): "
        "refuse unless the imported log is the one it signs",
    )
    i.add_argument(
        "--verifier-key",
        default=None,
        help="the checkpoint's verifier key (printed by `ocrr ledger keygen`), or a file",
    )
    i.set_defaults(handler=_cmd_import)

    m = lsub.add_parser(
        "migrate",
        help="copy a ledger file into a new file of the current format (converting one of the old format), "
        "checked entry by entry",
    )
    m.add_argument("old", type=Path, help="the ledger file to convert (left as it is)")
    m.add_argument("new", type=Path, help="the new ledger file (must not exist)")
    m.set_defaults(handler=_cmd_migrate)

    x = lsub.add_parser(
        "index",
        help="build an IVF index over the checked ledger, save it and sign a statement binding it to the ledger "
        "(`ocrr serve --index-file` opens it instead of training)",
    )
    x.add_argument("path", type=as_location, help=LOCATION)
    x.add_argument(
        "--system",
        required=True,
        help="the substrate spec the service will serve, with an IVF index, e.g. substrate:index=ivf_pq:nprobe=32",
    )
    _key_options(x)
    x.add_argument(
        "--out", type=output_path, default=None, help="the index file (default: <ledger>.ivf beside a ledger file)"
    )
    x.add_argument(
        "--quick",
        action="store_true",
        help="trust the entries before the ledger's last checkpoint record (signed by --key)",
    )
    x.set_defaults(handler=_cmd_index)

    k = lsub.add_parser("keygen", help="create an Ed25519 signing key for heads; print its verifier key")
    k.add_argument("key", type=Path, help="where to write the private key (PEM, mode 600)")
    k.add_argument(
        "--origin",
        required=True,
        help="the log's name, e.g. example.com/my-ledger: the key signs under it only (its record of signed "
        "heads, <key>.signed, made now beside it, names it)",
    )
    k.set_defaults(handler=_cmd_keygen)


def _key_options(parser) -> None:
    parser.add_argument("--key", type=Path, default=None, help="Ed25519 private key (from `ocrr ledger keygen`)")
    parser.add_argument(
        "--origin",
        type=_origin,
        default=None,
        help="the log's name (default: the one the key was made for, as its record of signed heads names it; "
        "for a key without one, ocrr.invalid/<file name>)",
    )
    parser.add_argument(
        "--signed-state",
        type=Path,
        default=None,
        metavar="PATH",
        help="the record of the last head --key signed, shared with `ocrr serve` (default <key>.signed): "
        "a head that does not extend it is refused",
    )


def _entry_count(value: str) -> int:
    """A number of entries given on the command line (argparse ``type=``): a whole number, 0 or more."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of entries: give a whole number, 0 or more")
    return n


def _origin(value: str) -> str:
    """--origin (argparse ``type=``): a log name, never empty (an empty one signed as the default)."""
    try:
        return check_origin(value)
    except OcrrError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a log name: give one such as example.com/my-ledger (printable ASCII, no spaces "
            "or '+'), or drop --origin to sign as ocrr.invalid/<ledger file name>"
        ) from None


def _print(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _scan(path: Path | str, quick: bool = False, rows: bool = True):
    ledger_to_read(path)
    report, scan = scan_location(path, "checkpoint" if quick else "full", rows=rows)
    if not report:
        raise _damaged(path, report)
    return report, scan


def _damaged(path: Path | str, report) -> OcrrError:
    where = "" if report.first_bad is None else f" at entry {report.first_bad}"
    shown = display(path)
    return OcrrError(f"ledger {shown} is damaged{where}: {report.reason}; run `ocrr ledger verify {shown}`")


def _cmd_verify(args) -> int:
    if (args.expect_size is None) != (args.expect_root is None):
        raise OcrrError(
            "--expect-root and --expect-size go together: the root and size of the head you hold "
            "(as `ocrr ledger head` prints them); give both, or neither"
        )
    old_root = root_bytes(args.expect_root)  # a malformed root is refused before the file is read
    ledger_to_read(args.path)
    vkeys = () if args.vkey is None else (check_vkey(_read_vkey(args.vkey, "--vkey")),)
    if args.quick and not vkeys:
        print(
            "--quick without --vkey: no checkpoint record can be authenticated, so every entry is rehashed",
            file=sys.stderr,
        )
    report, scan = scan_location(args.path, "checkpoint" if args.quick else "full", vkeys, rows=False)
    out = report.to_dict()
    if report and args.expect_size is not None:
        assert scan is not None and old_root is not None  # an intact report comes with its scan
        try:
            if args.expect_size > report.size:
                raise ProofError(
                    f"the file holds {report.size} entries, fewer than the {args.expect_size} "
                    "of the head you hold: entries were removed"
                )
            verify_consistency(
                args.expect_size, report.size, scan.tree.consistency_proof(args.expect_size), old_root, scan.tree.root()
            )
            out["extends_held_head"] = True
        except (ProofError, ValueError, IndexError) as e:
            out.update(ok=False, extends_held_head=False, reason=f"does not extend the head you hold: {e}")
    _print(out)
    return 0 if out["ok"] else 1


def _head(report, scan, args, signer: Signer | None):
    head = TreeHead.now(report.size, unb64(report.root), unb64(report.chain_head))
    if signer is None:
        if args.signed_state is not None:
            raise OcrrError("--signed-state records what --key signs: give --key too, or drop --signed-state")
        return head.to_dict(), None
    held = FixedLog(scan.tree)  # signed only if it extends what this key signed before
    state = SignedState.open(signer, args.signed_state or default_state_path(args.key), held, log=_to_stderr)
    try:
        signed = state.sign_head(head, held)
    finally:
        state.close()
    return signed, signed["checkpoint"]


def _signer(args, location: Path | str) -> Signer:
    """--key under the origin it signs for: the one its record of signed heads names (the
    record --signed-state gives, else the one `ocrr ledger keygen` started beside the key),
    which --origin may repeat but not change; a key with no record signs under --origin, or
    the ledger's default name."""
    signer = Signer.load(args.key, args.origin or default_origin_of(location))
    own = default_state_path(args.key)
    for record in dict.fromkeys((args.signed_state or own, own)):  # (each once)
        made_for = recorded_origin(signer, record)
        if made_for is None:
            continue
        if args.origin is not None and args.origin != made_for:
            raise OcrrError(
                f"--origin {args.origin} is not the log the key {args.key} signs for: its record of signed heads "
                f"{record} names {made_for}; drop --origin, or make a key for {args.origin} with "
                f"`ocrr ledger keygen NEW.pem --origin {args.origin}`"
            )
        return signer if made_for == signer.origin else Signer.load(args.key, made_for)
    return signer


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _cmd_head(args) -> int:
    signer = None if args.key is None else _signer(args, args.path)  # a wrong key or origin before the read
    report, scan = _scan(args.path, rows=False)
    head, note = _head(report, scan, args, signer)
    if args.checkpoint:
        if note is None:
            raise OcrrError("a checkpoint must be signed: pass --key (create one with `ocrr ledger keygen`)")
        sys.stdout.write(note)
    else:
        _print(head)
    return 0


def _cmd_index(args) -> int:
    """Train the IVF index as the service would at open, save it, sign the statement (through the
    record of signed heads: a ledger that does not extend what the key signed is refused). A
    ledger file is read a block of rows at a time (``ocrr.systems.substrate.index_build``); a
    database, or an index that tunes itself over every row, is built in an opened substrate."""
    if args.key is None:
        raise OcrrError("ocrr ledger index signs what it builds: give --key (the ledger's key, as `ocrr serve` uses)")
    if args.out is None and is_database_url(args.path):
        raise OcrrError("a ledger in a database has no folder to save beside: give --out FILE")
    ledger_to_read(args.path)
    default_out = "index.ivf" if is_database_url(args.path) else f"{args.path}.ivf"
    out = output_from_ledger(
        args.out if args.out is not None else Path(default_out), args.path, "the index", default_out
    )
    signer = _signer(args, args.path)
    system = servable(args.system)  # what `ocrr serve` refuses is refused here, in its words
    check_saveable(system, "ocrr ledger index")  # before minutes of reading and training
    started = time.perf_counter()
    verify = "checkpoint" if args.quick else "full"
    state_path = args.signed_state or default_state_path(args.key)
    if builds_in_blocks(args.path, system):
        report, scan = scan_location(args.path, verify, (signer.vkey,), rows=False)
        if not report or scan is None:
            raise _damaged(args.path, report)
        size, dim = report.size, scan.dim
        if not size or dim is None:
            raise OcrrError("the ledger is empty: there is nothing to index yet")
        check_buildable(system, dim, size)
        head = TreeHead.now(size, unb64(report.root), unb64(report.chain_head))
        signed = _sign(signer, state_path, head, FixedLog(scan.tree))  # before the build: a true head at N
        checked = scan.hashes
        del scan  # the tree: the build needs only the checked chain
        index: Any = build_index_in_blocks(args.path, system, dim, checked, progress=_to_stderr)
        built = time.perf_counter() - started
        check_trained(index, size)
        statement = write_saved_index(index, out, index_settings(system, dim), size, head.root, signer)
    else:
        with open_substrate(args.path, system, verify=verify, signer=signer) as sub:
            built = time.perf_counter() - started
            ledger, index = sub.ledger, sub.system.index_
            with ledger.lock.read():  # the entries the index holds (others' commits come in only on a refresh)
                size = 0 if index is None else len(index)
                check_trained(index, size)  # before anything is signed
                head = TreeHead.now(size, ledger.root(size), ledger.entry_hash(size - 1))
            signed = _sign(signer, state_path, head, ledger)
            with ledger.lock.read():
                settings = index_settings(system, ledger.dim)
                statement = write_saved_index(index, out, settings, size, head.root, signer)
    _print(
        {
            "index": str(out),
            "statement": str(statement_path(out)),
            "size": size,
            "root": signed["root"],
            "checkpoint": signed["checkpoint"],
            "settings": statement.settings,
            "nlist": int(getattr(index, "nlist", 0)),
            "build_seconds": round(built, 1),
        }
    )
    return 0


def _sign(signer: Signer, state_path: Path, head: TreeHead, held) -> dict:
    """Sign ``head`` through the record of signed heads (refused unless it extends what the key signed)."""
    state = SignedState.open(signer, state_path, held, log=_to_stderr)
    try:
        return state.sign_head(head, held)
    finally:
        state.close()


def _cmd_prove(args) -> int:
    report, scan = _scan(args.path)
    size = report.size if args.size is None else args.size
    if not 0 <= args.entry < size <= report.size:
        raise OcrrError(
            f"need 0 <= --entry < --size <= {report.size} (the log's size); got entry {args.entry}, size {size}"
        )
    i = args.entry
    vector, prev = scan.vectors[i].astype("<f4").tobytes(), scan.hashes[i - 1] if i else GENESIS
    entry = {**entry_fields(i, scan.labels[i], scan.texts[i], vector, prev), "hash": b64(scan.hashes[i])}
    _print({**InclusionProof.of(scan.tree, i, size).to_dict(), "entry": entry})
    return 0


def _cmd_consistency(args) -> int:
    report, scan = _scan(args.path, rows=False)
    size2 = report.size if args.size2 is None else args.size2
    if not 0 < args.size1 <= size2 <= report.size:
        raise OcrrError(f"need 0 < --from <= --to <= {report.size} (the log's size); got {args.size1} and {size2}")
    _print(ConsistencyProof.of(scan.tree, args.size1, size2).to_dict())
    return 0


def _cmd_check(args) -> int:
    """The standalone verifier's check (ocrr/ledger/verify.py), its answer as JSON."""
    try:
        trusted = trusted_root_of(args)
        check_files(args.kind, args.proof, trusted, args.consistency)
    except CannotCheck as e:
        raise OcrrError(str(e)) from None
    except (ProofError, KeyError, ValueError, TypeError) as e:
        _print({"ok": False, "reason": str(e)})
        return 1
    _print({"ok": True, "kind": args.kind, "trusted_size": trusted[0], "trusted_root": b64(trusted[1])})
    return 0


def _cmd_export(args) -> int:
    ledger_to_read(args.path)
    if args.out is not None:
        output_from_ledger(args.out, args.path, "the export", _export_example(args.path))
    if args.out is None:
        for line in export_lines(args.path):
            sys.stdout.write(line)
    else:
        n = export_jsonl(args.path, args.out)
        print(f"wrote {n} entries to {args.out}", file=sys.stderr)
    return 0


def _export_example(location: Path | str) -> str:
    """An output path to suggest for the export of the ledger at ``location``."""
    if is_database_url(location):
        return "ledger.jsonl"
    path = Path(location)
    return str(path.with_suffix(".jsonl") if path.suffix != ".jsonl" else Path(f"{path}.jsonl"))


def _cmd_import(args) -> int:
    note = None if args.checkpoint is None else _read_checkpoint(args.checkpoint)
    vkey = None if args.verifier_key is None else _read_vkey(args.verifier_key)
    with import_jsonl(
        args.jsonl,
        args.path,
        expect_size=args.expect_size,
        expect_root=args.expect_root,
        checkpoint=note,
        verifier_key=vkey,
    ) as ledger:
        _print(
            {
                "path": display(args.path),
                "size": len(ledger),
                "root": b64(ledger.root()),
                "chain_head": b64(ledger.chain_head),
            }
        )
    return 0


def _read_checkpoint(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise OcrrError(
            f"cannot read the checkpoint {path} ({e}); pass the note `ocrr ledger head --key K --checkpoint` prints"
        ) from e
    if text.lstrip().startswith("{"):  # the JSON of /head or `ocrr ledger head --key`: its checkpoint field
        try:
            note = json.loads(text)["checkpoint"]
            if isinstance(note, str):
                return note
        except (ValueError, KeyError, TypeError):
            pass
        raise OcrrError(f'{path} is JSON without a "checkpoint" note; pass a signed head (with --key) or its note')
    return text


def _read_vkey(value: str, option: str = "--verifier-key") -> str:
    if "+" in value:
        return value.strip()
    try:
        return Path(value).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise OcrrError(
            f"{option} {value!r} is neither a verifier key (name+id+key, as `ocrr ledger keygen` prints) "
            f"nor a readable file holding one ({e})"
        ) from e


def _cmd_migrate(args) -> int:
    ledger_to_read(args.old)
    _print({"path": str(args.new), **migrate(args.old, args.new).to_dict()})
    return 0


def _cmd_keygen(args) -> int:
    if args.key.exists():
        raise OcrrError(f"{args.key} already exists; choose another path (keys are never overwritten)")
    output_file(args.key, None)
    record = default_state_path(args.key)
    if record.exists():  # an earlier key's: the new key's record would be refused as foreign
        raise OcrrError(
            f"{record} is the record of what an earlier key at {args.key} signed; move it aside (keep it while "
            "heads that key signed matter), or choose another path for the new key"
        )
    signer = Signer.generate(args.origin)
    signer.save(args.key)
    try:  # the key file holds no origin: its record names it, for the commands given no --origin
        SignedState.start(signer, record)
    except BaseException:
        for made in (args.key, record):  # no key without its record: nothing left, run keygen again
            made.unlink(missing_ok=True)
        raise
    print(signer.vkey)
    return 0
