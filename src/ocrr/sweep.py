"""Grids of runs: expand a grid into tasks, skip the finished ones, execute the rest, consolidate.

A *task* is one run: (dataset + loader options, encoder, protocol options, policy, seed,
system spec with its hyperparameter overrides). Its id is the sha256 of its canonical
JSON, so the same configuration always has the same id, in any process, on any machine.

Layout of a sweep folder ``OUT``::

    OUT/tasks/<task_id>.parquet     one finished run: one row per checkpoint (the done-marker)
    OUT/timings/<task_id>.parquet   its wall-clock columns (kept apart: never reproducible)
    OUT/results.parquet, results.csv   every finished task, consolidated; no duplicate rows
    OUT/timings.csv                 every finished task's timings
    OUT/sweep.json                  the grid of the last invocation and its task ids
    OUT/log.jsonl                   execution log: one line per task started/finished/failed

Task files are written through a temporary file and ``os.replace``, so a task file exists
only complete; a re-run skips every task whose file exists, and an interrupted sweep loses
only the runs in flight.

Executors: ``serial`` (in this process), ``local`` (one process per core, the default) and
``ray``. Embeddings are computed once in the parent; local workers memory-map one shared
``.npy`` read-only, Ray workers read them zero-copy from the object store. Every worker
pins its BLAS, OpenMP and torch pools to one thread, so N workers use N cores.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from ocrr.errors import OcrrError

TASK_SCHEMA = 1  # bump when a task's meaning changes, so old task files stop matching

# The nine systems of the paper's main sweep (162 runs = 2 datasets x 3 policies x 3 seeds x 9).
MAIN_SYSTEMS = ["substrate", "static_knn", "static_linear", "online_linear", "ewc", "a_gem", "lwf", "knn_lm",
                "river_logreg"]
RIVER_SYSTEMS = ["river_logreg", "river_softmax", "river_ovr_balanced"]
BUDGETS = (100, 500, 1000, 5000)
STORAGE_SYSTEMS = ["substrate"] + [f"bounded_reservoir_{n}" for n in BUDGETS] + [f"bounded_fifo_{n}" for n in BUDGETS]
ABLATION_SYSTEMS = ["substrate", "substrate_k1", "substrate_sumsim", "substrate_count_only", "substrate_no_recency"]
SMOKE_DATA = {"n_classes": 14, "dim": 16, "n_train_per_class": 20, "n_test_per_class": 10, "sigma": 0.1}

PRESETS: dict[str, dict] = {
    # paper 5.1: every system except LoRA (ask for it with --systems +lora_deberta)
    "main": {"datasets": ["banking77", "clinc150"], "policies": ["oracle", "random50", "random10"],
             "seeds": [0, 1, 2], "systems": MAIN_SYSTEMS},
    # beside paper 5.2: the published river row next to two fair river baselines (river_softmax's
    # pure-Python seed pass costs minutes per (dataset, seed), which is why it is not in `main`)
    "river": {"datasets": ["banking77", "clinc150"], "policies": ["oracle", "random10"], "seeds": [0, 1, 2],
              "systems": RIVER_SYSTEMS},
    # paper 4.4 / Figure 1: bounded substrates at four budgets plus the unbounded one
    "storage": {"datasets": ["banking77"], "policies": ["oracle"], "seeds": [0, 1, 2], "systems": STORAGE_SYSTEMS},
    # paper 5.6: the vote-rule ablation
    "ablation": {"datasets": ["banking77"], "policies": ["oracle"], "seeds": [0, 1, 2], "systems": ABLATION_SYSTEMS},
    # seconds, no encoder, no downloads: for tests and for trying the machinery
    "smoke": {"datasets": ["synthetic"], "policies": ["oracle", "random50"], "seeds": [0, 1],
              "systems": ["substrate", "online_linear"], "data_options": {"synthetic": SMOKE_DATA}},
}

# Configuration columns of the results table, in order; then the per-checkpoint columns.
KEY_COLUMNS = ["dataset", "data_options", "encoder", "n_heldout", "eval_cap", "every", "policy", "system", "seed"]
CONFIG_COLUMNS = ["task_id"] + KEY_COLUMNS + ["system_name", "overrides", "hyperparameters"]
RESULT_COLUMNS = CONFIG_COLUMNS + ["step", "corrections", "acc_novel", "acc_original",
                                   "footprint_entries", "footprint_params", "footprint_bytes"]
TIMING_COLUMNS = ["task_id"] + KEY_COLUMNS + ["step", "fit_seconds", "predict_seconds", "correct_seconds",
                                              "eval_seconds"]
EMBEDDING_ONLY = {"synthetic"}  # datasets that carry their own vectors: the encoder plays no part


# ---------------------------------------------------------------------------------------------
# Grid and tasks


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_json_default)


def _json_default(value: Any):
    if isinstance(value, np.generic):  # numpy scalars in a system's hyperparameters
        return value.item()
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)


def _fmt_value(value: Any) -> str:
    """Spec text for an override value that parse_value reads back to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    return repr(value) if isinstance(value, float) else str(value)


