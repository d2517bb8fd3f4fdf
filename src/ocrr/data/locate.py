"""Find a public dataset's files: a data folder, the user cache, or a download.

Look-up order, first hit wins:

1. the ``data_dir`` argument (the CLI's ``--data-dir``);
2. the ``OCRR_DATA_DIR`` environment variable;
3. the user cache: ``$OCRR_CACHE_DIR/data``, else ``$XDG_CACHE_HOME/ocrr/data``,
   else ``~/.cache/ocrr/data``;
4. a download from upstream into the user cache (not when ``OCRR_OFFLINE=1``).

A folder may hold the files as ``<dir>/<dataset>/<file>`` or ``<dir>/<file>``;
all of a dataset's files must sit in the same place. A folder that lacks the
dataset is passed over (one folder may hold only some datasets), but a folder
that does not exist at all is an error: it is almost always a typo.

Downloads are checked against known sha256 values before they enter the cache.
Files found locally are not checked strictly (users may hold another revision),
but their sha256 is returned so a run can record exactly what it read.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ocrr.errors import OcrrError
from ocrr.utils.paths import cache_root, cache_root_problem

DOWNLOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RemoteFile:
    url: str
    sha256: str


# Known upstream copies and the sha256 of each file at these revisions
# (PolyAI-LDN/task-specific-datasets @ 57ec275d, clinc/oos-eval @ 828f8093,
# cartesinus/leyzer @ 615ccf13: a pinned commit, so its files cannot change under us).
REMOTE_FILES: dict[str, dict[str, RemoteFile]] = {
    "banking77": {
        "train.csv": RemoteFile(
            "https://raw.githubusercontent.com/PolyAI-LDN/task-specific-datasets/master/banking_data/train.csv",
            "b06e26ac675513959a63135f11b94ea7786ed02da65db93a5650d8838cbc664b",
        ),
        "test.csv": RemoteFile(
            "https://raw.githubusercontent.com/PolyAI-LDN/task-specific-datasets/master/banking_data/test.csv",
            "d12d6e3bc4c3103966ae786dc435913c0c563dfa328f5a3646d0e62cfeeb474d",
        ),
    },
    "clinc150": {
        "data_oos_plus.json": RemoteFile(
            "https://raw.githubusercontent.com/clinc/oos-eval/master/data/data_oos_plus.json",
            "bfcca9ae515623541dc1983c94c4ed7cae9d26b42ae47d74b972e51bb6f7a21f",
        ),
        "domains.json": RemoteFile(
            "https://raw.githubusercontent.com/clinc/oos-eval/master/data/domains.json",
            "b947b579d3b8e74b06f93b01083d8efaff2888b43a3e362533bd88a6e1211b3a",
        ),
    },
    # train and test of every language (the dev files are not used)
    "leyzer": {
        f"leyzer-{split}-{language}-0.1.0.tsv": RemoteFile(
            "https://raw.githubusercontent.com/cartesinus/leyzer/615ccf1398c7e32b49e089d45da824d01179c50d/"
            f"corpora/0.1.0/leyzer-{split}-{language}-0.1.0.tsv",
            sha256,
        )
        for (split, language), sha256 in {
            ("train", "en-US"): "a6e63e1c69eced750ebe1c1e3cbeb3d14a445cf5571377cbba32861da9ecd7f7",
            ("test", "en-US"): "15c82f8117d8406e41fb3c78a9cbbeb470453827289c7520eff78bd810e77519",
            ("train", "es-ES"): "9839c7300763d482a2647f5b4ec6bb76720cb32216fa131f0173e5e53001fbe6",
            ("test", "es-ES"): "b62c8ca92b4ccd598f9a0fe5ca1f20d7a8f83ddd71cd04ebd004de8ef8bd97d1",
            ("train", "pl-PL"): "55a93e61986e8cefc30a951904cb7da06e29fdc70a800d2f9bfd1eadf91e6b9f",
            ("test", "pl-PL"): "1ca648c3aeca3f47897633796b1408e515079554cc54d6853813822571a37e67",
        }.items()
    },
}


@dataclass(frozen=True)
class Located:
    """Where a dataset's files were found.

    ``paths`` and ``sha256`` are keyed by file name (e.g. ``"train.csv"``).
    ``source`` is one of ``"data_dir"``, ``"OCRR_DATA_DIR"``, ``"cache"``,
    ``"download"``.
    """

    dataset: str
    paths: dict[str, Path]
    sha256: dict[str, str]
    source: str


def fetch(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest``. Tests replace this to stay off the network."""
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
        with open(dest, "wb") as out:
            shutil.copyfileobj(response, out)


def checked_cache_root() -> Path:
    """The user cache folder (``ocrr.utils.paths.cache_root``: $OCRR_CACHE_DIR, else
    $XDG_CACHE_HOME/ocrr, else ~/.cache/ocrr; not created here), or an OcrrError naming the
    fix when it is, or lies under, a file: a command checks it at the door, before any work."""
    problem = cache_root_problem()
    if problem:
        raise OcrrError(problem)
    return cache_root()


def cache_dir() -> Path:
    """The user cache folder for dataset files (not created here): ``checked_cache_root() / "data"``."""
    return checked_cache_root() / "data"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate(dataset: str, data_dir: str | os.PathLike | None = None) -> Located:
    """Find (or download) every file of a known dataset; see the module doc."""
    remote = REMOTE_FILES[dataset]
    names = list(remote)

    for source, folder in _data_folders(data_dir):
        paths = _find_in(Path(folder).expanduser(), dataset, names)
        if paths:
            return _located(dataset, paths, source)

    cached = cache_dir() / dataset
    paths = _find_in(cached, dataset, names)
    if paths:
        return _located(dataset, paths, "cache")

    _download(dataset, remote, cached, data_dir)
    return _located(dataset, {name: cached / name for name in names}, "download")


