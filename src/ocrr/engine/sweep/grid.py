"""What to sweep: config files over a preset (ocrr.engine.sweep.presets), the grid, and tasks with stable ids.

A *task* is one run: (dataset + loader options, encoder, protocol + its options, policy,
seed, system spec with its hyperparameters). Its id is the sha256 of its canonical JSON, so
the same configuration always has the same id, in any process, on any machine.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ocrr.encoders import parse_encoder_spec
from ocrr.encoders.precomputed import precomputed_file
from ocrr.engine.seeds import MAX_SEED, SEED_RANGE
from ocrr.engine.sweep.presets import MAIN_SWEEP_SYSTEMS, PRESETS
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols import make_protocol
from ocrr.specs import canonical_json, format_spec, parse_spec, spec_name
from ocrr.systems import make_system
from ocrr.systems.registry import execution_settings, expand_systems

TASK_SCHEMA = 2  # bump when a task's meaning or its files change, so old task files stop matching

# Configuration columns of the results tables, in order. Protocol options also get a column
# each in the wide results table (n_heldout, eval_cap, every for the held-out protocol).
KEY_COLUMNS = ["dataset", "data_options", "encoder", "protocol", "protocol_options", "policy", "system", "seed"]
CONFIG_COLUMNS = ["task_id"] + KEY_COLUMNS + ["system_name", "overrides", "hyperparameters"]
EMBEDDING_ONLY = {"synthetic"}  # datasets that carry their own vectors: the encoder plays no part
HELDOUT_SHORTCUTS = ("n_heldout", "eval_cap", "every")  # grid fields that set held-out protocol options


def canonical_system(spec: str, extra: dict | None = None) -> tuple[str, str, dict]:
    """(canonical spec, registered name, overrides): overrides sorted, values normalised.

    ``extra`` holds overrides from a config file's [overrides] table; the spec's own win.
    """
    name, overrides = parse_spec(spec)
    overrides = {**(extra or {}), **overrides}
    return format_spec(name, overrides), name, {k: overrides[k] for k in sorted(overrides)}


@dataclass(frozen=True)
class Task:
    """One run of the grid. ``data_options`` is canonical JSON so the task is hashable;
    ``protocol`` is the protocol's canonical spec (every option spelled out)."""

    dataset: str
    data_options: str
    encoder: str
    protocol: str  # e.g. "heldout:eval_cap=400:every=50:n_heldout=10"
    policy: str
    seed: int
    system: str  # canonical spec, e.g. "substrate:k=3"
    # The system's resolved hyperparameters (class + every value, defaults included) as
    # canonical JSON: a changed default gives a new key instead of silently reusing old runs.
    hyperparameters: str = ""

    @functools.cached_property
    def protocol_object(self):
        return make_protocol(self.protocol)

    def config(self) -> dict:
        name, overrides = parse_spec(self.system)
        settings = execution_settings(name)  # how to run (device, threads), not what: not in the id
        overrides = {k: v for k, v in overrides.items() if k not in settings}
        return {
            "schema": TASK_SCHEMA,
            "dataset": self.dataset,
            "data_options": json.loads(self.data_options),
            "encoder": self.encoder,
            "protocol": self.protocol_object.canonical(),
            "policy": self.policy,
            "seed": self.seed,
            "system": {
                "name": name,
                "overrides": overrides,
                "hyperparameters": json.loads(self.hyperparameters or "null"),
            },
        }

    @functools.cached_property
    def task_id(self) -> str:
        return hashlib.sha256(canonical_json(self.config()).encode("utf-8")).hexdigest()[:20]

    @functools.cached_property
    def data_key(self) -> str:
        """Tasks with the same data key share a dataset and its embeddings."""
        return hashlib.sha256(canonical_json([self.dataset, self.data_options, self.encoder]).encode()).hexdigest()[:16]

    def columns(self) -> dict:
        name, overrides = parse_spec(self.system)
        protocol = self.protocol_object
        return {
            "task_id": self.task_id,
            "dataset": self.dataset,
            "data_options": self.data_options,
            "encoder": self.encoder,
            "protocol": protocol.name,
            "protocol_options": canonical_json(protocol.values),
            "policy": self.policy,
            "system": self.system,
            "seed": self.seed,
            "system_name": name,
            "overrides": canonical_json(overrides),
            "hyperparameters": self.hyperparameters,
        }


