"""The machine guards in a whole study of the stand-in engine (real processes, `servetune tune` as a
subprocess) with a fake NVML first on its PYTHONPATH (tests/fakes/nvml/pynvml.py): a foreign
process on the slot's GPU refuses the boot in one line, `--allow-busy-gpu` boots anyway, and a
power limit changed between the baseline's boot and the candidate's leaves the candidate out of
the analysis, marked in the report. The subject is the tuner's bookkeeping, so no real vLLM boots."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from servetune.analysis import analysis
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from tests.fakes import standin
from tests.fakes.machine import H100, NVML_DIR, nvml_state, write_state
from tests.faults.test_standin_faults import STUDY_TIMEOUT_S

pytestmark = pytest.mark.concurrent


@pytest.fixture(autouse=True)
def guard_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVETUNE_ALLOW_BUSY", raising=False)  # the suite's conftest turns the guard off
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the one slot sees every (fake) GPU


def _env(state: Path) -> dict[str, str]:
    path = os.pathsep.join([str(NVML_DIR), str(standin.REPO / "src"), str(standin.REPO)])
    return {"PYTHONPATH": path, "FAKE_NVML_STATE": str(state)}


def _tune(tmp_path: Path, marks: list[str], state: dict[str, Any], space: dict[str, Any] | None = None,
          extra_args: list[str] | None = None, out_name: str = "study") -> tuple[standin.TunerResult, Path]:
    study, out = tmp_path / f"{out_name}.yaml", tmp_path / out_name
    study.write_text(standin.study_text(out_name, space=space, trials=1, measure_bandwidth=False))
    mark = standin.new_mark()
    marks.append(mark)
    state_file = write_state(tmp_path / f"{out_name}-nvml.json", state)
    return standin.run_tuner(study, out, mark, timeout_s=STUDY_TIMEOUT_S, extra_env=_env(state_file), report=True,
                             extra_args=extra_args), out


def test_a_foreign_gpu_process_refuses_the_boot_in_one_line(tmp_path: Path, marks: list[str]) -> None:
    busy = {**H100, "processes": [{"pid": 4242, "used": 30 * 2**30}], "mem_used": 31 * 2**30}
    done, out = _tune(tmp_path, marks, nvml_state([busy]))
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert line == done.stderr.strip().splitlines()[-1]  # the tuner's last word, one line
    assert line.startswith("error: trial #1 (baseline): the machine is busy: GPU 0 (GPU-1111aaaa): process 4242 "
                           "holding 30,720 MiB"), line
    assert line.endswith("(--allow-busy-gpu boots anyway)")
    (trial,) = StudyStore.open_existing(out, read_only=True).trials()
    assert trial.launch_token is None and trial.server_pid is None  # nothing was launched
    assert not standin.marked_processes(marks[-1])

    # The same command with the override resumes the study and boots; the record keeps the tenant.
    done, out = _tune(tmp_path, marks, nvml_state([busy]), extra_args=["--allow-busy-gpu"])
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    (trial,) = StudyStore.open_existing(out, read_only=True).trials()
    assert trial.ok and trial.machine is not None
    assert [p.pid for p in trial.machine.gpus[0].processes] == [4242]
    assert "process 4242 holding 30,720 MiB" in (out / "report.md").read_text()


def _candidate(out: Path) -> Any:
    store = StudyStore.open_existing(out, read_only=True)
    spec = StudySpec.from_store(store.spec_doc())
    result = analysis.analyze(store, spec)
    return store, next(c for c in result.configs if not c.is_baseline)


def test_a_power_limit_changed_after_the_baseline_leaves_the_candidate_out(tmp_path: Path,
                                                                          marks: list[str]) -> None:
    space = {"max-num-seqs": [16]}
    # Control: the same study on an unchanged machine measures the candidate.
    done, out = _tune(tmp_path, marks, nvml_state(), space=space, out_name="like")
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    _, like = _candidate(out)
    assert like.unlike_machine == {} and like.objective is not None and like.objective_boots

    capped = nvml_state(by_boot=[{"power_limit_mw": 700_000}, {"power_limit_mw": 500_000}])
    done, out = _tune(tmp_path, marks, capped, space=space, out_name="capped")
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    store, cand = _candidate(out)
    baseline, candidate = store.trials()
    assert baseline.machine is not None and baseline.machine.gpus[0].power_limit_w == 700.0
    assert candidate.machine is not None and candidate.machine.gpus[0].power_limit_w == 500.0
    assert cand.unlike_machine == {candidate.id: ["GPU 0 power limit 700 W -> 500 W"]}
    assert cand.objective is None and cand.objective_effect is None and not cand.objective_boots
    # every run was sampled through NVML and read the energy counters
    runs = [r for t in store.trials() for r in t.runs if r.ok]
    assert runs and all(r.machine is not None and r.machine.source == "nvml" for r in runs)
    assert all(r.machine is not None and r.machine.energy_source == "energy counter" for r in runs)
    report = (out / "report.md").read_text()
    assert "Measured on 1 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4, power limit 700 W" in report
    assert "**Left out, machine unlike its baseline's:** trial 2 (candidate, max-num-seqs=16): GPU 0 power limit " \
           "700 W -> 500 W" in report
    assert json.loads(store.get_meta("schema_version") or "0") == 5