def canonical_system(spec: str, extra: dict | None = None) -> tuple[str, str, dict]:
    """(canonical spec, registered name, overrides): overrides sorted, values normalised.

    ``extra`` holds overrides from a config file's [overrides] table; the spec's own win.
    """
    from ocrr.systems.registry import parse_spec

    name, overrides = parse_spec(spec)
    overrides = {**(extra or {}), **overrides}
    text = name + "".join(f":{k}={_fmt_value(overrides[k])}" for k in sorted(overrides))
    return text, name, {k: overrides[k] for k in sorted(overrides)}


@dataclass(frozen=True)
class Task:
    """One run of the grid. ``data_options`` is canonical JSON so the task is hashable."""

    dataset: str
    data_options: str
    encoder: str
    n_heldout: int
    eval_cap: int  # 0: no cap
    every: int
    policy: str
    seed: int
    system: str  # canonical spec, e.g. "substrate:k=3"
    # The system's resolved hyperparameters (class + every value, defaults included) as
    # canonical JSON: a changed default gives a new key instead of silently reusing old runs.
    hyperparameters: str = ""

    def config(self) -> dict:
        from ocrr.systems.registry import parse_spec

        name, overrides = parse_spec(self.system)
        return {"schema": TASK_SCHEMA, "dataset": self.dataset, "data_options": json.loads(self.data_options),
                "encoder": self.encoder, "protocol": {"name": "heldout", "n_heldout": self.n_heldout,
                                                      "eval_cap": self.eval_cap, "every": self.every},
                "policy": self.policy, "seed": self.seed,
                "system": {"name": name, "overrides": overrides,
                           "hyperparameters": json.loads(self.hyperparameters or "null")}}

    @functools.cached_property
    def task_id(self) -> str:
        return hashlib.sha256(canonical_json(self.config()).encode("utf-8")).hexdigest()[:20]

    @functools.cached_property
    def data_key(self) -> str:
        """Tasks with the same data key share a dataset and its embeddings."""
        return hashlib.sha256(canonical_json([self.dataset, self.data_options, self.encoder]).encode()).hexdigest()[:16]

    def columns(self) -> dict:
        from ocrr.systems.registry import parse_spec

        name, overrides = parse_spec(self.system)
        return {"task_id": self.task_id, **{k: getattr(self, k) for k in KEY_COLUMNS},
                "system_name": name, "overrides": canonical_json(overrides), "hyperparameters": self.hyperparameters}


