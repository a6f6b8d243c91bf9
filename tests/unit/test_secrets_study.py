"""A whole study with secrets in its file, against a stand-in engine (tests/fakes/secret_engine.py):
no secret value in any file of the study directory; the emitted configs name the secrets."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from servetune.errors import ServetuneError
from servetune.report import write_report
from servetune.study import load_study
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from tests.fakes import MODEL_WITHOUT_WEIGHTS

ENGINE = Path(__file__).resolve().parents[1] / "fakes" / "secret_engine.py"
HF = "hf_study_file_token_4f9c2a"
API = "sk-study-file-key-8d71e0"
FROM_ENV = "gh_from_the_environment_27b3"


def _study(tmp_path: Path, *, leak: bool = False) -> Path:
    command = [sys.executable, str(ENGINE), "--require-env", "HF_TOKEN", "--require-env", "VLLM_API_KEY",
               "--require-env", "GITHUB_TOKEN", *(["--leak"] if leak else [])]
    doc = {
        "name": "secrets",
        "engine": {"command": command, "model": str(MODEL_WITHOUT_WEIGHTS), "startup_timeout_s": 60,
                   "args": {"max-num-seqs": 4, "api-key": API},
                   "env": {"HF_TOKEN": HF, "VLLM_API_KEY": API, "VLLM_USE_V1": 1},
                   "secret_env": ["GITHUB_TOKEN"]},
        "space": {"max-num-seqs": [4, 8]},
        "scenarios": [{"name": "tiny", "input_len": 8, "output_len": 4, "num_prompts": 4, "warmups": 0}],
        "strategy": "baseline", "replicates": 1, "finalists": 0,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _tune(study: Path, out: Path) -> StudyRunner:
    runner = StudyRunner(load_study(study), out, display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
    write_report(runner.run(), runner.store, out)
    runner.store.close()
    return runner


def _files_holding(root: Path, values: list[str]) -> list[str]:
    """Every file under `root` (the SQLite file and its WAL included, as bytes) that holds a value."""
    return [f"{p.relative_to(root)}: {v}" for p in sorted(root.rglob("*")) if p.is_file()
            for v in values if v.encode() in p.read_bytes()]


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", FROM_ENV)


def test_no_secret_value_in_any_file_of_the_study(tmp_path: Path, secret_env: None) -> None:
    out = tmp_path / "study"
    runner = _tune(_study(tmp_path), out)
    trials = runner.store.__class__.open_existing(out).trials()
    # The stand-in exits unless every secret reached it by environment and none by argv.
    assert [t.outcome for t in trials] == ["ok"], [t.detail for t in trials]
    assert (out / "report.md").is_file() and (out / "baseline" / "serve.sh").is_file()
    assert _files_holding(out, [HF, API, FROM_ENV]) == []


def test_emitted_files_name_the_secrets(tmp_path: Path, secret_env: None) -> None:
    out = tmp_path / "study"
    _tune(_study(tmp_path), out)
    names = ["GITHUB_TOKEN", "HF_TOKEN", "VLLM_API_KEY"]
    emitted = out / "baseline"
    script = (emitted / "serve.sh").read_text()
    assert all(f'"${{{n}:?' in script for n in names) and "--api-key" not in script
    compose = yaml.safe_load((emitted / "docker-compose.yaml").read_text())["services"]["vllm"]
    assert sorted(e for e in compose["environment"] if "=" not in e) == names
    assert "VLLM_USE_V1=1" in compose["environment"]
    k8s = yaml.safe_load((emitted / "k8s-container.yaml").read_text())["containers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in k8s["env"] if "valueFrom" in e}
    assert refs == {n: {"name": "servetune-secrets", "key": n.lower().replace("_", "-")} for n in names}
    assert "kubectl create secret generic servetune-secrets" in (emitted / "k8s-container.yaml").read_text()
    assert sorted(json.loads((emitted / "config.json").read_text())["secret_env"]) == names
    assert "VLLM_API_KEY" in (out / "report.md").read_text()


def test_a_server_that_logs_its_secrets_leaks_them_into_its_log_only(tmp_path: Path, secret_env: None) -> None:
    """The engine's own log is the engine's business; the store and the report quote it masked."""
    out = tmp_path / "study"
    runner = _tune(_study(tmp_path, leak=True), out)
    trial = runner.store.__class__.open_existing(out).trials()[0]
    assert trial.outcome != "ok" and "HF_TOKEN=***" in (trial.log_tail or "")
    leaks = _files_holding(out, [HF, API, FROM_ENV])
    assert leaks and all(leak.startswith("logs/") for leak in leaks), leaks
    assert "HF_TOKEN=***" in (out / "report.md").read_text()


def test_a_missing_secret_stops_the_study_before_any_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    with pytest.raises(ServetuneError, match="GITHUB_TOKEN is not set"):
        StudyRunner(load_study(_study(tmp_path)), tmp_path / "study",
                    display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
    assert not (tmp_path / "study" / "logs").exists()
