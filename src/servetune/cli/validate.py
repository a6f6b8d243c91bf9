"""Option values checked at the CLI's edge, before any boot or measurement: one line naming the
option and what is wrong (exit 2). Every command that takes a URL, a timeout, a seed, a count or a
base command calls these, so the same value is refused the same way everywhere."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ServetuneError

# numpy's generators take seeds in [0, 2**64); one range for every command.
MAX_SEED = 2**63 - 1
# Above these a run would spend minutes making prompts or hold more requests than memory: no
# server's context is 2**24 tokens long, and a million requests is some hours of any workload.
MAX_TOKENS = 2**24
MAX_REQUESTS = 1_000_000
# A timeout beyond a week is a typo, and asyncio cannot represent much larger ones.
MAX_SECONDS = 7 * 24 * 3600.0


def url(value: str, option: str = "--url") -> str:
    """An http(s) base URL with a host and a valid port, without a trailing slash."""
    where = f"{option} {value!r}"
    if not value or value != value.strip() or any(c.isspace() or not c.isprintable() for c in value):
        raise ServetuneError(f"{where}: expected a URL such as http://127.0.0.1:8000 (no spaces)")
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # an unclosed [IPv6 bracket
        raise ServetuneError(f"{where}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        hint = f"; did you mean http://{value}?" if "://" not in value else ""
        raise ServetuneError(f"{where}: the scheme must be http or https{hint}")
    try:
        port = parts.port
    except ValueError:
        raise ServetuneError(f"{where}: the port must be a number from 1 to 65535") from None
    if not parts.hostname:
        raise ServetuneError(f"{where}: no host in it")
    if port == 0:
        raise ServetuneError(f"{where}: the port must be a number from 1 to 65535")
    if parts.query or parts.fragment:
        raise ServetuneError(f"{where}: a base URL has no query or fragment")
    return value.rstrip("/")


def seconds(value: float | None, option: str) -> float | None:
    """A positive, finite duration (None: the default applies)."""
    if value is None:
        return None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise ServetuneError(f"{option} {value:g}: must be a number of seconds above 0 and at most {MAX_SECONDS:g}")
    return value


def number(value: float | None, option: str, *, low: float, high: float = math.inf,
           low_open: bool = False) -> float | None:
    """A finite number in [low, high] (or (low, high] with `low_open`); None passes."""
    if value is None:
        return None
    below = value <= low if low_open else value < low
    if not math.isfinite(value) or below or value > high:
        bound = f"above {low:g}" if low_open else f"at least {low:g}"
        top = f" and at most {high:g}" if math.isfinite(high) else ""
        raise ServetuneError(f"{option} {value:g}: must be a finite number {bound}{top}")
    return value


def count(value: int | None, option: str, *, low: int = 1, high: int) -> int | None:
    """An integer in [low, high]; None passes."""
    if value is not None and not low <= value <= high:
        raise ServetuneError(f"{option} {value}: must be from {low} to {high:,}")
    return value


def seed(value: int | None, option: str = "--seed") -> int | None:
    return count(value, option, low=0, high=MAX_SEED)


def tokens(value: int | None, option: str) -> int | None:
    return count(value, option, high=MAX_TOKENS)


def requests(value: int | None, option: str) -> int | None:
    return count(value, option, high=MAX_REQUESTS)


def command(text: str | None, option: str = "--command") -> list[str] | None:
    """A base command as its words (None: the default command); an empty or unbalanced one is refused
    rather than silently replaced by the default."""
    if text is None:
        return None
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ServetuneError(f"{option} {text!r}: {exc}") from None
    if not words:
        raise ServetuneError(f"{option} {text!r}: empty; leave the option out for the default command")
    return words


def tokenizer_dir(path: Path | None, option: str = "--tokenizer") -> Path | None:
    """A directory whose tokenizer.json loads (loaded here once, so a broken file is refused before
    the run rather than failing it midway)."""
    if path is None:
        return None
    if not path.is_dir():
        raise ServetuneError(f"{option} {path}: not a directory")
    file = path / "tokenizer.json"
    if not file.is_file():
        # Not an error: without tokenizer.json the server's /tokenize is used (bench, capacity, drift).
        return path
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers library raises its own (untyped) exception for any bad file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ServetuneError(f"{option} {path}: {file.name} does not load: {reason}") from None
    return path


def rate(value: float | None, option: str = "--rate") -> float | None:
    """Requests per second above 0; `inf` (all at once) is a rate, NaN is not."""
    if value is not None and (math.isnan(value) or value <= 0):
        raise ServetuneError(f"{option} {value:g}: must be a number of requests per second above 0 (or inf)")
    return value


def load_options(values: dict[str, float | int | None]) -> None:
    """The workload options bench, capacity and drift share, by option name; None: not given."""
    checks: dict[str, Callable[[Any, str], object]] = {
        "--input-len": tokens, "--output-len": tokens, "--concurrency": requests, "--num-prompts": requests,
        "--warmups": lambda v, o: count(v, o, low=0, high=MAX_REQUESTS), "--seed": seed, "--rate": rate,
        "--burstiness": lambda v, o: number(v, o, low=0, high=1e6, low_open=True),
        "--duration": seconds, "--stall-timeout": seconds, "--run-timeout": seconds,
        "--connect-timeout": seconds, "--first-byte-timeout": seconds,
    }
    for option, value in values.items():
        checks[option](value, option)