@dataclass
class Grid:
    """What to sweep. Every field can come from a preset, a config file or the command line."""

    datasets: list[str] = field(default_factory=lambda: ["banking77"])
    policies: list[str] = field(default_factory=lambda: ["oracle"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    systems: list[str] = field(default_factory=lambda: list(MAIN_SYSTEMS))
    encoders: list[str] = field(default_factory=lambda: ["minilm"])
    data_options: dict = field(default_factory=dict)  # {dataset: {option: value}} or {option: value} for all
    overrides: dict = field(default_factory=dict)  # {system name: {hyperparameter: value}}
    n_heldout: int = 10
    eval_cap: int | None = 400
    every: int = 50
    oos: bool = True  # CLINC150: keep "oos" as the 151st class
    data_dir: str | None = None  # where the files are, not what they are: not part of task keys

    def options_for(self, dataset: str) -> dict:
        shared = {k: v for k, v in self.data_options.items() if not isinstance(v, dict)}
        own = self.data_options.get(dataset, {})
        options = {**shared, **(own if isinstance(own, dict) else {})}
        if dataset == "clinc150":
            options.setdefault("oos", self.oos)
        return {k: options[k] for k in sorted(options)}

    def tasks(self, resolve: bool = True) -> list[Task]:
        """Every task, in grid order (dataset, encoder, policy, system, seed); duplicates dropped.

        ``resolve`` builds each system once to record its hyperparameters (and fails on an
        unknown name or a bad override before any work); without it, only counting is exact.
        """
        from ocrr.policies import make_policy
        from ocrr.systems.registry import expand_systems

        _check_grid_values(self)
        specs = list(dict.fromkeys(canonical_system(s, self.overrides.get(_base(s)))[0]
                                   for s in expand_systems(self.systems)))
        hyper = {spec: resolve_hyperparameters(spec) if resolve else "" for spec in specs}
        policies = [make_policy(p).name for p in self.policies]
        out, seen = [], set()
        for dataset, encoder, policy, spec, seed in itertools.product(
                self.datasets, self.encoders, policies, specs, self.seeds):
            task = Task(dataset=dataset, data_options=canonical_json(self.options_for(dataset)),
                        encoder="dataset" if dataset in EMBEDDING_ONLY else encoder,
                        n_heldout=int(self.n_heldout), eval_cap=int(self.eval_cap or 0), every=int(self.every),
                        policy=policy, seed=int(seed), system=spec, hyperparameters=hyper[spec])
            if task not in seen:
                seen.add(task)
                out.append(task)
        return out


def resolve_hyperparameters(spec: str) -> str:
    from ocrr.systems import make_system

    try:
        system = make_system(spec)
    except ImportError as err:  # an optional extra (peft, ...) missing in this environment
        raise OcrrError(f"system {spec!r} needs a package that is not installed ({err}). Install the extra "
                        "it names (e.g. pip install 'ocrr[lora]') or leave it out of --systems.") from None
    return canonical_json({"class": type(system).__name__, **system.hyperparameters()})


def _base(spec: str) -> str:
    return spec.strip().split(":", 1)[0]


def _check_grid_values(grid: Grid) -> None:
    for name in ("datasets", "policies", "seeds", "systems", "encoders"):
        value = getattr(grid, name)
        if not isinstance(value, list) or not value:
            raise OcrrError(f"sweep: '{name}' must be a non-empty list, got {value!r}. "
                            f"Give at least one, e.g. --{name} ... or {name} = [...] in the config file.")
    for seed in grid.seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise OcrrError(f"sweep: seeds must be whole numbers >= 0, got {seed!r}.")
    for name, low in (("n_heldout", 1), ("every", 1)):
        if not isinstance(getattr(grid, name), int) or getattr(grid, name) < low:
            raise OcrrError(f"sweep: {name} must be a whole number >= {low}, got {getattr(grid, name)!r}.")
    if grid.eval_cap is not None and (not isinstance(grid.eval_cap, int) or grid.eval_cap < 0):
        raise OcrrError(f"sweep: eval_cap must be a whole number >= 0 (0: no cap), got {grid.eval_cap!r}.")


GRID_KEYS = {f.name for f in dataclasses.fields(Grid)}
RUN_KEYS = {"executor", "jobs", "address", "out"}  # how to run, not what: allowed in config files
CONFIG_ALIASES = {"heldout": "n_heldout", "dataset": "datasets", "policy": "policies", "system": "systems",
                  "encoder": "encoders", "seed": "seeds"}


def load_config(path: str | os.PathLike) -> dict:
    """A sweep config file (TOML or JSON): grid fields at the top level or under [sweep]."""
    path = Path(path).expanduser()
    if not path.exists():
        raise OcrrError(f"sweep config {str(path)!r} not found. Give the path of a .toml or .json file.")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            raise OcrrError(f"sweep config {str(path)!r}: use a .toml or .json file.")
    except (ValueError, TypeError) as err:  # tomllib.TOMLDecodeError and JSONDecodeError are ValueErrors
        raise OcrrError(f"cannot parse sweep config {str(path)!r}: {err}. Fix the syntax at that position.") from None
    if not isinstance(data, dict):
        raise OcrrError(f"sweep config {str(path)!r} must hold a table/object of settings.")
    if isinstance(data.get("sweep"), dict):
        data = {**{k: v for k, v in data.items() if k != "sweep"}, **data["sweep"]}
    data = {CONFIG_ALIASES.get(k, k): v for k, v in data.items()}
    unknown = sorted(set(data) - GRID_KEYS - RUN_KEYS - {"preset"})
    if unknown:
        raise OcrrError(f"sweep config {str(path)!r}: unknown setting(s) {', '.join(unknown)}. "
                        f"Known: {', '.join(sorted(GRID_KEYS | RUN_KEYS | {'preset'}))}.")
    return data


def resolve_grid(preset: str | None = None, config: dict | None = None, **options) -> Grid:
    """Preset, then config file, then command-line options (None = not given).

    ``systems`` items starting with '+' are added to the list so far instead of replacing it.
    """
    config = dict(config or {})
    preset = options.pop("preset", None) or preset or config.pop("preset", None)
    config.pop("preset", None)
    grid = Grid()
    layers = []
    if preset is not None:
        if preset not in PRESETS:
            raise OcrrError(f"unknown sweep preset {preset!r}. Use one of {', '.join(PRESETS)}.")
        layers.append(PRESETS[preset])
    layers.append({k: v for k, v in config.items() if k in GRID_KEYS})
    layers.append({k: v for k, v in options.items() if v is not None})
    for layer in layers:
        for key, value in layer.items():
            if key not in GRID_KEYS:
                raise OcrrError(f"sweep: unknown setting {key!r}.")
            if key == "systems":
                value = _merge_systems(grid.systems, value)
            elif key in ("data_options", "overrides"):
                value = _merge_dicts(getattr(grid, key), value, key)
            elif key in ("datasets", "policies", "seeds", "encoders") and not isinstance(value, list):
                value = [value]
            setattr(grid, key, json.loads(json.dumps(value)) if isinstance(value, (list, dict)) else value)
    return grid


def _merge_systems(current: list[str], new) -> list[str]:
    new = [new] if isinstance(new, str) else list(new)
    items = [s for item in new for s in str(item).split(",") if s.strip()]
    if items and all(s.strip().startswith("+") for s in items):
        return list(current) + [s.strip()[1:] for s in items]
    if any(s.strip().startswith("+") for s in items):
        raise OcrrError("sweep: --systems mixes '+name' (add to the preset's systems) and plain names "
                        "(replace them). Use one form.")
    return items


def _merge_dicts(current: dict, new, key: str) -> dict:
    if not isinstance(new, dict):
        raise OcrrError(f"sweep: {key} must be a table, e.g. [{key}.synthetic] dim = 32.")
    merged = json.loads(json.dumps(current))
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = {**merged[k], **v}
        else:
            merged[k] = v
    return merged


# ---------------------------------------------------------------------------------------------
# Shared data: one dataset + embeddings per data key


@dataclass(frozen=True)
class SharedData:
    """What workers need for every task of one data key. Vectors live in one .npy file."""

    dataset: Any  # ocrr.data.records.Dataset without vectors (texts and labels only)
    vec_path: str  # float32 (n_train + n_test, d): train rows then test rows, unit length
    n_train: int
    encoder_id: str
    sha256: str


def prepare_data(tasks: Iterable[Task], data_dir: str | None = None, embed_progress=None) -> dict[str, SharedData]:
    """Load each dataset once, embed it once (the encoder's cache is filled), and save the
    normalised vectors where every worker can memory-map them."""
    from ocrr.data import load_dataset
    from ocrr.encoders import embed_dataset
    from ocrr.encoders.cache import save_cached
    from ocrr.paths import cache_root

    out: dict[str, SharedData] = {}
    for task in tasks:
        if task.data_key in out:
            continue
        dataset = load_dataset(task.dataset, data_dir=data_dir, **json.loads(task.data_options))
        encoder = "minilm" if task.encoder == "dataset" else task.encoder
        emb = embed_dataset(dataset, encoder, progress=embed_progress)
        path = cache_root() / "embeddings" / "shared" / f"{emb.sha256}.npy"
        if not _valid_npy(path, len(emb.train) + len(emb.test)):
            save_cached(path, np.concatenate([emb.train, emb.test]))
        stripped = dataclasses.replace(dataset, train=dataclasses.replace(dataset.train, vecs=None),
                                       test=dataclasses.replace(dataset.test, vecs=None))
        out[task.data_key] = SharedData(stripped, str(path), len(emb.train), emb.encoder_id, emb.sha256)
    return out


def _valid_npy(path: Path, rows: int) -> bool:
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return arr.ndim == 2 and arr.shape[0] == rows and arr.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# Executing one task (in whichever process)

_PINNED = False
_VECS: dict[str, np.ndarray] = {}


def pin_threads() -> None:
    """One thread for BLAS, OpenMP and torch in this (worker) process, for good.

    The systems' modules are imported first: threadpoolctl only limits libraries that are
    already loaded. Without this, two workers on two cores each start a pool per library
    and fight over the cores (and results could depend on the thread count).
    """
    global _PINNED
    if _PINNED:
        return
    import ocrr.systems.catalog  # noqa: F401  (loads torch and every system's native libraries)
    import torch
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    torch.set_num_threads(1)
    _PINNED = True


def _vectors(shared: SharedData) -> np.ndarray:
    if shared.vec_path not in _VECS:
        _VECS[shared.vec_path] = np.load(shared.vec_path, mmap_mode="r")  # shared read-only page cache
    return _VECS[shared.vec_path]


def execute_task(task: Task, shared: SharedData, vecs: np.ndarray | None = None) -> dict:
    """Run one task; return plain data (rows, timings, footprint, hyperparameters)."""
    from ocrr.experiment import run_one
    from ocrr.policies import make_policy
    from ocrr.protocols import heldout_scenario

    started, cpu = time.perf_counter(), time.process_time()  # CPU time: meaningful on a shared machine
    vecs = _vectors(shared) if vecs is None else vecs
    train, test = vecs[: shared.n_train], vecs[shared.n_train:]
    scenario = heldout_scenario(shared.dataset, train, test, task.seed, task.n_heldout, task.eval_cap or None)
    result, hyper = run_one(scenario, make_policy(task.policy), task.system, {}, task.every)
    return {"task_id": task.task_id, "checkpoints": result.checkpoints, "timings": result.timings,
            "footprint": result.footprint, "hyperparameters": hyper, "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu, "pid": os.getpid()}


def task_frames(task: Task, output: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The task's result rows (every configuration column) and its timing rows."""
    cols = task.columns()
    if task.hyperparameters and canonical_json(output["hyperparameters"]) != task.hyperparameters:
        raise OcrrError(f"task {task.task_id}: the worker built {task.system} with hyperparameters "
                        f"{canonical_json(output['hyperparameters'])}, not {task.hyperparameters}. "
                        "Install the same ocrr version on every worker.")
    fp = output["footprint"]
    rows = [{**cols, "step": int(r["step"]), "corrections": int(r["corrections"]),
             "acc_novel": float(r["acc_novel"]), "acc_original": float(r["acc_original"]),
             "footprint_entries": int(fp.get("footprint_entries", 0)),
             "footprint_params": int(fp.get("footprint_params", 0)),
             "footprint_bytes": int(fp.get("footprint_bytes", 0))} for r in output["checkpoints"]]
    key_cols = {k: cols[k] for k in ["task_id"] + KEY_COLUMNS}
    timings = [{**key_cols, **{k: r[k] for k in TIMING_COLUMNS if k in r}} for r in output["timings"]]
    return (pd.DataFrame(rows, columns=RESULT_COLUMNS), pd.DataFrame(timings, columns=TIMING_COLUMNS))


# ---------------------------------------------------------------------------------------------
# Executors: each yields (task, output dict | exception) as tasks finish


class SerialExecutor:
    """In this process, one task after another: for debugging and tiny grids. Threads are
    pinned as in a worker while it runs (same numbers), and restored afterwards."""

    name = "serial"
    workers = 1

    def run(self, tasks: list[Task], data: dict[str, SharedData]) -> Iterator[tuple[Task, Any]]:
        import ocrr.systems.catalog  # noqa: F401  (load the native libraries before limiting them)
        import torch
        from threadpoolctl import threadpool_limits

        torch_threads = torch.get_num_threads()
        with threadpool_limits(1):
            torch.set_num_threads(1)
            try:
                for task in tasks:
                    try:
                        output = execute_task(task, data[task.data_key])
                    except Exception as err:  # a failing run must not stop the grid
                        output = err
                    yield task, output
            finally:
                torch.set_num_threads(torch_threads)


_WORKER_DATA: dict[str, SharedData] = {}


def _init_worker(data: dict[str, SharedData]) -> None:
    _WORKER_DATA.update(data)
    pin_threads()


def _worker_task(task: Task) -> dict:
    return execute_task(task, _WORKER_DATA[task.data_key])


class LocalExecutor:
    """A pool of ``jobs`` processes (forkserver where available, else spawn: never plain
    fork, which would copy the parent's thread pools and torch state)."""

    name = "local"

    def __init__(self, jobs: int | None = None):
        self.workers = max(1, int(jobs or available_cores()))

    def run(self, tasks: list[Task], data: dict[str, SharedData]) -> Iterator[tuple[Task, Any]]:
        import multiprocessing as mp
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        workers = min(self.workers, len(tasks)) or 1
        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context(method), initializer=_init_worker,
                                   initargs=(data,))
        try:
            # Submit a bounded window so an interrupt cancels cheaply and order stays predictable.
            queue = list(tasks)
            pending: dict = {}
            while queue or pending:
                while queue and len(pending) < 2 * workers:
                    try:
                        future = pool.submit(_worker_task, queue[0])
                    except BrokenProcessPool as err:  # a worker died: fail the rest, rerun resumes them
                        for task in queue:
                            yield task, err
                        queue = []
                        break
                    pending[future] = queue.pop(0)
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: pending[f].task_id):
                    task = pending.pop(future)
                    try:
                        yield task, future.result()
                    except Exception as err:  # includes BrokenProcessPool: the task is retried next time
                        yield task, err
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _ray_execute(task: Task, shared: SharedData, vecs: np.ndarray) -> dict:
    pin_threads()
    return execute_task(task, shared, vecs)


class RayExecutor:
    """Ray tasks (num_cpus=1 each). Starts a local Ray with ``jobs`` CPUs unless ``address``
    names a running cluster ('auto' or host:port). Vectors go to the object store once; the
    workers on a node read them without copies. Workers load nothing from this disk, except
    the code: a cluster's nodes need ocrr installed."""

    name = "ray"

    def __init__(self, jobs: int | None = None, address: str | None = None):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise OcrrError("the ray executor needs Ray: pip install 'ocrr[ray]' (or pip install ray), "
                            "or use --executor local.") from None
        self.address = address
        self.workers = max(1, int(jobs or available_cores()))

    def run(self, tasks: list[Task], data: dict[str, SharedData]) -> Iterator[tuple[Task, Any]]:
        import logging

        import ray

        started = not ray.is_initialized()
        if started:
            kwargs = {"address": self.address} if self.address else {"num_cpus": self.workers}
            ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                     configure_logging=True, **kwargs)
        try:
            if self.address:
                self.workers = int(ray.cluster_resources().get("CPU", self.workers))
            remote = ray.remote(num_cpus=1, max_retries=0)(_ray_execute)
            refs = {key: (ray.put(shared), ray.put(np.load(shared.vec_path))) for key, shared in data.items()}
            pending = {}
            for task in tasks:
                shared_ref, vec_ref = refs[task.data_key]
                pending[remote.remote(task, shared_ref, vec_ref)] = task
            try:
                while pending:
                    done, _ = ray.wait(list(pending), num_returns=1)
                    for ref in done:
                        task = pending.pop(ref)
                        try:
                            yield task, ray.get(ref)
                        except Exception as err:  # RayTaskError wraps the worker's exception
                            yield task, err
            finally:
                for ref in pending:
                    ray.cancel(ref, force=True)
        finally:
            if started:
                ray.shutdown()


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def make_executor(name: str, jobs: int | None = None, address: str | None = None):
    if name == "serial":
        return SerialExecutor()
    if name == "local":
        return LocalExecutor(jobs)
    if name == "ray":
        return RayExecutor(jobs, address)
    raise OcrrError(f"unknown executor {name!r}. Use local (processes on this machine), ray or serial.")


# ---------------------------------------------------------------------------------------------
# The sweep


class Progress:
    """Callbacks a sweep reports to; the default does nothing."""

    def embedding(self, total: int):
        return None

    def begin(self, total: int, skipped: int, todo: int, workers: int) -> None: ...

    def task_done(self, task: Task, ok: bool) -> None: ...

    def end(self) -> None: ...


@dataclass
class SweepResult:
    out: Path
    tasks: list[Task]  # the whole grid
    skipped: list[Task]  # already finished before this invocation
    ran: list[Task]  # finished now
    failed: list[tuple[Task, str]]
    results: pd.DataFrame  # consolidated: every task file in OUT/tasks
    seconds: float


def task_path(out: Path, task_id: str) -> Path:
    return out / "tasks" / f"{task_id}.parquet"


def finished_ids(out: Path) -> set[str]:
    return {p.stem for p in (out / "tasks").glob("*.parquet")}


def run_sweep(grid: Grid, out: str | os.PathLike, executor: str = "local", jobs: int | None = None,
              address: str | None = None, progress: Progress | None = None) -> SweepResult:
    started = time.perf_counter()
    out = Path(out)
    progress = progress or Progress()
    tasks = grid.tasks()
    runner = make_executor(executor, jobs, address)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    (out / "timings").mkdir(exist_ok=True)
    _write_manifest(out, grid, tasks)
    done = finished_ids(out)
    skipped = [t for t in tasks if t.task_id in done]
    todo = longest_first([t for t in tasks if t.task_id not in done], out)
    ran, failed = [], []
    log = _Log(out / "log.jsonl")
    try:
        if todo:
            data = prepare_data(todo, grid.data_dir, progress.embedding)
            log.write(event="start", executor=runner.name, workers=runner.workers, total=len(tasks),
                      skipped=len(skipped), todo=len(todo))
            progress.begin(len(tasks), len(skipped), len(todo), min(runner.workers, len(todo)))
            outputs = runner.run(todo, data)
            try:
                for task, output in outputs:
                    progress.task_done(task, _record(out, log, task, output, ran, failed))
            finally:
                outputs.close()  # an interrupt here still shuts the pool down
    except KeyboardInterrupt:
        log.write(event="interrupted", finished=len(ran))
        consolidate(out)
        raise
    finally:
        progress.end()
    results = consolidate(out)
    log.write(event="end", ran=len(ran), failed=len(failed), seconds=round(time.perf_counter() - started, 3))
    return SweepResult(out, tasks, skipped, ran, failed, results, time.perf_counter() - started)


def _record(out: Path, log: "_Log", task: Task, output, ran: list, failed: list) -> bool:
    if not isinstance(output, BaseException):
        try:
            save_task(out, task, output)
        except OcrrError as err:
            output = err
    if isinstance(output, BaseException):
        message = f"{type(output).__name__}: {output}"
        failed.append((task, message))
        log.write(event="failed", task_id=task.task_id, system=task.system, seed=task.seed, error=message)
        return False
    ran.append(task)
    log.write(event="done", task_id=task.task_id, dataset=task.dataset, system=task.system, seed=task.seed,
              seconds=round(output["seconds"], 4), cpu_seconds=round(output.get("cpu_seconds", 0.0), 4),
              pid=output["pid"])
    return True


# Systems known to cost far more per run than the rest (pure-Python updates, transformers):
# started first when nothing better is known, so the grid does not end on one long run.
SLOW_PREFIXES = ("river_", "lora_")


def longest_first(tasks: list[Task], out: Path) -> list[Task]:
    """Order runs by expected cost, longest first: the CPU seconds this folder's log recorded
    for the same (dataset, system), else for the system, else a prior. Order never changes
    results (the table is sorted by its keys), only how well the workers stay busy."""
    by_pair, by_system = {}, {}
    for record in read_log(out):
        if record.get("event") == "done" and "cpu_seconds" in record and "dataset" in record:
            by_pair.setdefault((record["dataset"], record["system"]), []).append(record["cpu_seconds"])
            by_system.setdefault(record["system"], []).append(record["cpu_seconds"])

    typical = float(np.median([np.mean(v) for v in by_system.values()])) if by_system else 0.0

    def cost(task: Task) -> float:
        for table, key in ((by_pair, (task.dataset, task.system)), (by_system, task.system)):
            if key in table:
                return float(np.mean(table[key]))
        return math.inf if task.system.startswith(SLOW_PREFIXES) else typical

    # Among equal costs, the runs of one (data, system, seed) -- the policies of a cell, which
    # share a seed state such as a cached river seed model -- are spread apart: the first of
    # every group goes first, so two workers do not wait on the same seed fit.
    seen: dict[tuple, int] = {}
    rank = {}
    for task in tasks:
        group = (task.data_key, task.system, task.seed)
        rank[task] = seen[group] = seen.get(group, -1) + 1
    return sorted(tasks, key=lambda t: (-cost(t), rank[t]))  # stable: otherwise grid order


def save_task(out: Path, task: Task, output: dict) -> None:
    """Timings first, then the result file: its existence marks the task done."""
    rows, timings = task_frames(task, output)
    _atomic(out / "timings" / f"{task.task_id}.parquet", lambda p: timings.to_parquet(p, index=False))
    _atomic(task_path(out, task.task_id), lambda p: rows.to_parquet(p, index=False))


def _atomic(path: Path, write: Callable[[str], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _read_all(folder: Path, columns: list[str]) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=columns)
    df = pd.concat(frames, ignore_index=True)
    return df[[c for c in columns if c in df.columns] + [c for c in df.columns if c not in columns]]


def sort_results(df: pd.DataFrame) -> pd.DataFrame:
    """The canonical row order: by every key column, then step. Independent of run order."""
    df = df.drop_duplicates(subset=["task_id", "step"], keep="last")
    return df.sort_values(KEY_COLUMNS + ["step"], kind="mergesort").reset_index(drop=True)


def load_results(out: str | os.PathLike) -> pd.DataFrame:
    """Every finished task of a sweep folder, from its task files (the source of truth)."""
    out = Path(out)
    return sort_results(_read_all(out / "tasks", RESULT_COLUMNS))


def consolidate(out: str | os.PathLike) -> pd.DataFrame:
    """Rewrite results.parquet, results.csv and timings.csv from the task files."""
    from ocrr.results import write_csv

    out = Path(out)
    results = load_results(out)
    _atomic(out / "results.parquet", lambda p: results.to_parquet(p, index=False))
    _atomic(out / "results.csv", lambda p: write_csv(results, Path(p), RESULT_COLUMNS))
    timings = _read_all(out / "timings", TIMING_COLUMNS)
    if len(timings):
        timings = timings.sort_values(KEY_COLUMNS + ["step"], kind="mergesort")
    _atomic(out / "timings.csv", lambda p: write_csv(timings, Path(p), TIMING_COLUMNS))
    return results


def _write_manifest(out: Path, grid: Grid, tasks: list[Task]) -> None:
    from ocrr import __version__

    manifest = {"ocrr": __version__, "task_schema": TASK_SCHEMA,
                "grid": {k: v for k, v in dataclasses.asdict(grid).items() if k != "data_dir"},
                "tasks": {t.task_id: t.config() for t in tasks}}
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _atomic(out / "sweep.json", lambda p: Path(p).write_text(text, encoding="utf-8"))


class _Log:
    """Append-only JSON-lines execution log (flushed per line: it survives a crash)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, **record) -> None:
        record = {"time": round(time.time(), 3), **record}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")


def read_log(out: str | os.PathLike) -> list[dict]:
    path = Path(out) / "log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class RichProgress(Progress):
    """The whole grid in one bar: runs done / running / left, elapsed and an estimate."""

    def __init__(self, console=None, quiet: bool = False):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("done"),
                       TextColumn("{task.fields[status]}"), TextColumn("· elapsed"), TimeElapsedColumn(),
                       TextColumn("· estimate"), TimeRemainingColumn(), console=console, disable=quiet,
                       transient=False)
        self.task = None
        self.live = False

    def _start(self):
        if not self.live:
            self.bar.start()
            self.live = True

    def embedding(self, total: int):
        self._start()
        task = self.bar.add_task("encoding texts (cached afterwards)", total=total, status="")
        return lambda n: self.bar.advance(task, n)

    def begin(self, total: int, skipped: int, todo: int, workers: int) -> None:
        self._start()
        self.total, self.todo, self.workers, self.done, self.failed = total, todo, workers, 0, 0
        self.skipped = skipped
        self.task = self.bar.add_task(f"{total} runs, {skipped} done before:" if skipped else f"{total} runs:",
                                      total=todo, status=self._status())

    def _status(self) -> str:
        left = self.todo - self.done - self.failed
        running = min(self.workers, left)
        text = f"· {running} running · {left - running} waiting"
        return text + (f" · [red]failed {self.failed}[/]" if self.failed else "")

    def task_done(self, task: Task, ok: bool) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
        self.bar.update(self.task, advance=1, status=self._status())

    def end(self) -> None:
        if self.live:
            self.bar.stop()
            self.live = False


__all__ = ["Grid", "PRESETS", "Task", "RESULT_COLUMNS", "KEY_COLUMNS", "SweepResult", "consolidate",
           "load_config", "load_results", "read_log", "resolve_grid", "run_sweep"]
