"""The line a measuring command shows while the server sends nothing: for how long, and when the run
gives up on it. Silent for the first seconds (a healthy server's pauses), then on screen: a stalled
server is seen waiting, not mistaken for a slow one."""

from __future__ import annotations

import time

from rich.console import Console, ConsoleOptions, RenderResult
from rich.progress import ProgressColumn, Task
from rich.text import Text

from ..load.client import last_read_ns

QUIET_S = 5.0


class Silence:
    """Seconds since the server was last heard (a stream read in this process, or `heard()`), against
    the stall limit and the run's deadline (both measured from when this was made, or `restart()`)."""

    def __init__(self, stall_timeout_s: float, run_timeout_s: float) -> None:
        self.stall_timeout_s, self.run_timeout_s = stall_timeout_s, run_timeout_s
        self.restart()

    def restart(self) -> None:
        self.started = self._heard = time.perf_counter_ns()

    def heard(self) -> None:
        self._heard = time.perf_counter_ns()

    def text(self) -> Text:
        now = time.perf_counter_ns()
        quiet = (now - max(self._heard, last_read_ns())) / 1e9
        if quiet < QUIET_S:
            return Text("")
        run_left = self.run_timeout_s - (now - self.started) / 1e9
        left = max(min(self.stall_timeout_s - quiet, run_left), 0.0)
        return Text(f"waiting for the server: no data for {quiet:.0f} s; giving up in {left:.0f} s "
                    "(--stall-timeout, --run-timeout)", style="yellow")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.text()  # as a Live renderable: redrawn a few times a second


class SilenceColumn(ProgressColumn):
    """`Silence` as a column of a progress bar."""

    def __init__(self, silence: Silence) -> None:
        super().__init__()
        self.silence = silence

    def render(self, task: Task) -> Text:
        return self.silence.text()
