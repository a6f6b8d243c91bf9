"""Prompts with exactly the target token count under the server's tokenizer.

A prompt is token ids turned into text: [shared prefix] + [nonce] + [body]. The nonce is
random per request *and per run* (a fresh salt), so neither the requests of one run nor a
replicate on the same server can hit the prefix cache, except through the intended shared
prefix. Text is decoded from ids and re-encoded; where the round trip changes the count
(BPE merges), the tail is trimmed or extended until it is exact.

Tokenizers: the model directory's tokenizer.json through the `tokenizers` library, or the
server's /tokenize and /detokenize endpoints. For the chat endpoint the chat template's
tokens are measured (the tokenizer_config.json template rendered with jinja2, or /tokenize
with messages) and taken off the content.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import numpy as np

from ..errors import ServetuneError

NONCE_TOKENS = 8
_MAX_FIT_ROUNDS = 16
# Ids sampled for the remote tokenizer, whose vocabulary is unknown: ordinary merges in every
# tokenizer large enough to serve, clear of the low ids where byte and control tokens sit.
_REMOTE_ID_RANGE = (100, 4000)


class Tokenizer(Protocol):
    """What prompt synthesis needs from a tokenizer; every call happens before the run."""

    candidate_ids: np.ndarray

    async def encode(self, text: str) -> list[int]: ...
    async def decode(self, ids: list[int]) -> str: ...
    async def chat_len(self, content: str) -> int | None: ...


class LocalTokenizer:
    """tokenizer.json (+ tokenizer_config.json's chat template) from a model directory."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ServetuneError(f"no tokenizer.json in {model_dir}")
        self._tok = HFTokenizer.from_file(str(path))
        special = set(self._tok.get_added_tokens_decoder())
        vocab = self._tok.get_vocab_size(with_added_tokens=True)
        self.candidate_ids = np.asarray([i for i in range(vocab) if i not in special], dtype=np.int64)
        self._template = _chat_template(model_dir)

    async def encode(self, text: str) -> list[int]:
        # vLLM's completions endpoint tokenizes with add_special_tokens=True.
        return self._tok.encode(text, add_special_tokens=True).ids

    async def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    async def chat_len(self, content: str) -> int | None:
        if self._template is None:
            return None
        rendered = self._template.render(
            messages=[{"role": "user", "content": content}], add_generation_prompt=True,
            bos_token="", eos_token="")
        # vLLM tokenizes a rendered chat prompt without adding special tokens again.
        return len(self._tok.encode(rendered, add_special_tokens=False).ids)


def _chat_template(model_dir: Path) -> Any:
    cfg_path = model_dir / "tokenizer_config.json"
    if not cfg_path.is_file():
        return None
    try:
        template = json.loads(cfg_path.read_text()).get("chat_template")
    except json.JSONDecodeError as exc:
        raise ServetuneError(f"{cfg_path}: not JSON ({exc.msg})") from None
    if not isinstance(template, str):
        return None
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)


class RemoteTokenizer:
    """The server's /tokenize and /detokenize (vLLM's OpenAI server offers both)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str) -> None:
        self._s, self._url, self._model = session, base_url.rstrip("/"), model
        self.candidate_ids = np.arange(*_REMOTE_ID_RANGE, dtype=np.int64)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._s.post(self._url + path, json={"model": self._model, **body}) as resp:
            if resp.status != 200:
                raise ServetuneError(f"{self._url}{path} answered HTTP {resp.status}: {(await resp.text())[:200]}")
            data: dict[str, Any] = await resp.json()
            return data

    async def encode(self, text: str) -> list[int]:
        return list((await self._post("/tokenize", {"prompt": text, "add_special_tokens": True}))["tokens"])

    async def decode(self, ids: list[int]) -> str:
        return str((await self._post("/detokenize", {"tokens": ids}))["prompt"])

    async def chat_len(self, content: str) -> int | None:
        try:
            data = await self._post("/tokenize", {
                "messages": [{"role": "user", "content": content}], "add_generation_prompt": True})
        except ServetuneError:
            return None
        return int(data["count"])


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int           # the count under the tokenizer, as the server should report it
    exact: bool           # tokens == the target


class PromptFactory:
    """Builds the prompts of one Run; `salt` makes its nonces differ from every other run's."""

    def __init__(self, tokenizer: Tokenizer, *, seed: int, chat: bool = False,
                 shared_prefix_len: int = 0, salt: int | None = None) -> None:
        self.tok, self.chat = tokenizer, chat
        self._rng = np.random.default_rng(seed)
        self._nonce_rng = np.random.default_rng(secrets.randbits(64) if salt is None else salt)
        # The prefix depends on the seed alone: the same across requests and replicates.
        self._prefix_ids = self._draw(self._rng, shared_prefix_len)
        self._chat_overhead: int | None = None

    def _draw(self, rng: np.random.Generator, n: int) -> list[int]:
        return rng.choice(self.tok.candidate_ids, size=max(n, 0)).tolist() if n > 0 else []

    async def chat_overhead(self) -> int:
        """Tokens the chat template adds around a user message (0 when unknown)."""
        if self._chat_overhead is None:
            probe = await self.tok.decode(self._draw(self._rng, 16))
            full = await self.tok.chat_len(probe)
            self._chat_overhead = 0 if full is None else full - len(await self.tok.encode(probe))
        return self._chat_overhead

    async def make(self, target: int, *, with_prefix: bool) -> Prompt:
        """A prompt of exactly `target` tokens as the server counts them (template included)."""
        overhead = await self.chat_overhead() if self.chat else 0
        content_target = target - overhead
        head = (self._prefix_ids if with_prefix else []) + self._draw(self._nonce_rng, NONCE_TOKENS)
        if content_target < len(head):
            # Too short for prefix + nonce: keep the nonce's start, it is what defeats the cache.
            head = self._draw(self._nonce_rng, max(content_target, 1))
        ids = head + self._draw(self._rng, content_target - len(head))
        return await self.from_ids(ids, keep=len(head), target=target)

    async def from_ids(self, ids: list[int], *, keep: int, target: int) -> Prompt:
        """The text of `ids` fitted to exactly `target` tokens as the server counts them (chat
        template included): the tail after the first `keep` ids is trimmed or extended."""
        overhead = await self.chat_overhead() if self.chat else 0
        text, n = await self._fit(ids, keep, max(target - overhead, 1))
        return Prompt(text=text, tokens=n + overhead, exact=n + overhead == target)

    def draw_nonce(self, n: int) -> list[int]:
        """`n` ids from this run's nonce stream: content no other request or run shares."""
        return self._draw(self._nonce_rng, n)

    async def with_nonce(self, text: str) -> Prompt:
        """A dataset prompt behind a fresh nonce; its length is whatever the tokenizer counts."""
        full = (await self.tok.decode(self._draw(self._nonce_rng, NONCE_TOKENS))) + " " + text
        n = (await self.tok.chat_len(full)) if self.chat else None
        n = n if n is not None else len(await self.tok.encode(full))
        return Prompt(text=full, tokens=n, exact=True)

    async def _fit(self, ids: list[int], keep: int, target: int) -> tuple[str, int]:
        n = -1
        text = ""
        for _ in range(_MAX_FIT_ROUNDS):
            text = await self.tok.decode(ids)
            n = len(await self.tok.encode(text))
            if n == target:
                return text, n
            if n > target:
                ids = ids[: max(keep, len(ids) - (n - target))]
            else:
                ids = ids + self._draw(self._rng, target - n)
        return text, n
