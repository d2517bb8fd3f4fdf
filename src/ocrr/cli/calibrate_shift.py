"""``ocrr calibrate-shift``: the near-future shift S* of the ocl protocol, from the blind classifier."""

from __future__ import annotations

from ocrr.cli.common import add_command
from ocrr.cli.paths import output_folder, output_path
from ocrr.data import load_dataset
from ocrr.errors import OcrrError
from ocrr.protocols import PROTOCOLS, make_protocol
from ocrr.specs import parse_spec
from ocrr.studies.calibrate_shift import calibrate_protocol, write_calibration


def add_parser(sub) -> None:
    p = add_command(
        sub,
        "calibrate-shift",
        run,
        help="choose the near-future shift S* with the blind classifier (EvalOCL)",
        description="On validation streams of the ocl protocol (labels only, no encoder): the "
        "blind classifier's near-future accuracy A(k, S) for k and S on powers of two, "
        "A*(S) = max over k, and S* = the smallest S with A*(S) <= max(majority, 1/C) "
        "+ 0.01. Prints the curve; writes blind_curve.csv, blind_shift.csv and a figure. "
        "Then run with --protocol ocl:...:shift=S*.",
    )
    p.add_argument("--dataset", default="banking77", help="dataset (as for ocrr run --dataset)")
    p.add_argument("--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache)")
    p.add_argument("--protocol", default="ocl", help="ocl spec, e.g. ocl:stay=0.9:batch=1 (split=val unless given)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="validation streams, averaged (default 0)")
    p.add_argument("--k-max", type=int, default=256, help="largest window k (default 256)")
    p.add_argument("--s-max", type=int, default=None, help="largest shift S (default half the stream)")
    p.add_argument(
        "--out", type=output_path, default=None, help="where to write the curve and figure (default: print only)"
    )


def run(args) -> int:
    if args.k_max < 1 or (args.s_max is not None and args.s_max < 0):
        raise OcrrError("calibrate-shift needs --k-max >= 1 and --s-max >= 0.")
    if any(seed < 0 for seed in args.seeds):
        raise OcrrError(
            f"--seeds must be whole numbers >= 0 (validation streams, e.g. --seeds 0 1 2), got "
            f"{' '.join(map(str, args.seeds))}."
        )
    if args.out is not None:
        output_folder(args.out)
    name, options = parse_spec(args.protocol, "protocol", "ocl:stay=0.9")
    validation = "split" not in options and "split" in getattr(PROTOCOLS.get(name), "options", {})
    protocol = make_protocol(args.protocol, **({"split": "val"} if validation else {}))
    cal = calibrate_protocol(
        load_dataset(args.dataset, data_dir=args.data_dir), protocol, args.seeds, args.k_max, args.s_max
    )
    print(
        f"{args.dataset}, {protocol.spec()}, streams {' '.join(map(str, args.seeds))}: "
        f"chance max(majority, 1/C) = {cal.chance:.4f}"
    )
    print(f"{'S':>6} {'A*(S)':>8} {'best k':>6}")
    for _, r in cal.best.iterrows():
        mark = "  <- S*" if r["shift"] == cal.shift else ""
        print(f"{int(r['shift']):>6} {r['a_star']:>8.4f} {int(r['best_k']):>6}{mark}")
    print(
        f"S* = {cal.shift}"
        if cal.shift is not None
        else f"no S up to {int(cal.best['shift'].max())} brings A*(S) to chance + {cal.tolerance}; raise --s-max"
    )
    if args.out:
        paths = write_calibration(cal, args.out, f"blind classifier: {args.dataset}, {args.protocol}")
        print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
