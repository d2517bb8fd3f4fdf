"""Progress displays of the ``ocrr`` command (rich): the CLI layer, not the engine."""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ocrr.cli.common import print_warning
from ocrr.engine import sweep
from ocrr.engine.sweep import Task


class RunProgress:
    """Encoding, then one bar over the runs of ``ocrr run``; the description follows the run."""

    def __init__(self, console, quiet: bool):
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=quiet,
        )
        self.runs: TaskID | None = None

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def embedding(self, total: int):
        task = self.bar.add_task("encoding texts (cached afterwards)", total=total)
        return lambda n: self.bar.advance(task, n)

    def checkpoints(self, n_runs: int):
        """A callback (task, checkpoint) that advances once per finished run."""

        def on_checkpoint(task, cp):
            if self.runs is None:
                self.runs = self.bar.add_task("runs", total=n_runs)
            runs = self.runs
            self.bar.update(runs, description=f"seed {task.seed} · {task.system} · item {cp.step}")
            if cp.last:
                self.bar.advance(runs, 1)

        return on_checkpoint


class SweepProgress(sweep.Progress):
    """The whole grid in one bar: runs done / running / left, elapsed and an estimate."""

    def __init__(self, console=None, quiet: bool = False):
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("done"),
            TextColumn("{task.fields[status]}"),
            TextColumn("· elapsed"),
            TimeElapsedColumn(),
            TextColumn("· estimate"),
            TimeRemainingColumn(),
            console=console,
            disable=quiet,
            transient=False,
        )
        self.task: TaskID | None = None  # the grid's bar, added by begin()
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
        self.task = self.bar.add_task(
            f"{total} runs, {skipped} done before:" if skipped else f"{total} runs:", total=todo, status=self._status()
        )

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
        if self.task is not None:
            self.bar.update(self.task, advance=1, status=self._status())

    def end(self) -> None:
        if self.live:
            self.bar.stop()
            self.live = False

    def notice(self, text: str) -> None:
        print_warning(text)
