"""``precomputed:<file>``: vectors the user made elsewhere, checked against the dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ocrr.data.records import Dataset
from ocrr.errors import OcrrError

NUMERIC_KINDS = "biuf"  # numpy dtype kinds of booleans, integers and floats: cast to float32 as they are


def precomputed_file(file: str) -> Path:
    """The file of ``precomputed:<file>``, which must exist (checked at the door too: a sweep's
    dry run refuses what its run would)."""
    path = Path(file).expanduser()
    if not path.exists():
        raise OcrrError(f"precomputed embeddings file {str(path)!r} not found. Give the path of a .npy or .npz.")
    return path


def read_precomputed(dataset: Dataset, file: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(train vectors, test vectors, encoder id) from a .npy or .npz, or the error naming the fix."""
    path = precomputed_file(file)
    n_train, n_test = len(dataset.train), len(dataset.test)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise OcrrError(
            f"cannot read {str(path)!r} as numpy data ({err}). Save it with numpy.save or numpy.savez."
        ) from None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        if not {"train", "test"} <= set(loaded.files):
            raise OcrrError(f"{str(path)!r} must hold arrays named 'train' and 'test'; it has {loaded.files}.")
        train, test = loaded["train"], loaded["test"]
    else:
        if loaded.ndim != 2 or loaded.shape[0] != n_train + n_test:
            raise OcrrError(
                f"{str(path)!r} has shape {loaded.shape}; {dataset.name} needs ({n_train + n_test}, d): "
                f"{n_train} train rows then {n_test} test rows, in the dataset's order."
            )
        train, test = loaded[:n_train], loaded[n_train:]
    for name, arr, n in (("train", train, n_train), ("test", test, n_test)):
        if arr.ndim != 2 or arr.shape[0] != n:
            raise OcrrError(f"{str(path)!r}: '{name}' has shape {arr.shape}; expected ({n}, d).")
        # Real numbers only: strings cannot be checked or normalised, and complex values or dates
        # would be cast to float32 silently (the imaginary parts dropped, dates as counts).
        if arr.dtype.kind not in NUMERIC_KINDS:
            raise OcrrError(
                f"{str(path)!r}: '{name}' holds {arr.dtype} values, not real numbers. Save the vectors as "
                "floats, e.g. numpy.save(path, vectors.astype('float32'))."
            )
        if not np.all(np.isfinite(arr)):
            raise OcrrError(f"{str(path)!r}: '{name}' contains NaN or infinite values. Re-export the embeddings.")
    return train, test, f"precomputed:{path.name}"
