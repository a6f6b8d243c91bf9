"""How far a booting server has got, read from its log as it grows.

A cold first boot of a large model takes many minutes (weights, torch.compile, kernel autotuning,
CUDA graph capture: 11-25 min after a cache wipe in the field reports), and all that time its log
keeps moving. A boot that is stuck stops writing. The health wait (launch.wait_healthy) therefore
gives up when the log has not moved for a stall window, and names the phase it stopped in, rather
than at one fixed deadline that a healthy cold boot can overrun."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

# The last matching line sets the phase; vLLM 0.26's wording (CPU and GPU builds), checked in order:
# the engine's config dump first, as it names every backend and compile option in one line.
PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Initializing a V1 LLM engine|non-default args|Resolved architecture|"
                r"Using max model len", re.I), "initializing the engine"),
    (re.compile(r"Application startup complete|Starting vLLM API server|Started server process|"
                r"Waiting for application startup"), "starting the API server"),
    (re.compile(r"Capturing CUDA graphs?|Graph capturing finished"), "capturing CUDA graphs"),
    (re.compile(r"KV cache size|Available KV cache memory|Memory profiling|profile run|"
                r"determine_available_memory|Maximum concurrency for", re.I), "profiling memory, sizing the KV cache"),
    (re.compile(r"torch\.compile (?:took|is)|Compiling a graph|Dynamo bytecode|\[Auto[Tt]uner\]"),
     "compiling"),
    (re.compile(r"Starting to load model|Loading weights|Loading safetensors|checkpoint shards|"
                r"Model loading took|Initializing model took|Downloading|\.safetensors", re.I), "loading the model"),
)
NOT_STARTED = "starting the process"


def phase_of(line: str) -> str | None:
    """The boot phase a log line marks, or None for a line that marks none."""
    for pattern, phase in PHASES:
        if pattern.search(line):
            return phase
    return None


@dataclass
class BootProgress:
    """A growing log, read from where the last poll stopped: whether it moved, the phase it shows."""

    log_path: Path
    phase: str = NOT_STARTED
    last_line: str = ""
    _offset: int = 0
    _moved_at: float = field(default_factory=time.monotonic)

    def poll(self) -> bool:
        """Read what the log gained since the last poll; True when it grew."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            return False
        if not chunk:
            return False
        self._offset += len(chunk)
        self._moved_at = time.monotonic()
        for line in chunk.decode(errors="replace").splitlines():  # \r too: progress bars
            if line.strip() and not line.startswith("# servetune launch:"):
                self.last_line = line.strip()
                self.phase = phase_of(line) or self.phase
        return True

    def silent_s(self) -> float:
        """Seconds since the log last grew."""
        return time.monotonic() - self._moved_at

    def where(self) -> str:
        """The phase, and the last line that says so, for a failure's detail."""
        last = f" (last line: {self.last_line[:200]})" if self.last_line else " (nothing logged)"
        return f"{self.phase}{last}"
