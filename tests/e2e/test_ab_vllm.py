"""`servetune ab`: two real vLLM CPU builds side by side (0.32.0, the project's, and 0.31.0 in a
second venv that scripts/setup_second_vllm.sh makes), two boots a side (each about a minute here),
with what differs in their resolved configuration and the `--explain` study that toggles it;
and an A/A run of one engine that must find no significant difference, on the stand-in engine
(tests/fakes/standin_engine.py): its subject is the A/B's alternation, comparisons and verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servetune.ab.analysis import analyze
from servetune.ab.spec import load_ab
from servetune.store import StudyStore
from servetune.study.loader import parse_study
from tests.conftest import EAGER, servetune, tiny_model_dir
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.standin import STANDIN

REPO = Path(__file__).resolve().parents[2]
SECOND_VERSION = "0.31.0"
SECOND_VENV = REPO / ".venv-vllm-b"
API_SERVER = ["-m", "vllm.entrypoints.openai.api_server"]
VLLM = ["python", *API_SERVER]
STANDIN_COMMAND = ["python", str(STANDIN)]


@pytest.fixture(scope="module")
def second_vllm_python() -> str:
    """The second version's interpreter, made (or checked) by the project's own script."""
    env = {**os.environ, "SERVETUNE_VENV": str(Path(sys.executable).parents[1])}
    done = subprocess.run(["scripts/setup_second_vllm.sh", SECOND_VERSION, str(SECOND_VENV)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return str(SECOND_VENV / "bin" / "python")


def _ab_file(tmp_path: Path, a_command: list[str], b_command: list[str]) -> Path:
    # The stand-in reads no model; the start checks that one is there (as for a study of a fake engine).
    model = str(tiny_model_dir()) if a_command == VLLM else str(MODEL_WITHOUT_WEIGHTS)
    doc = {
        "name": "ab-cpu",
        "engine": {"command": a_command, "model": model,
                   "args": {"load-format": "dummy", "max-model-len": 2048, "kv-cache-memory-bytes": "512MiB",
                            **EAGER},
                   "startup_timeout_s": 900, "pin_engine_core": True},
        "scenarios": [{"name": "decode", "input_len": 64, "output_len": 32, "concurrency": 4, "num_prompts": 16}],
        "replicates": 2,
        "ab": {"A": {}, "B": {"command": b_command}},
    }
    path = tmp_path / "ab.yaml"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _run(tmp_path: Path, a_command: list[str], b_command: list[str], *extra: str):
    path = _ab_file(tmp_path, a_command, b_command)
    out = tmp_path / "out"
    done = servetune("ab", str(path), "--out", str(out), "--boots", "2", "--prefix-reuse-len", "1536",
                     "--prefix-reuse-pairs", "2", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    store = StudyStore.open_existing(out, read_only=True)
    assert [t.role for t in store.trials()] == ["ab_a", "ab_b", "ab_a", "ab_b"]
    assert all(t.outcome == "ok" for t in store.trials()), [(t.outcome, t.detail) for t in store.trials()]
    assert (out / "ab.md").read_text().startswith("## Upgrade A/B")
    return analyze(store, load_ab([path])), done.stdout


@pytest.mark.vllm
def test_two_vllm_versions_side_by_side(tmp_path: Path, second_vllm_python: str) -> None:
    explain = tmp_path / "explain.yaml"
    result, stdout = _run(tmp_path, VLLM, [second_vllm_python, *API_SERVER], "--explain", str(explain))
    assert result.versions == {"A": ["0.32.0"], "B": [SECOND_VERSION]}  # from each boot's own log
    assert all(r.comparison is not None and r.comparison.n_baseline == r.comparison.n_candidate == 2
               for r in result.rows)
    # prefix caching is on by default in both: the identical re-send of 1536 tokens starts sooner
    assert {r.side for r in result.reuse} == {"A", "B"}
    assert all(r.ratio.n == 8 and r.ratio.high < 1 for r in result.reuse), result.reuse
    assert "verdict: " in stdout
    _check_what_differs(result, stdout, explain)


def _check_what_differs(result, stdout: str, explain: Path) -> None:
    """0.31.0 against 0.32.0, each side's defaults read with its own interpreter and its boots' logs."""
    assert result.config.notes == []
    found = {d.what: (d.source, d.a, d.b) for d in result.config.differences}
    assert found["--disable-cascade-attn"] == ("argument default", "None (resolved at start-up)", "True")
    assert found["--enable-shm-tensor-arena"] == ("argument default", "False", "- (no such flag)")  # new in 0.32
    assert found["compilation_config.cudagraph_decoder_replay"] == ("engine config", "True", "-")
    assert found["compilation_config.pass_config.enable_sp"] == ("engine config", "-", "False")
    assert [w for w, (source, a, b) in found.items() if source == "warning" and "DeepSelect" in w and a == "-"]
    for same in ("async scheduling", "max model len", "chunked-prefill budget (max_num_batched_tokens)"):
        assert same not in found  # the CPU builds run these alike
    assert not [d for d in result.config.differences if d.source == "requested"]  # same flags, other ports
    assert "What differs between A and B" in stdout
    # the study boots 0.32.0 (the newer, A here) with 0.31.0's default set back, and plans
    study = parse_study(explain.read_text(), str(explain))
    assert study.engine.command == VLLM
    assert {name: p.values for name, p in study.space.items()} == {"disable-cascade-attn": (True,)}
    planned = servetune("plan", str(explain))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "disable-cascade-attn=True" in planned.stdout


@pytest.mark.slow
def test_aa_same_engine_finds_no_difference(tmp_path: Path) -> None:
    result, stdout = _run(tmp_path, STANDIN_COMMAND, STANDIN_COMMAND)
    assert len([r for r in result.rows if r.comparison is not None]) == 6
    assert not [r for r in result.rows if r.verdict in ("better", "worse")], result.rows
    assert "no significant difference between B and A" in stdout
