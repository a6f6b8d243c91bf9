"""Token-exact prompts on the real tokenizer of models/tiny."""

from __future__ import annotations

import asyncio

import pytest

from servetune.load.prompts import NONCE_TOKENS, LocalTokenizer, PromptFactory
from tests.conftest import tiny_model_dir


@pytest.fixture(scope="module")
def tok() -> LocalTokenizer:
    return LocalTokenizer(tiny_model_dir())


def _make(factory: PromptFactory, target: int, with_prefix: bool = False):
    return asyncio.run(factory.make(target, with_prefix=with_prefix))


@pytest.mark.parametrize("target", [1, 2, 9, 100, 513, 2048, 8192])
def test_completion_prompts_have_exact_token_count(tok: LocalTokenizer, target: int) -> None:
    factory = PromptFactory(tok, seed=1)
    p = _make(factory, target)
    assert p.exact and p.tokens == target
    assert len(tok._tok.encode(p.text, add_special_tokens=True).ids) == target


def test_chat_prompts_count_the_template(tok: LocalTokenizer) -> None:
    factory = PromptFactory(tok, seed=1, chat=True)
    overhead = asyncio.run(factory.chat_overhead())
    # <|im_start|> user ... <|im_end|> <|im_start|> assistant
    assert overhead == 5
    p = _make(factory, 300)
    assert p.exact and p.tokens == 300
    assert len(tok._tok.encode(p.text).ids) == 300 - overhead


def test_each_prompt_starts_with_its_own_nonce(tok: LocalTokenizer) -> None:
    factory = PromptFactory(tok, seed=3)
    heads = {tuple(tok._tok.encode(_make(factory, 64).text).ids[:NONCE_TOKENS]) for _ in range(50)}
    assert len(heads) == 50
    # a second run with the same seed gets other nonces (fresh salt), the same body lengths
    other = PromptFactory(tok, seed=3)
    assert tok._tok.encode(_make(other, 64).text).ids[:NONCE_TOKENS] not in [list(h) for h in heads]


def test_shared_prefix_is_shared_and_counted_inside_the_length(tok: LocalTokenizer) -> None:
    factory = PromptFactory(tok, seed=5, shared_prefix_len=32)
    a, b = (tok._tok.encode(_make(factory, 128, with_prefix=True).text).ids for _ in range(2))
    c = tok._tok.encode(_make(factory, 128, with_prefix=False).text).ids
    assert len(a) == len(b) == len(c) == 128
    assert a[:32] == b[:32] and a[32:32 + NONCE_TOKENS] != b[32:32 + NONCE_TOKENS]
    assert c[:32] != a[:32]
    # the prefix depends on the seed only, so replicates share it too
    again = PromptFactory(tok, seed=5, shared_prefix_len=32)
    assert tok._tok.encode(_make(again, 128, with_prefix=True).text).ids[:32] == a[:32]


def test_dataset_prompt_gets_a_nonce_and_its_counted_length(tok: LocalTokenizer) -> None:
    factory = PromptFactory(tok, seed=0)
    p = asyncio.run(factory.with_nonce("t5 t6 t7"))
    assert p.text.endswith("t5 t6 t7") and p.tokens == NONCE_TOKENS + 3
