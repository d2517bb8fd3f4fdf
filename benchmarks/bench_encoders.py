"""Encoding cost of each packaged encoder: seconds per 1,000 sentences, sentences per second,
load time, and (for the quantised MiniLM) how close its vectors are to the torch model's.

Texts: the first N training texts of a dataset (default: the bundled demo set, offline).
Each encoder is loaded (timed apart), then timed on the texts, best of --repeats passes.
Threads: the process default (torch's), or --threads N for every library (``pin_threads``).

Run: python benchmarks/bench_encoders.py [--dataset demo|banking77|clinc150] [--texts 1000]
     [--repeats 3] [--threads N] [--encoders minilm minilm_int8 paraphrase_minilm_l3 glove]
(real datasets: OCRR_DATA_DIR=<folder with banking77/ and clinc150/>)
"""

from __future__ import annotations

import argparse

import numpy as np

from ocrr.data import load_dataset
from ocrr.encoders import make_encoder
from ocrr.engine.sweep.presets import PRESETS
from ocrr.studies.encoder_swap import time_encoder
from ocrr.utils.threads import pin_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--encoders", nargs="+", default=PRESETS["encoders"]["encoders"])
    args = ap.parse_args()
    if args.threads:
        pin_threads(args.threads)
    dataset = load_dataset(args.dataset)
    texts = list(dataset.train.texts or [])[: args.texts]
    print(
        f"{len(texts)} {args.dataset} texts (mean {np.mean([len(t) for t in texts]):.0f} characters), "
        f"best of {args.repeats}"
    )
    print(f"{'encoder':<22} {'dim':>4} {'load s':>7} {'s per 1k':>9} {'sent/s':>8} threads")
    for spec in args.encoders:
        row = time_encoder(spec, texts, args.repeats)
        print(
            f"{spec:<22} {row['dim']:>4} {row['load_s']:>7.2f} {row['s_per_1k']:>9.3f} "
            f"{row['sentences_per_s']:>8.0f} {row['threads']}"
        )
    if {"minilm", "minilm_int8"} <= set(args.encoders):
        sample = texts[:200]
        cos = (make_encoder("minilm").encode(sample) * make_encoder("minilm_int8").encode(sample)).sum(axis=1)
        print(f"minilm_int8 vs minilm on {len(sample)} texts: cosine min {cos.min():.4f}, mean {cos.mean():.4f}")


if __name__ == "__main__":
    main()