def _data_folders(data_dir: str | os.PathLike | None) -> list[tuple[str, str]]:
    folders = []
    if data_dir is not None:
        folders.append(("data_dir", os.fspath(data_dir)))
    if os.environ.get("OCRR_DATA_DIR"):
        folders.append(("OCRR_DATA_DIR", os.environ["OCRR_DATA_DIR"]))
    for source, folder in folders:
        path = Path(folder).expanduser()
        if not path.is_dir():
            option = "--data-dir" if source == "data_dir" else "OCRR_DATA_DIR"
            what, fix = (
                ("is a file, not a folder", "Give the folder that holds the dataset files")
                if path.exists()
                else ("does not exist", "Fix the path")
            )
            raise OcrrError(
                f"The data folder given by {option} {what}: {folder}. "
                f"{fix}, or leave {option} unset to use the cache or a download."
            )
    return folders


def check_located(dataset: str, data_dir: str | os.PathLike | None = None) -> None:
    """What ``locate`` would refuse before it reads or downloads anything: a data folder that is
    not one, or files found nowhere when downloads are off (a dry run refuses what its run would)."""
    remote = REMOTE_FILES[dataset]
    names = list(remote)
    cached = cache_dir() / dataset
    places = [Path(folder).expanduser() for _, folder in _data_folders(data_dir)] + [cached]
    if not any(_find_in(place, dataset, names) for place in places) and offline():
        missing = {name: f for name, f in remote.items() if not (cached / name).is_file()}
        raise _unavailable(dataset, missing, "downloads are disabled by OCRR_OFFLINE=1", data_dir)


def _find_in(folder: Path, dataset: str, names: list[str]) -> dict[str, Path] | None:
    """All files in ``folder/dataset/`` or all in ``folder/``; else None."""
    for place in (folder / dataset, folder):
        if all((place / name).is_file() for name in names):
            return {name: place / name for name in names}
    return None


def _located(dataset: str, paths: dict[str, Path], source: str) -> Located:
    sha = {name: sha256_of(path) for name, path in paths.items()}
    return Located(dataset=dataset, paths=paths, sha256=sha, source=source)


def _download(
    dataset: str,
    remote: dict[str, RemoteFile],
    cached: Path,
    data_dir: str | os.PathLike | None,
) -> None:
    """Fetch the files missing from the cache, each verified before it lands."""
    missing = {name: f for name, f in remote.items() if not (cached / name).is_file()}
    if offline():
        raise _unavailable(dataset, missing, "downloads are disabled by OCRR_OFFLINE=1", data_dir)
    cached.mkdir(parents=True, exist_ok=True)
    for name, file in missing.items():
        # A temp file in the same folder, so os.replace is atomic and a failed
        # or bad download never leaves a file the cache look-up would accept.
        fd, tmp_name = tempfile.mkstemp(dir=cached, prefix=f".{name}.", suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            # URLError, HTTPError and timeouts are OSErrors; a cut-off body is an HTTPException.
            try:
                fetch(file.url, tmp)
            except (OSError, http.client.HTTPException) as error:
                raise _unavailable(dataset, missing, f"{type(error).__name__}: {error}", data_dir) from error
            got = sha256_of(tmp)
            if got != file.sha256:
                raise OcrrError(
                    f"Downloaded {file.url} but its sha256 is {got}, expected {file.sha256}; "
                    f"nothing was saved to the cache. The upstream file may have changed: "
                    f"get a copy yourself and pass --data-dir DIR or set OCRR_DATA_DIR=DIR "
                    f"(files as DIR/{dataset}/{name})."
                )
            os.replace(tmp, cached / name)
        finally:
            tmp.unlink(missing_ok=True)


_OFFLINE_ON, _OFFLINE_OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def offline() -> bool:
    """Whether ``OCRR_OFFLINE`` turns downloads off; a value that is neither on nor off is
    refused (read as "online", a typo would download what the user meant to keep out)."""
    value = os.environ.get("OCRR_OFFLINE", "").strip().lower()
    if value not in _OFFLINE_ON + _OFFLINE_OFF:
        raise OcrrError(
            f"OCRR_OFFLINE={os.environ['OCRR_OFFLINE']!r} is neither on nor off: set it to 1 to keep ocrr from "
            "downloading, or unset it (or 0) to let it"
        )
    return value in _OFFLINE_ON


def _unavailable(
    dataset: str,
    missing: dict[str, RemoteFile],
    reason: str,
    data_dir: str | os.PathLike | None,
) -> OcrrError:
    names = list(REMOTE_FILES[dataset])
    urls = "\n".join(f"  {f.url}" for f in missing.values())
    searched = [f"--data-dir {os.fspath(data_dir)}" if data_dir is not None else "--data-dir (not given)"]
    env = os.environ.get("OCRR_DATA_DIR")
    searched.append(f"OCRR_DATA_DIR={env}" if env else "OCRR_DATA_DIR (not set)")
    cached = cache_dir() / dataset
    searched.append(f"cache {cached}")
    layout = ", ".join(f"DIR/{dataset}/{name}" for name in names)
    return OcrrError(
        f"The {dataset} files were not found and could not be downloaded ({reason}).\n"
        f"Searched: {'; '.join(searched)}.\n"
        f"Download URLs:\n{urls}\n"
        f"Fix: download those files and either pass --data-dir DIR or set OCRR_DATA_DIR=DIR, "
        f"with the files as {layout} (or directly in DIR); "
        f"or put them in the cache at {cached}/; or run again with network access "
        f"(and OCRR_OFFLINE unset) to download them into the cache."
    )
