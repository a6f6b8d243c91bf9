"""Live progress of a study in the terminal: trials done/total with an ETA from measured times."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..store import TrialRow


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
        self._requests = self._progress.add_task("run", total=1, info="", visible=False)

    def __enter__(self) -> StudyDisplay:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def trials(self, done: int, total: int, eta_s: float | None) -> None:
        info = f"ETA {format_duration(eta_s)}" if eta_s is not None else ""
        self._progress.update(self._trials, completed=done, total=max(total, done, 1), info=info)

    def trial_step(self, trial: TrialRow, label: str, scenario: str | None, replicate: int,
                   done: int, total: int) -> None:
        if scenario is None:
            self._progress.update(self._requests, visible=True, completed=0, total=1,
                                  description=f"#{trial.seq} {trial.role}",
                                  info=f"booting {label}")
            return
        self._progress.update(self._requests, visible=True, completed=done, total=max(total, 1),
                              description=f"#{trial.seq} {trial.role}",
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
