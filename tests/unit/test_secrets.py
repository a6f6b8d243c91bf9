"""Secrets: which variables are secret, how the study file's secrets leave the spec, how the engine
passes them to the server, masking; and variable names checked where a study is loaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from report_study import OOM_LOG, build_study
from typer.testing import CliRunner

from servetune.cli import app
from servetune.engine.config import Config
from servetune.engine.launch import launch, terminate
from servetune.engine.vllm import VllmEngine
from servetune.errors import ServetuneError
from servetune.report import write_report
from servetune.secrets import Redactor, Secrets, is_secret_name
from servetune.store import TrialRole
from servetune.store.sqlite import StudyStore
from servetune.study.loader import parse_study
from servetune.vocabulary import Outcome

STUDY = """name: s
engine:
  model: m
  args:
    max-num-seqs: 4
{args}  env:
    VLLM_USE_V1: 1
{env}space:
  max-num-seqs: [4, 8]
{space}scenarios:
  - preset: single-decode
"""


def study(args: str = "", env: str = "", space: str = "") -> str:
    return STUDY.format(args=args, env=env, space=space)


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "hf_token", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                                  "MY_CREDENTIALS_FILE", "OPENAI_APIKEY", "PROXY_AUTH"])
def test_credential_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD", "S3_ACCESS_KEY_ID", "TOKENIZERS_PARALLELISM",
                                  "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_V1", "KEYBOARD", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE"])
def test_knobs_that_mention_tokens_or_keys_are_not(name: str) -> None:
    assert not is_secret_name(name)


def test_redactor_masks_whole_values_longest_first_and_leaves_short_ones() -> None:
    redact = Redactor(["abcd", "abcdef-123", "1"])
    assert redact("k=abcdef-123 j=abcd n=1") == "k=*** j=*** n=1"


def test_secret_values_leave_the_spec_and_only_their_names_are_stored() -> None:
    spec = parse_study(study(args="    api_key: sk-abc-123456\n",
                             env="    HF_TOKEN: hf_abcdef123\n    VLLM_API_KEY: sk-abc-123456\n"))
    assert spec.engine.env == {"VLLM_USE_V1": "1"} and spec.engine.args == {"max-num-seqs": 4}
    assert spec.engine.secrets.literal == {"HF_TOKEN": "hf_abcdef123", "VLLM_API_KEY": "sk-abc-123456"}
    dump = spec.model_dump(mode="json")
    assert dump["engine"]["secret_env"] == ["HF_TOKEN", "VLLM_API_KEY"]
    assert "hf_abcdef123" not in repr(dump) and "sk-abc" not in repr(dump) and "sk-abc" not in repr(spec)
    assert "hf_abcdef" not in spec.baseline_config().canonical_json()
    again = type(spec).model_validate(dump)  # a resumed study compares the stored spec with this
    assert again.model_dump(mode="json") == dump and again.engine.secrets.literal == {}


def test_a_study_without_secrets_keeps_its_stored_spec_and_config_key() -> None:
    spec = parse_study(study())
    assert "secret_env" not in spec.model_dump(mode="json")["engine"]  # equal to stores written before
    assert spec.baseline_config().key() == "83926ab2f0514b6c"  # the key servetune gave it before secrets


def test_api_key_flag_and_variable_must_agree() -> None:
    with pytest.raises(ServetuneError, match=r"s.yaml:2: engine: args.api-key and env.VLLM_API_KEY"):
        parse_study(study(args="    api-key: one-key-1\n", env="    VLLM_API_KEY: other-key-2\n"), "s.yaml")


@pytest.mark.parametrize(("space", "line", "key"), [
    ("  env.HF_TOKEN: [a1234, b1234]\n", 10, "space.env.HF_TOKEN"),
    ("  api-key: [a1234, b1234]\n", 10, "space.api-key"),
])
def test_secrets_cannot_be_tuned(space: str, line: int, key: str) -> None:
    with pytest.raises(ServetuneError, match=rf"^s.yaml:{line}: {key}: .* is a secret and cannot be tuned$"):
        parse_study(study(space=space), "s.yaml")


def test_hostile_variable_names_are_rejected_at_load_with_file_line_and_key() -> None:
    with pytest.raises(ServetuneError) as env_error:
        parse_study(study(env="    'X; touch pwned': 1\n"), "s.yaml")
    assert str(env_error.value).startswith("s.yaml:8: engine.env.'X; touch pwned': 'X; touch pwned' is not an "
                                           "environment variable name")
    with pytest.raises(ServetuneError, match=r"^s.yaml:10: space.'env.\$\(id\)': '\$\(id\)' is not an environment"):
        parse_study(study(space="  env.$(id): [a, b]\n"), "s.yaml")
    with pytest.raises(ServetuneError, match=r"^s.yaml:6: engine.secret_env\[0\]: '1X' is not an environment"):
        parse_study(study().replace("  env:\n", "  secret_env: [1X]\n  env:\n"), "s.yaml")


def test_config_rejects_a_hostile_variable_name() -> None:
    with pytest.raises(ValidationError, match="not an environment variable name"):
        Config.of(env={"X; touch pwned": "1"})


def test_engine_environment_carries_secrets_and_argv_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_from_env_1234")
    engine = VllmEngine(["vllm", "serve"], model="m",
                        secrets=Secrets(names=("HF_TOKEN", "MINE"), literal={"MINE": "mine-5678"}))
    config = Config.of({"api-key": "sk-flag-9012", "max-num-seqs": 4}, {"VLLM_USE_V1": "1"})
    env = engine.environment(config)
    assert (env["HF_TOKEN"], env["MINE"], env["VLLM_API_KEY"], env["VLLM_USE_V1"]) == (
        "hf_from_env_1234", "mine-5678", "sk-flag-9012", "1")
    assert engine.build_command(config, 9) == ["vllm", "serve", "m", "--max-num-seqs", "4", "--host", "127.0.0.1",
                                               "--port", "9"]


def test_docker_forwards_secrets_by_name() -> None:
    engine = VllmEngine(["docker", "run", "--rm", "img"], model="m", secrets=Secrets(names=("HF_TOKEN",)))
    argv = engine.build_command(Config.of({"api-key": "sk-flag-9012"}, {"A": "1"}), 9)
    assert argv[:9] == ["docker", "run", "--network=host", "-e", "A", "-e", "HF_TOKEN", "-e", "VLLM_API_KEY"]
    assert "sk-flag-9012" not in " ".join(argv)


def test_a_missing_secret_is_one_line_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    engine = VllmEngine([sys.executable, "-c", "pass"], model="m", secrets=Secrets(names=("HF_TOKEN",)))
    with pytest.raises(ServetuneError, match=r"^secret HF_TOKEN is not set: export it"):
        engine.check_secrets()
    with pytest.raises(ServetuneError, match="HF_TOKEN"):
        engine.start(Config(), tmp_path / "server.log")
    assert not (tmp_path / "server.log").exists()


def test_launch_line_is_redacted(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = launch([sys.executable, "-c", "pass", "--token", "tok-3456abcd"], {}, log, port=1,
                    redact=Redactor(["tok-3456abcd"]))
    terminate(server, grace_s=5, port_wait_s=0)
    first = log.read_text().splitlines()[0]
    assert first.startswith("# servetune launch: ") and "'--token', '***'" in first and "3456" not in first


def test_a_failed_start_reports_the_log_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that prints its key and dies: the result's tail, detail and evidence are masked."""
    script = "import os, sys; print('ERROR invalid key ' + os.environ['VLLM_API_KEY']); sys.exit(1)"
    engine = VllmEngine([sys.executable, "-c", script], model="m", startup_timeout_s=30, grace_s=5)
    result = engine.start(Config.of({"api-key": "sk-leaky-7890"}), tmp_path / "server.log")
    assert result.outcome.value != "ok" and "invalid key ***" in result.log_tail
    shown = " ".join([result.log_tail, result.detail, *result.evidence, " ".join(result.argv)])
    assert "sk-leaky" not in shown
    assert "sk-leaky-7890" in (tmp_path / "server.log").read_text()  # the engine's own log: its business
    assert engine.redact("key sk-leaky-7890") == "key ***"


