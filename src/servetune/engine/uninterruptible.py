"""Hold Ctrl-C and SIGTERM while a server is being stopped, deliver them afterwards.

The runner turns SIGTERM into KeyboardInterrupt, which may surface anywhere: in the middle of a
teardown it would skip the SIGKILL of a server that ignores SIGTERM and leave it up. Deferring
the signals makes a stop run to its end; the user's interrupt still arrives, right after.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_deferred(signals: tuple[signal.Signals, ...] = DEFERRED_SIGNALS) -> Iterator[list[int]]:
    """Record `signals` instead of acting on them while the block runs; then restore the earlier
    handlers and raise each recorded signal once (Ctrl-C twice is one interrupt, after the block).
    Outside the main thread Python cannot install handlers: the block then runs unprotected."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def record(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, record) for sig in signals}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            # None: a handler installed outside Python, which cannot be put back; default is closest.
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)