@dataclass
class Grid:
    """What to sweep. Every field can come from a preset, a config file or the command line."""

    datasets: list[str] = field(default_factory=lambda: ["banking77"])
    policies: list[str] = field(default_factory=lambda: ["oracle"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    systems: list[str] = field(default_factory=lambda: list(MAIN_SWEEP_SYSTEMS))
    encoders: list[str] = field(default_factory=lambda: ["minilm"])
    protocols: list[str] = field(default_factory=lambda: ["heldout"])  # specs: name:key=value
    data_options: dict = field(default_factory=dict)  # {dataset: {option: value}} or {option: value} for all
    overrides: dict = field(default_factory=dict)  # {system name: {hyperparameter: value}}
    # shortcuts for the held-out protocol's options (None: its default)
    n_heldout: int | None = None
    eval_cap: int | None = None  # 0: no cap
    every: int | None = None
    oos: bool = True  # CLINC150: keep "oos" as the 151st class
    data_dir: str | None = None  # where the files are, not what they are: not part of task keys

    def options_for(self, dataset: str) -> dict:
        shared = {k: v for k, v in self.data_options.items() if not isinstance(v, dict)}
        own = self.data_options.get(dataset, {})
        options = {**shared, **(own if isinstance(own, dict) else {})}
        if dataset == "clinc150":
            options.setdefault("oos", self.oos)
        return {k: options[k] for k in sorted(options)}

    def protocol_objects(self) -> list:
        """Every protocol of the grid, built (so a bad option fails now, naming the fix)."""
        shortcuts = {k: getattr(self, k) for k in HELDOUT_SHORTCUTS if getattr(self, k) is not None}
        built = []
        for spec in self.protocols:
            name = spec_name(spec)
            built.append(make_protocol(str(spec), **(shortcuts if name == "heldout" else {})))
        if shortcuts and not any(p.name == "heldout" for p in built):
            raise OcrrError(
                f"sweep: {', '.join(shortcuts)} set options of the heldout protocol, which is not in "
                f"this grid ({', '.join(map(str, self.protocols))}). Give them as protocol options "
                "instead, e.g. --protocol name:key=value."
            )
        return built

    def tasks(self, resolve: bool = True) -> list[Task]:
        """Every task, in grid order (dataset, encoder, protocol, policy, system, seed); duplicates dropped.

        ``resolve`` builds each system once to record its hyperparameters (and fails on an
        unknown name or a bad override before any work); without it, only counting is exact.
        """
        _check_grid_values(self)
        protocols = list(dict.fromkeys(p.spec() for p in self.protocol_objects()))
        specs = list(
            dict.fromkeys(
                canonical_system(s, self.overrides.get(spec_name(s)))[0] for s in expand_systems(self.systems)
            )
        )
        hyper = {spec: resolve_hyperparameters(spec) if resolve else "" for spec in specs}
        policies = [make_policy(p).name for p in self.policies]
        _check_encoders(self)
        out, seen = [], set()
        for dataset, encoder, protocol, policy, spec, seed in itertools.product(
            self.datasets, self.encoders, protocols, policies, specs, self.seeds
        ):
            task = Task(
                dataset=dataset,
                data_options=canonical_json(self.options_for(dataset)),
                encoder="dataset" if dataset in EMBEDDING_ONLY else encoder,
                protocol=protocol,
                policy=policy,
                seed=int(seed),
                system=spec,
                hyperparameters=hyper[spec],
            )
            if task not in seen:
                seen.add(task)
                out.append(task)
        return out


def resolve_hyperparameters(spec: str) -> str:
    try:
        system = make_system(spec)
    except ImportError as err:  # an optional extra (peft, ...) missing in this environment
        raise OcrrError(
            f"system {spec!r} needs a package that is not installed ({err}). Install the extra "
            "it names (e.g. pip install -e '.[lora]') or leave it out of --systems."
        ) from None
    return canonical_json({"class": type(system).__name__, **system.hyperparameters()})


def _check_encoders(grid: Grid) -> None:
    """An encoder asked for datasets that carry their own vectors would be silently ignored; a
    name, option or precomputed file that the run would refuse is refused now, before any work
    (and by a dry run)."""
    if all(d in EMBEDDING_ONLY for d in grid.datasets) and grid.encoders != ["minilm"]:
        names = ", ".join(sorted(set(grid.datasets)))
        raise OcrrError(
            f"{names} carries its own vectors, so --encoder {' '.join(grid.encoders)} would be ignored. "
            "Drop the encoder option, or use a dataset with texts (e.g. csv:FILE)."
        )
    for spec in grid.encoders:
        entry, options = parse_encoder_spec(spec)
        if entry.dataset_level:
            precomputed_file(options["file"])


def _check_grid_values(grid: Grid) -> None:
    for name in ("datasets", "policies", "seeds", "systems", "encoders", "protocols"):
        value = getattr(grid, name)
        if not isinstance(value, list) or not value:
            raise OcrrError(
                f"sweep: '{name}' must be a non-empty list, got {value!r}. "
                f"Give at least one, e.g. --{name} ... or {name} = [...] in the config file."
            )
    for seed in grid.seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
            raise OcrrError(f"sweep: seeds must be whole numbers {SEED_RANGE}, got {seed!r}.")


GRID_KEYS = {f.name for f in dataclasses.fields(Grid)}
RUN_SETTINGS = {"executor", "jobs", "address", "out"}  # how to run, not what: allowed in config files
CONFIG_ALIASES = {
    "heldout": "n_heldout",
    "dataset": "datasets",
    "policy": "policies",
    "system": "systems",
    "encoder": "encoders",
    "seed": "seeds",
    "protocol": "protocols",
}


def load_config(path: str | os.PathLike) -> dict:
    """A sweep config file (TOML or JSON): grid fields at the top level or under [sweep]."""
    path = Path(path).expanduser()
    if not path.exists():
        raise OcrrError(f"sweep config {str(path)!r} not found. Give the path of a .toml or .json file.")
    if path.is_dir():
        raise OcrrError(f"sweep config {str(path)!r} is a folder. Give the path of a .toml or .json file.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise OcrrError(
            f"sweep config {str(path)!r} is not UTF-8 text (byte {err.start} cannot be decoded). "
            "Save it as UTF-8, or give the path of the .toml or .json file meant."
        ) from None
    except OSError as err:  # unreadable: permissions, a vanished file, a folder on some systems
        raise OcrrError(
            f"cannot read sweep config {str(path)!r} ({err.strerror or err}). Make it readable, or give another file."
        ) from None
    try:
        if path.suffix.lower() == ".toml":
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
    unknown = sorted(set(data) - GRID_KEYS - RUN_SETTINGS - {"preset"})
    if unknown:
        raise OcrrError(
            f"sweep config {str(path)!r}: unknown setting(s) {', '.join(unknown)}. "
            f"Known: {', '.join(sorted(GRID_KEYS | RUN_SETTINGS | {'preset'}))}."
        )
    _check_text_settings(data, path)
    return data


# Settings a config file gives as text (a path, a name, an address), with an example each: any
# other type failed deep in the run (out = 5: a TypeError), or after the dry run had passed it.
TEXT_SETTINGS = {
    "out": 'out = "results/sweep1"',
    "data_dir": 'data_dir = "/data/ocrr"',
    "executor": 'executor = "local"',
    "address": 'address = "auto"',
    "preset": 'preset = "smoke"',
}


def _check_text_settings(data: dict, path: Path) -> None:
    for key, example in TEXT_SETTINGS.items():
        if key not in data:
            continue
        value = data[key]
        if not isinstance(value, str):
            raise OcrrError(
                f"sweep config {str(path)!r}: {key} must be text, e.g. {example}; got {value!r}. "
                "Quote it, or leave it out for its default."
            )
        if not value.strip():  # '' reads as '.': the current folder (the command line refuses --out '' too)
            raise OcrrError(
                f"sweep config {str(path)!r}: {key} is empty; give it, e.g. {example}, or leave it out for its default."
            )


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
            elif key in ("datasets", "policies", "seeds", "encoders", "protocols") and not isinstance(value, list):
                value = [value]
            setattr(grid, key, json.loads(json.dumps(value)) if isinstance(value, (list, dict)) else value)
    return grid


def _merge_systems(current: list[str], new) -> list[str]:
    new = [new] if isinstance(new, str) else list(new)
    items = [s for item in new for s in str(item).split(",") if s.strip()]
    if items and all(s.strip().startswith("+") for s in items):
        return list(current) + [s.strip()[1:] for s in items]
    if any(s.strip().startswith("+") for s in items):
        raise OcrrError(
            "sweep: --systems mixes '+name' (add to the preset's systems) and plain names (replace them). Use one form."
        )
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
