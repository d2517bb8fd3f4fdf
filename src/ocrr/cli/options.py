"""The options several commands share: the dataset and encoder, the held-out shortcuts, and the
experiment they describe."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ocrr.encoders import encoder_names
from ocrr.errors import OcrrError
from ocrr.specs import parse_assignments

if TYPE_CHECKING:  # imported where used: ``ocrr run`` starts its fork server before the engine loads
    from ocrr.engine.experiment import Experiment


def add_data_options(p: argparse.ArgumentParser) -> None:
    """The dataset and encoder options of ``ocrr run`` and ``ocrr embed``."""
    p.add_argument(
        "--dataset",
        default="banking77",
        help="(default banking77) banking77 | clinc150 | leyzer:lang=es-ES | leyzer:source=en-US:target=es-ES | "
        "demo | synthetic | csv:<train>[,<test>] | jsonl:<train>[,<test>] | hf:<folder> | hf:<name>[:<config>] "
        "(Hugging Face, pip install -e '.[hf]')",
    )
    p.add_argument(
        "--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache, download)"
    )
    p.add_argument("--no-oos", action="store_true", help="CLINC150: drop the out-of-scope class")
    p.add_argument("--text-col", default=None, help="your CSV/JSONL/hf: the text column (default 'text')")
    p.add_argument("--label-col", default=None, help="your CSV/JSONL/hf: the label column (default 'label')")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=None,
        help="your CSV/JSONL without a test file: fraction held for testing (default 0.2)",
    )
    p.add_argument(
        "--data-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other loader option, e.g. synthetic's n_classes=50 dim=384 sigma=0.02",
    )
    p.add_argument(
        "--encoder",
        default=None,
        help=ENCODER_HELP,
    )


ENCODER_HELP = (
    "minilm (default, offline) | "
    + " | ".join(n for n in encoder_names() if n not in ("minilm", "st", "precomputed"))
    + " (offline, pip install -e '.[encoders]') | st:<sentence-transformers id> | precomputed:<file.npy|.npz>"
    + " (details: docs/encoders.md)"
)


def add_heldout_options(p: argparse.ArgumentParser) -> None:
    """--heldout, --eval-cap, --every: shortcuts for the held-out protocol's options (ocrr run, ocrr sweep)."""
    for flag, text in (
        ("--heldout", "held-out classes (default 10)"),
        ("--eval-cap", "cap on each eval set, 0 for none (default 400)"),
        ("--every", "checkpoint every N stream items (default 50)"),
    ):
        p.add_argument(flag, type=int, default=None, help=f"heldout protocol: {text}")


def heldout_shortcuts(args: argparse.Namespace) -> dict:
    """The values of --heldout, --eval-cap and --every, named as Experiment and resolve_grid take them."""
    return {"n_heldout": args.heldout, "eval_cap": args.eval_cap, "every": args.every}


def parse_data_options(items: list[str], example: str = "n_classes=50") -> dict:
    """``--data-option KEY=VALUE`` items -> {key: value}, values parsed as in a spec."""
    return parse_assignments(items, "--data-option", f"--data-option {example}")


def experiment_from_args(args: argparse.Namespace, **extra) -> Experiment:
    """The experiment cell that the data options (and, for ``ocrr run``, ``--systems``) describe."""
    from ocrr.engine.experiment import MAIN_SYSTEMS, Experiment
    from ocrr.engine.sweep.grid import EMBEDDING_ONLY

    options = parse_data_options(args.data_option)
    for key in ("text_col", "label_col", "test_fraction"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if args.encoder is not None and args.dataset in EMBEDDING_ONLY:
        raise OcrrError(
            f"{args.dataset} carries its own vectors, so --encoder {args.encoder} would be ignored. "
            "Drop --encoder, or use a dataset with texts (e.g. csv:FILE or jsonl:FILE)."
        )
    return Experiment(
        dataset=args.dataset,
        encoder=args.encoder or "minilm",
        data_dir=args.data_dir,
        oos=not args.no_oos,
        data_options=options,
        systems=list(getattr(args, "systems", None) or MAIN_SYSTEMS),
        **extra,
    )