def test_the_store_masks_trial_text_it_is_given(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    store.redact = Redactor(["hf_stored_4567"])
    trial = store.begin_trial(TrialRole.baseline, Config(), {})
    store.finish_trial(trial.id, Outcome.crashed, detail="died: token hf_stored_4567", log_tail="HF_TOKEN=hf_stored_4567")
    row = store.trial(trial.id)
    assert (row.detail, row.log_tail) == ("died: token ***", "HF_TOKEN=***")
    store.close()
    assert all(b"hf_stored" not in p.read_bytes() for p in tmp_path.iterdir())


def test_the_report_masks_log_tails_of_a_store_that_holds_a_secret(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written before secrets were masked: the report masks the study's secrets it can see."""
    store, analysis = build_study(tmp_path)
    spec = store.spec_doc()
    store.set_meta_json("spec", {**spec, "engine": {**spec["engine"], "secret_env": ["HF_TOKEN"]}})
    oom = next(t for t in store.trials() if t.outcome == "oom")
    store.finish_trial(oom.id, Outcome.oom, detail="out of memory (token hf_old_store_8901)",
                       log_tail=OOM_LOG + "ERROR [core.py:4] HF_TOKEN=hf_old_store_8901 was rejected\n")
    monkeypatch.setenv("HF_TOKEN", "hf_old_store_8901")
    paths = write_report(analysis, store, tmp_path / "report")
    for name in ("markdown", "html"):
        text = paths[name].read_text()
        assert "HF_TOKEN=***" in text and "hf_old_store" not in text


def test_serve_rejects_a_hostile_env_name_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--model", "m", "--log-dir", str(tmp_path), "--env", "X; id=1"])
    assert isinstance(result.exception, ServetuneError)
    assert str(result.exception) == "--env expects NAME=VALUE with NAME of letters, digits and _, got 'X; id=1'"
    assert list(tmp_path.iterdir()) == []


def test_a_named_secret_leaves_env_whatever_its_type_a_lookalike_switch_stays() -> None:
    text = study(env="    MINE: true\n    PROXY_AUTH: false\n").replace("  env:\n", "  secret_env: [MINE]\n  env:\n")
    engine = parse_study(text).engine
    assert engine.secrets.literal == {"MINE": "1"} and engine.env == {"VLLM_USE_V1": "1", "PROXY_AUTH": "0"}
