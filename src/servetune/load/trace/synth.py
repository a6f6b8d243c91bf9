"""Prompts of a trace's requests, with exactly the trace's prefix structure.

A hash id's block is `block_tokens` ids drawn from a generator seeded by the Run's salt and the
id, so every request that holds the id at the same place in the same chain sends the same
tokens there; a block of another id is drawn apart (its first tokens differ, so no KV block of
the server spans two ids). What a request needs past its blocks comes from the Run's nonce stream,
and a request without hash ids is a plain nonce-led prompt: nothing is shared that the trace
does not share, within a Run or across Runs (a fresh salt each).
"""

from __future__ import annotations

import numpy as np

from ..prompts import Prompt, PromptFactory

_MASK = (1 << 63) - 1


class TracePrompts:
    def __init__(self, factory: PromptFactory, salt: int, block_tokens: int) -> None:
        self.factory, self.salt, self.block_tokens = factory, salt & _MASK, block_tokens

    def block(self, hash_id: int) -> list[int]:
        rng = np.random.default_rng((self.salt, hash_id & _MASK))
        ids: list[int] = rng.choice(self.factory.tok.candidate_ids, size=self.block_tokens).tolist()
        return ids

    async def make(self, target: int, hash_ids: tuple[int, ...] | None) -> Prompt:
        """A prompt of exactly `target` tokens as the server counts them, its blocks first."""
        if not hash_ids:
            return await self.factory.make(target, with_prefix=False)
        overhead = await self.factory.chat_overhead() if self.factory.chat else 0
        content = max(target - overhead, 1)
        ids: list[int] = []
        for h in hash_ids:
            if len(ids) >= content:
                break
            ids.extend(self.block(h))
        shared = min(len(ids), content)
        ids = ids[:content] + self.factory.draw_nonce(content - shared)
        # The fit may only touch what follows the blocks; a prompt that is all blocks keeps its last
        # block's tail free to move, as the trace's last block is the request's own.
        keep = shared if shared < content else max(content - self.block_tokens // 2, 0)
        return await self.factory.from_ids(ids, keep=keep, target=target)
