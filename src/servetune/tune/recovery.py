"""Recovery after a killed tuner: stop what its unfinished trials left running, reopen them.

Only trials whose owning session is gone are touched. A trial owned by a live tuner (one that
did not take the study lock: an older servetune, or another host on a shared file system) is
refused with an error, never taken for abandoned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine import stop_if_ours
from ..errors import ServetuneError
from ..store import StudyStore, Trial
from .lock import describe_holder, session_is_live


@dataclass(frozen=True)
class Leftovers:
    """What finds an abandoned trial's server and its children: the recorded pid, group and
    create time, the launch token in their environment, and (for stores without a token)
    processes created before the owner's last heartbeat. Plain data, so the search can run on
    the node where the trial ran (a Ray slot's node)."""

    pid: int | None
    pgid: int | None
    create_time: float | None
    launch_token: str | None
    created_before: float | None

    @classmethod
    def of(cls, store: StudyStore, trial: Trial) -> Leftovers:
        owner = store.session(trial.session_id) if trial.session_id is not None else None
        return cls(trial.server_pid, trial.server_pgid, trial.server_create_time, trial.launch_token,
                   owner.last_seen if owner is not None else None)

    def stop(self) -> bool:
        """Stop them on this host; True when something was."""
        return stop_if_ours(self.pid, self.pgid, self.create_time, launch_token=self.launch_token,
                            created_before=self.created_before)


StopFn = Callable[[Trial, Leftovers], bool]


def stop_on_this_host(_trial: Trial, leftovers: Leftovers) -> bool:
    return leftovers.stop()


def reclaim_unfinished(store: StudyStore, session_id: int, note: Callable[[str], None],
                       stop: StopFn = stop_on_this_host) -> list[Trial]:
    """Stop the leftovers of every unfinished trial (with `stop`: on this host, or where the
    trial ran) and reopen it under `session_id`; returns the reopened trials, to be run again
    (their stored runs count)."""
    unfinished = store.unfinished_trials()
    for trial in unfinished:
        _refuse_if_owner_lives(store, trial, session_id)
    reopened = []
    for trial in unfinished:
        if stop(trial, Leftovers.of(store, trial)):
            note(f"stopped server pid {trial.server_pid or '?'} left by an interrupted run of trial #{trial.seq}")
        store.reopen_trial(trial.id, session_id=session_id)
        reopened.append(store.trial(trial.id))
    return reopened


def _refuse_if_owner_lives(store: StudyStore, trial: Trial, session_id: int) -> None:
    if trial.session_id is None or trial.session_id == session_id:
        return
    owner = store.session(trial.session_id)
    if owner is not None and session_is_live(owner):
        holder = (describe_holder(owner.pid, owner.host, owner.started_at) if owner.pid is not None
                  else f"a servetune session that heartbeated {time.time() - owner.last_seen:.0f} s ago")
        raise ServetuneError(f"{store.path.parent}: trial #{trial.seq} is being run by {holder}; "
                             "wait for it or stop it")
