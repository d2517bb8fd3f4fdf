"""``ocrr embed``: encode a dataset once, so later runs read the embedding cache."""

from __future__ import annotations

from ocrr.cli.common import add_command, console, print_hint
from ocrr.cli.hints import data_hints
from ocrr.cli.options import add_data_options, experiment_from_args
from ocrr.cli.progress import RunProgress
from ocrr.data.locate import checked_cache_root
from ocrr.encoders import embed_dataset
from ocrr.engine.experiment import load_experiment_dataset


def add_parser(sub) -> None:
    p = add_command(sub, "embed", run, help="encode a dataset and fill the embedding cache")
    add_data_options(p)


def run(args) -> int:
    checked_cache_root()  # where the embeddings go: a cache folder that is a file stops here
    screen = console()
    exp = experiment_from_args(args)
    for hint in data_hints([args.dataset], args.no_oos, args.test_fraction):
        print_hint(hint)
    dataset = load_experiment_dataset(exp)
    with RunProgress(screen, quiet=False) as progress:
        emb = embed_dataset(dataset, exp.encoder, progress=progress.embedding)
    screen.print(
        f"{dataset.name}: {len(emb.train)} train + {len(emb.test)} test vectors of dimension "
        f"{emb.train.shape[1]} from {emb.encoder_id} ({emb.source}); sha256 {emb.sha256[:16]}…"
    )
    return 0
