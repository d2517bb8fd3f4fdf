"""Executors: each yields (task, output dict | exception) as tasks finish.

``serial`` (in this process, what ``ocrr run`` uses), ``local`` (one process per core, the
default for sweeps) and ``ray``. Every worker pins its BLAS, OpenMP and torch pools to one
thread (ocrr.utils.threads), so N workers use N cores and results do not depend on the executor.
When the local pool's last tasks leave cores idle, it shares them among the tasks still
running (``CoreBudget``): a system that takes free cores (``System.takes_free_cores``, whose
results do not depend on its thread count) runs on more threads from its next checkpoint, or,
if it spreads its own work (``use_free_cores``: llm_icl's prompts at once), is told the share.
Protocols and systems registered in the parent (plug-ins, test-defined ones) are registered
in every worker too, so a task can name them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from ocrr.engine.fork_server import available_cores, start_fork_server
from ocrr.engine.sweep.data import SharedData
from ocrr.engine.sweep.execute import execute_task
from ocrr.engine.sweep.grid import Task
from ocrr.errors import OcrrError
from ocrr.protocols import PROTOCOLS
from ocrr.specs import parse_spec, spec_name
from ocrr.systems import REGISTRY
from ocrr.utils.net import refused_connection
from ocrr.utils.threads import CoreBudget, pin_threads, pinned_threads


def plugins(tasks: list[Task]) -> dict:
    """The registry entries the tasks name, to register again in a worker process. Entries
    that cannot be pickled by reference (a lambda factory) are left to the worker's own import."""
    found: dict[str, dict[str, Any]] = {"protocols": {}, "systems": {}}
    for task in tasks:
        name = spec_name(task.protocol)
        found["protocols"][name] = PROTOCOLS[name]
        system = parse_spec(task.system)[0]
        if system in REGISTRY:
            found["systems"][system] = REGISTRY[system]
    for kind in found:
        for name, entry in list(found[kind].items()):
            try:
                pickle.dumps(entry)
            except Exception:  # noqa: BLE001  (any pickling failure: the worker's own import decides)
                del found[kind][name]
    return found


def register_plugins(found: dict) -> None:
    PROTOCOLS.update(found.get("protocols", {}))
    REGISTRY.update(found.get("systems", {}))


class SerialExecutor:
    """In this process, one task after another (``ocrr run``, debugging, tiny grids). Threads
    are pinned as in a worker while it runs (same numbers), and restored afterwards."""

    name = "serial"
    workers = 1

    def __init__(self, on_checkpoint=None):
        self.on_checkpoint = on_checkpoint  # (task, checkpoint) -> None, for progress displays

    def run(self, tasks: list[Task], data: dict[str, SharedData]) -> Iterator[tuple[Task, Any]]:
        with pinned_threads(1):
            for task in tasks:
                callback = (lambda cp, task=task: self.on_checkpoint(task, cp)) if self.on_checkpoint else None
                output: dict | Exception
                try:
                    output = execute_task(task, data[task.data_key], on_checkpoint=callback)
                except Exception as err:  # a failing run must not stop the grid
                    output = err
                yield task, output


_WORKER_DATA: dict[str, SharedData] = {}
_WORKER_BUDGET: CoreBudget | None = None  # the pool's, shared with its owner


def _init_worker(
    data: dict[str, SharedData], found: dict, environ: dict[str, str], budget: CoreBudget | None = None
) -> None:
    global _WORKER_BUDGET
    os.environ.clear()  # the environment of the pool's owner now, not the fork server's at its start
    os.environ.update(environ)
    _WORKER_DATA.update(data)
    register_plugins(found)
    pin_threads(1)
    _WORKER_BUDGET = budget


def _worker_task(task: Task) -> dict:
    share = _WORKER_BUDGET.share if _WORKER_BUDGET is not None else None
    return execute_task(task, _WORKER_DATA[task.data_key], core_share=share)


class LocalExecutor:
    """A pool of ``jobs`` processes (forkserver where available, else spawn: never plain
    fork, which would copy the parent's thread pools and torch state). Once fewer runs are
    left than cores, the runs that take free cores share the idle ones (``share_free_cores``)."""

    name = "local"

    def __init__(self, jobs: int | None = None, share_free_cores: bool = True):
        self.workers = max(1, int(jobs or available_cores()))
        self.share_free_cores = share_free_cores  # False: every run on one thread (benchmarks' "before")

    def run(self, tasks: list[Task], data: dict[str, SharedData]) -> Iterator[tuple[Task, Any]]:
        # (started earlier by the command, so that its imports overlapped with the command's own)
        method = "forkserver" if start_fork_server() else "spawn"
        workers = min(self.workers, len(tasks)) or 1
        context = mp.get_context(method)
        cores = min(self.workers, available_cores()) if self.share_free_cores else 1  # never above the cores
        budget = CoreBudget(cores, context)
        pool = ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(data, plugins(tasks), dict(os.environ), budget),
        )
        try:
            # Submit a bounded window so an interrupt cancels cheaply and order stays predictable;
            # in queue order, except that a task waits while another of its cell is in the
            # window, as long as other work is left (``next_task``).
            queue = list(tasks)
            pending: dict = {}
            while queue or pending:
                # Before any of them starts: a task that starts with cores free is given them.
                budget.share_among(len(queue) + len(pending))
                while queue and len(pending) < 2 * workers:
                    task = queue.pop(next_task(queue, pending.values()))
                    try:
                        future = pool.submit(_worker_task, task)
                    except (BrokenProcessPool, BrokenPipeError) as err:  # a worker died: fail the rest (rerun resumes)
                        for failed in [task, *queue]:
                            yield failed, worker_died(err)
                        queue = []
                        break
                    pending[future] = task
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                budget.share_among(len(queue) + len(pending) - len(done))  # now, not after the yields
                for future in sorted(done, key=lambda f: pending[f].task_id):
                    task = pending.pop(future)
                    try:
                        yield task, future.result()
                    except BrokenProcessPool as err:  # the task is retried next time
                        yield task, worker_died(err)
                    except Exception as err:  # the task is retried next time
                        yield task, err
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def worker_died(err: BaseException) -> OcrrError:
    """The error of a run whose worker process stopped before it finished."""
    return OcrrError(
        f"a worker process stopped before it finished its run ({type(err).__name__}): if a script started "
        'ocrr, its calls must sit under `if __name__ == "__main__":` (each worker imports that script); '
        "else the worker ran out of memory or was killed (--jobs 1 runs every run in this process)"
    )


