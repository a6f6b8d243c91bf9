"""Durations as people write them: `90`, `90s`, `30m`, `2h`, `1h30m`, `1d`."""

from __future__ import annotations

import math
import re

from ..errors import ServetuneError

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_SECONDS = 30 * 86400.0  # a month: anything longer is a typo, not a soak


def parse_duration(text: str, option: str) -> float:
    """Seconds of `text`; a bad value is a ServetuneError naming `option`."""
    s = text.strip().lower()
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ServetuneError(f"{option} {text!r}: expected a duration such as 90s, 30m, 2h or 1h30m")
        total += float(m.group(1)) * _SECONDS[m.group(2)]
        pos = m.end()
    if not s or not math.isfinite(total) or total <= 0:
        raise ServetuneError(f"{option} {text!r}: expected a positive duration such as 90s, 30m, 2h or 1h30m")
    if total > MAX_SECONDS:
        raise ServetuneError(f"{option} {text!r}: longer than {MAX_SECONDS / 86400:g} days")
    return total


def format_duration(seconds: float) -> str:
    """`2h05m`, `4m10s`, `7.5s`: for lines and reports."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
