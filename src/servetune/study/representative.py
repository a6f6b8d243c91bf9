"""Speculative decoding measured on prompts that mean something.

servetune's own prompts are random tokens (exact lengths, a nonce each): right for timing a
prefill or a decode step, meaningless for speculative decoding, whose speed is its acceptance
rate and whose acceptance depends on the text (the field reports: "always re-sweep on a
representative prompt"). A study that sweeps `speculative-config` is warned, by `plan` and at
every `tune` start, of each scenario whose prompts are not the user's own text (`dataset:` a
JSONL of `{prompt}` lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.speculative import FLAG
from ..errors import ServetuneError

if TYPE_CHECKING:
    from .spec import Loc, StudySpec


def swept_speculative(spec: StudySpec) -> str | None:
    """The space key that sweeps speculative decoding, None when none does."""
    return next((k for k in spec.space if k == FLAG or k.startswith(f"{FLAG}.")), None)


def random_prompt_scenarios(spec: StudySpec) -> list[str]:
    """Scenarios whose prompts are random tokens: no dataset, or one without any prompt text (a
    dataset that cannot be read here is not judged: where it is read, it is reported)."""
    from ..load.dataset import read_dataset

    out = []
    for scenario in spec.scenarios:
        texts = False
        if scenario.dataset is not None:
            try:
                texts = any(row.prompt for row in read_dataset(scenario.dataset))
            except (OSError, ServetuneError):
                continue
        if not texts:
            out.append(scenario.name)
    return out


def speculative_warnings(spec: StudySpec) -> list[tuple[Loc, str]]:
    """One warning when speculative decoding is swept on random-token prompts."""
    key = swept_speculative(spec)
    if key is None:
        return []
    names = random_prompt_scenarios(spec)
    if not names:
        return []
    return [(("space", key), f"speculative decoding is swept on random-token prompts (scenario(s) "
                             f"{', '.join(names)}): its acceptance there says nothing about your traffic; "
                             "give each scenario `dataset:` a JSONL of your own prompts ({\"prompt\": ...} a line)")]
