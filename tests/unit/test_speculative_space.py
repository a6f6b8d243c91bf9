"""Speculative decoding as a study parameter: whole mappings or one field of the baseline's."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from servetune.engine import speculative
from servetune.engine.config import render_flags
from servetune.errors import ServetuneError
from servetune.report.emit import Deployment, write_snippets
from servetune.search.base import Tried
from servetune.search.grid import Grid
from servetune.search.optuna_tpe import OptunaTPE
from servetune.study import parse_study

BASE = """\
name: spec
engine:
  model: ./models/tiny
  args: {{load-format: dummy, speculative-config: {{method: ngram, prompt_lookup_max: 4, num_speculative_tokens: 2}}}}
space:
{space}
scenarios:
  - {{name: short, input_len: 64, output_len: 16}}
strategy: grid
"""


def _spec(space: str):
    return parse_study(BASE.format(space=space), "study.yaml")


def test_tokens_key_sweeps_n_and_keeps_the_rest_of_the_mapping() -> None:
    spec = _spec("  speculative_config.num_speculative_tokens: [1, 3, 6]")
    assert list(spec.space) == [speculative.TOKENS_PARAM]  # flag part normalised, field kept verbatim
    configs = [spec.config_for({speculative.TOKENS_PARAM: n}) for n in (1, 3, 6)]
    assert [speculative.speculative_tokens(c) for c in configs] == [1, 3, 6]
    assert all(speculative.method(c) == "ngram" and c.flags[speculative.FLAG]["prompt_lookup_max"] == 4
               for c in configs)
    assert all(speculative.differs_only_in_tokens(c, spec.baseline_config()) for c in configs)
    grid = [p for p, _ in Grid(spec).candidates(Grid(spec).combinations(), Tried.of(spec, []))]
    assert grid == [{speculative.TOKENS_PARAM: n} for n in (1, 3, 6)]


def test_mapping_values_are_parameters_with_a_stable_key() -> None:
    spec = _spec("  speculative-config:\n    - null\n    - {method: ngram, num_speculative_tokens: 3}\n"
                 "    - {num_speculative_tokens: 5, method: ngram}")
    on = spec.config_for({"speculative-config": {"method": "ngram", "num_speculative_tokens": 3}})
    reordered = spec.config_for({"speculative-config": {"num_speculative_tokens": 3, "method": "ngram"}})
    assert on.key() == reordered.key()
    assert speculative.speculative_tokens(spec.config_for({"speculative-config": None})) == 0
    assert spec.space["speculative-config"].contains({"method": "ngram", "num_speculative_tokens": 5})
    # Optuna takes mapping choices (kept by index) without a warning turned error
    proposal = OptunaTPE(spec).propose([])
    assert proposal is not None and speculative.FLAG in proposal.params


def test_duplicate_mappings_are_refused_whatever_their_key_order() -> None:
    with pytest.raises(ServetuneError, match="duplicates"):
        _spec("  speculative-config:\n    - {method: ngram, num_speculative_tokens: 3}\n"
              "    - {num_speculative_tokens: 3, method: ngram}")


def test_a_field_needs_a_mapping_in_the_baseline() -> None:
    text = BASE.format(space="  compilation-config.mode: [1, 2]")
    with pytest.raises(ServetuneError, match=r"study.yaml:\d+: space.compilation-config.mode: .*must be a mapping"):
        parse_study(text, "study.yaml")
    with pytest.raises(ServetuneError, match="both swept"):
        _spec("  speculative-config.num_speculative_tokens: [1, 2]\n  speculative-config: [null]")


def test_emitted_configs_carry_the_json_intact(tmp_path) -> None:
    spec = _spec("  speculative-config.num_speculative_tokens: [3]")
    config = spec.config_for({speculative.TOKENS_PARAM: 3})
    argv = render_flags(config.flags)
    expected = argv[argv.index("--speculative-config") + 1]
    assert json.loads(expected) == config.flags[speculative.FLAG]
    dep = Deployment.of(config, {"model": "/m"})
    paths = write_snippets(dep, tmp_path)
    script = paths["command"].read_text()
    words = shlex.split(script.splitlines()[-1])
    assert words[words.index("--speculative-config") + 1] == expected  # one shell word, the JSON unchanged
    compose = yaml.safe_load(paths["compose"].read_text())["services"]["vllm"]["command"]
    k8s = yaml.safe_load(paths["kubernetes"].read_text())["containers"][0]["args"]
    for args in (compose, k8s):
        assert args[args.index("--speculative-config") + 1] == expected
