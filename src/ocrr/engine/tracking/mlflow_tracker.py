"""The MLflow tracker: the command as a parent MLflow run, each ocrr run (system, seed) its child.

Written with ``MlflowClient`` only, never MLflow's global active run, so a caller's own
``mlflow.start_run`` is left alone. A child's metrics are kept until the run ends and sent
in batches (a sweep's thousands of checkpoints would otherwise be thousands of writes).

Where: ``--track mlflow`` uses ``$MLFLOW_TRACKING_URI`` when set, else the folder ``./mlruns``;
a folder (``mlflow:FOLDER``) is a local store in it: the SQLite database MLflow recommends
(``FOLDER/mlflow.db``; its file store is retired) and the artifacts in ``FOLDER/artifacts``.
Any other URI (``sqlite:///x.db``, ``http://host:5000``, ``databricks``) is MLflow's own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlparse

from ocrr import __version__
from ocrr.errors import OcrrError
from ocrr.utils.net import refused_connection

INSTALL = "pip install -e '.[tracking]'"

try:
    from mlflow.entities import Metric, Param, RunStatus, RunTag
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
    from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH
except ImportError as err:
    _missing = (err.name or "mlflow").split(".")[0]
    raise OcrrError(
        f"--track mlflow needs {'MLflow' if _missing == 'mlflow' else _missing}, which is not installed: {INSTALL}"
    ) from None

DEFAULT_FOLDER = "mlruns"
EXPERIMENT = "ocrr"  # the MLflow experiment runs go to, unless $MLFLOW_EXPERIMENT_NAME names another


def store_location(location: str | None) -> tuple[str, str | None]:
    """(tracking URI, artifact location for a new experiment, None: the store's default)."""
    if location is None:
        env = os.environ.get("MLFLOW_TRACKING_URI")
        if env:
            return env, None
        location = DEFAULT_FOLDER
    if len(urlparse(location).scheme) > 1 or location == "databricks":  # a URI (one letter: a Windows drive)
        return location, None
    folder = Path(location).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise OcrrError(
            f"--track mlflow:{location}: {folder} is a file, not a folder. Give a folder for the local "
            "store (created if missing), or a URI such as sqlite:///path/mlflow.db."
        )
    return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()


def check_reachable(uri: str) -> None:
    """One OcrrError, within seconds, when the tracking server of an http(s) ``uri`` takes no
    connection (MLflow retries one with growing back-off, for minutes, saying nothing); other
    stores are MLflow's to open."""
    parts = urlparse(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OcrrError(f"--track mlflow:{uri}: the port is not a number in 1..65535") from None
    e = refused_connection(parts.hostname, port)
    if e is not None:
        raise OcrrError(
            f"--track mlflow:{uri}: no tracking server answers at {parts.hostname}:{port} ({e}); start it "
            "(mlflow server --port ...), fix the URI, or track to a folder: --track mlflow:FOLDER"
        )


class MlflowTracker:
    """Opens (creates) the store and the experiment now: a bad location fails at the door."""

    def __init__(self, location: str | None = None):
        self.uri, artifacts = store_location(location)
        check_reachable(self.uri)
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        # A new local store announces its tables at INFO, and SQLAlchemy 2.1 warns of MLflow's
        # own calls: neither is the user's business.
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        with warnings.catch_warnings(), self._store_errors():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.client = MlflowClient(tracking_uri=self.uri)
            found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment, artifacts)
        self.parent: str | None = None
        self.runs: dict[str, str] = {}  # ocrr run (task id) -> MLflow run id
        self.pending: dict[str, list[Metric]] = {}  # a run's metrics, sent when it ends

    def _store_errors(self) -> contextlib.AbstractContextManager[None]:
        return _store_errors(self.uri)

    # --- the command's parent run ------------------------------------------------------------

    def start(self, name: str, params: Mapping[str, object]) -> None:
        with self._store_errors():
            run = self.client.create_run(self.experiment_id, run_name=name, tags={"ocrr.version": __version__})
            self.parent = run.info.run_id
            self._log_params(self.parent, params)

    def log_artifacts(self, paths: list[Path]) -> None:
        assert self.parent is not None, "start() first"
        with self._store_errors():
            for path in paths:
                if Path(path).is_dir():
                    self.client.log_artifacts(self.parent, str(path), artifact_path=Path(path).name)
                else:
                    self.client.log_artifact(self.parent, str(path))

    def end(self, status: str) -> None:
        with self._store_errors():
            for run in list(self.runs):  # a run the command never finished (it was interrupted)
                self.run_ended(run, error=f"the command ended ({status}) before this run finished")
            if self.parent is not None:
                self.client.set_terminated(self.parent, status)

    # --- each ocrr run: what the engine calls ------------------------------------------------

    def run_started(self, run: str, name: str, params: Mapping[str, object]) -> None:
        tags = {"ocrr.version": __version__, "ocrr.task_id": run}
        if self.parent is not None:
            tags[MLFLOW_PARENT_RUN_ID] = self.parent
        with self._store_errors():
            created = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
            self.runs[run] = created.info.run_id
            self.pending[run] = []
            self._log_params(created.info.run_id, params)

    def checkpoint(self, run: str, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        self.pending[run] += [Metric(key, float(value), now, int(step)) for key, value in metrics.items()]

    def run_ended(self, run: str, error: str | None = None) -> None:
        run_id = self.runs.pop(run)
        metrics = self.pending.pop(run, [])
        with self._store_errors():
            for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])
            if error is not None:
                self.client.log_batch(run_id, tags=[RunTag("ocrr.error", error[:MAX_PARAM_VAL_LENGTH])])
            status = RunStatus.to_string(RunStatus.FAILED if error is not None else RunStatus.FINISHED)
            self.client.set_terminated(run_id, status)

    def _log_params(self, run_id: str, params: Mapping[str, object]) -> None:
        # MLflow keeps params as strings of at most MAX_PARAM_VAL_LENGTH characters (config.json has them whole)
        items = [Param(key, _as_text(value)[:MAX_PARAM_VAL_LENGTH]) for key, value in params.items()]
        for i in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=items[i : i + MAX_PARAMS_TAGS_PER_BATCH])


def _as_text(value: object) -> str:
    """A param's text: strings as they are, anything else as compact JSON (lists, dicts, None)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@contextlib.contextmanager
def _store_errors(uri: str) -> Iterator[None]:
    """MLflow's errors (and a missing database driver) as one OcrrError line naming the store."""
    try:
        yield
    except ImportError as err:  # a SQL store needs SQLAlchemy and Alembic, which the extra installs
        raise OcrrError(f"--track mlflow: the store {uri} needs {err.name}, not installed: {INSTALL}") from None
    except (MlflowException, OSError) as err:
        message = getattr(err, "message", None) or str(err)
        raise OcrrError(
            f"--track mlflow: the MLflow store {uri} failed: {message.splitlines()[0]}. Check that it is "
            "reachable and writable, or give another with --track mlflow:FOLDER or --track mlflow:URI."
        ) from None
