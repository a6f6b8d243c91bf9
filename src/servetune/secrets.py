"""What is secret (API keys, tokens, passwords), where a secret's value comes from, and masking
known secret values out of text.

A secret is an environment variable of the server. Its value is given literally in the study
file or read from servetune's own environment at launch; either way it is never part of a
Config, the store, a report or an emitted config: those carry only its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import ServetuneError

MASK = "***"
# Words that make a variable secret wherever they stand in its name ...
_ANYWHERE = re.compile(r"(?:^|_)(?:SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)", re.IGNORECASE)
# ... and words that do so only as its last word: vLLM's own knobs use TOKEN and KEY inside names
# (VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD, S3_ACCESS_KEY_ID), and those must stay tunable.
_AT_END = re.compile(r"(?:^|_)(?:TOKEN|KEY|APIKEY|AUTH)$", re.IGNORECASE)
# An engine's flags whose value is a secret are its own (`EngineProfile.secret_flags`: vLLM's
# `api-key` -> VLLM_API_KEY); this module knows secrets by variable name only.
# Shorter values are not credentials, and masking them would garble every number of a log.
MIN_MASKED_LENGTH = 4


def is_secret_name(name: str) -> bool:
    """True for variable names that hold credentials (HF_TOKEN, VLLM_API_KEY, DB_PASSWORD)."""
    return bool(_ANYWHERE.search(name) or _AT_END.search(name))


def flag_value_secret(value: object) -> str | None:
    """The secret a secret flag carries, or None for a switch (`hf-token: true` = the stored login)."""
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        return None
    return str(value)


@dataclass(frozen=True)
class Secrets:
    """A study's secret variables: their names (stored) and the values given in the study file
    (never stored). A name without a literal value is read from servetune's environment."""

    names: tuple[str, ...] = ()
    literal: Mapping[str, str] = field(default_factory=dict, repr=False)

    def resolve(self, environ: Mapping[str, str]) -> dict[str, str]:
        """name -> value for every secret; a secret found nowhere is an error, raised before any boot."""
        missing = [n for n in self.names if n not in self.literal and n not in environ]
        if missing:
            raise ServetuneError(f"secret {', '.join(missing)} is not set: export it in the environment "
                                 "servetune runs in (the study names it in engine.secret_env)")
        return {n: self.literal[n] if n in self.literal else environ[n] for n in self.names}


class Redactor:
    """Replaces known secret values in text with `***` (longest first, so a value that contains
    another is masked whole)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values = tuple(sorted({v for v in values if len(v) >= MIN_MASKED_LENGTH}, key=len, reverse=True))

    @classmethod
    def for_environment(cls, env: Mapping[str, str], names: Iterable[str] = ()) -> Redactor:
        """Masks the values of `names` and of every secret-looking variable of `env`."""
        wanted = set(names)
        return cls(v for k, v in env.items() if k in wanted or is_secret_name(k))

    def __call__(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, MASK)
        return text
