"""Live progress of a study in the terminal: trials done/total with an ETA from measured times,
and one line per slot with the trial it runs."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ..store import Trial


class StudyDisplay:
    def __init__(self, console: Console | None = None, *, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not enabled,
            transient=False,
        )
        self._trials = self._progress.add_task("trials", total=1, info="")
        self._slot_names: list[str] = []  # set by use_slots when there are several
        self._requests = [self._progress.add_task("run", total=1, info="", visible=False)]

    def use_slots(self, names: list[str]) -> None:
        """One progress line per slot; `names` say where each runs (shown when there are several)."""
        while len(self._requests) < len(names):
            self._requests.append(self._progress.add_task("run", total=1, info="", visible=False))
        self._slot_names = names if len(names) > 1 else []

    def _line(self, trial: Trial) -> tuple[TaskID, str]:
        task = self._requests[trial.slot % len(self._requests)]
        where = f"{self._slot_names[trial.slot]}: " if trial.slot < len(self._slot_names) else ""
        return task, f"{where}#{trial.seq} {trial.role}"

    def __enter__(self) -> StudyDisplay:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def trials(self, done: int, total: int, eta_s: float | None) -> None:
        info = f"ETA {format_duration(eta_s)}" if eta_s is not None else ""
        self._progress.update(self._trials, completed=done, total=max(total, done, 1), info=info)

    def trial_step(self, trial: Trial, label: str, scenario: str | None, replicate: int,
                   done: int, total: int) -> None:
        task, description = self._line(trial)
        if scenario is None:
            self._progress.update(task, visible=True, completed=0, total=1, description=description,
                                  info=f"booting {label}")
            return
        self._progress.update(task, visible=True, completed=done, total=max(total, 1), description=description,
                              info=f"{label} | {scenario} r{replicate}")

    def note(self, message: str) -> None:
        self._progress.console.print(message)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