def next_task(queue: list[Task], submitted: Iterable[Task]) -> int:
    """Position in ``queue`` of the task to submit next: the first whose cell (data, system,
    seed: the policies of a cell share a seed state, e.g. a cached river seed model, that the
    first run computes under a lock) has no run submitted and unfinished, else the first. A
    worker that started a second run of a cell would only wait on that lock (a cold river
    seed pass on CLINC150: half a minute idle); the order of runs never changes results."""
    busy = {_cell(task) for task in submitted}
    return next((i for i, task in enumerate(queue) if _cell(task) not in busy), 0)


def _cell(task: Task) -> tuple:
    return task.data_key, task.system, task.seed


def _ray_execute(task: Task, shared: SharedData, vecs: np.ndarray, found: dict) -> dict:
    register_plugins(found)
    pin_threads(1)
    return execute_task(task, shared, vecs)


class RayExecutor:
    """Ray tasks (num_cpus=1 each). Starts a local Ray with ``jobs`` CPUs unless ``address``
    names a running cluster ('auto' or host:port). Vectors go to the object store once; the
    workers on a node read them without copies. Workers load nothing from this disk, except
    the code: a cluster's nodes need ocrr installed."""

    name = "ray"

    def __init__(self, jobs: int | None = None, address: str | None = None):
        if address is not None:
            check_ray_address(address)
            check_ray_listening(address)
        try:
            import ray  # noqa: F401
        except ImportError:
            raise OcrrError(
                "the ray executor needs Ray: pip install -e '.[ray]' (or pip install ray), or use --executor local."
            ) from None
        self.address = address
        self.workers = max(1, int(jobs or available_cores()))

    def run(self, tasks: list[Task], data: dict[str, SharedData]) -> Iterator[tuple[Task, Any]]:
        import ray

        started = not ray.is_initialized()
        if started:
            kwargs = {"address": self.address} if self.address else {"num_cpus": self.workers}
            try:
                ray.init(
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    configure_logging=True,
                    **kwargs,
                )
            except (ValueError, ConnectionError) as err:  # an address Ray cannot parse or reach
                if not self.address:
                    raise
                raise OcrrError(
                    f"Ray could not connect to --address {self.address} ({err}). Start the cluster there "
                    "(ray start --head) or give its address, e.g. --address auto or --address HOST:6379."
                ) from None
        try:
            if self.address:
                self.workers = int(ray.cluster_resources().get("CPU", self.workers))
            remote = ray.remote(num_cpus=1, max_retries=0)(_ray_execute)
            refs = {key: (ray.put(shared), ray.put(np.load(shared.vec_path))) for key, shared in data.items()}
            found = ray.put(plugins(tasks))
            pending = {}
            for task in tasks:
                shared_ref, vec_ref = refs[task.data_key]
                pending[remote.remote(task, shared_ref, vec_ref, found)] = task
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


# The forms of a Ray address (ray.init's address): a running cluster found on this machine, a new
# local one, a cluster's GCS (host:port), or Ray Client's server (ray://host:port).
RAY_ADDRESS_FORMS = (
    "auto, local, HOST:PORT (e.g. 10.0.0.5:6379) or ray://HOST:PORT (Ray Client, e.g. ray://10.0.0.5:10001)"
)


def check_ray_address(address: str) -> None:
    """Refuse an address none of ``RAY_ADDRESS_FORMS`` (before any work: Ray's own error came
    from inside the run, with its traceback)."""
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    host, colon, port = hostport.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # an IPv6 host is bracketed: [::1]:6379
        host = host[1:-1].replace(":", "")
    valid_host = bool(host) and not any(c in host for c in ":/ ")
    if not (colon and valid_host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise OcrrError(f"--address {address!r} is not a Ray cluster address; give {RAY_ADDRESS_FORMS}.")


def check_ray_listening(address: str) -> None:
    """Refuse a HOST:PORT address where nothing takes a connection, within seconds: ``ray.init``
    retries one for minutes, saying nothing."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    e = refused_connection(host.strip("[]"), int(port))
    if e is not None:
        raise OcrrError(
            f"no Ray cluster answers at --address {address} ({e}). Start it there (ray start --head), "
            "or give its address, e.g. --address auto on one of its machines."
        )


def make_executor(name: str, jobs: int | None = None, address: str | None = None):
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise OcrrError(f"--jobs {jobs!r}: give a whole number of workers >= 1 (default: one per core).")
    if name == "serial":
        return SerialExecutor()
    if name == "local":
        return LocalExecutor(jobs)
    if name == "ray":
        return RayExecutor(jobs, address)
    raise OcrrError(f"unknown executor {name!r}. Use local (processes on this machine), ray or serial.")
