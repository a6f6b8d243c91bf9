"""The machine in a study's conclusions: a trial measured under another power limit than its
baseline is left out and marked; energy per output token per config with its interval; the
report's Machine section."""

from __future__ import annotations

import numpy as np
import pytest

from servetune.analysis import analysis
from servetune.load.records import RunResult
from servetune.machine import MachineRecord, RunMachine
from servetune.machine.record import CpuState, GpuState
from servetune.report import write_report
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.vocabulary import Outcome

STUDY = """
name: machine
engine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m, args: {max-num-seqs: 4}}
space: {max-num-seqs: [4, 8, 16]}
scenarios:
  - {name: a, input_len: 8, output_len: 8, concurrency: 1, num_prompts: 4}
objective: {maximize: output_throughput}
strategy: ofat
replicates: 3
"""


def gpu(power_limit_w: float = 700.0, driver: str = "550.54.15") -> MachineRecord:
    return MachineRecord(source="nvml", taken_at=0.0, driver=driver, cuda="12.4",
                         gpus=(GpuState(index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-1111aaaa",
                                        power_limit_w=power_limit_w, app_sm_clock_mhz=1980, app_mem_clock_mhz=2619,
                                        persistence=True, ecc=True, temperature_c=35.0, memory_used_mib=512.0),),
                         cpu=CpuState(model="Xeon", cores=16))


def _trial(store, spec, rng, role, params, mean, *, machine=None, joules_per_token=None, throttled=None):
    trial = store.begin_trial(TrialRole(role), spec.config_for(params), params)
    if machine is not None:
        store.record_machine(trial.id, machine)
    for rep in range(1, 4):
        value = mean * (1 + 0.01 * rng.standard_normal())
        run_machine = None
        if joules_per_token is not None:
            energy = 1000 * joules_per_token * (1 + 0.02 * rng.standard_normal())
            run_machine = RunMachine(source="nvml", interval_s=1.0, wall_s=10.0, energy_j=energy,
                                     energy_source="energy counter", mean_power_w=energy / 10,
                                     samples=({"t": 1.0, "power_w": energy / 10},) * 4,
                                     throttled=throttled or {})
        store.record_run(trial.id, rep, RunResult(scenario="a", summary={
            "output_throughput": value, "total_output_tokens": 1000}), started_at=0, ended_at=1, machine=run_machine)
    store.finish_trial(trial.id, Outcome.ok)
    return trial


def _study(tmp_path, candidate_machine):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(3)
    _trial(store, spec, rng, "baseline", {}, 100, machine=gpu(), joules_per_token=2.0)
    _trial(store, spec, rng, "baseline_check", {}, 100, machine=gpu(), joules_per_token=2.0)
    cand = _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 130, machine=candidate_machine,
                  joules_per_token=1.5, throttled={"power cap": 0.5})
    return spec, store, cand


def test_a_candidate_under_another_power_limit_is_left_out_and_marked(tmp_path):
    spec, store, cand = _study(tmp_path, gpu(power_limit_w=500.0))
    result = analysis.analyze(store, spec)
    config = next(c for c in result.configs if c.params == {"max-num-seqs": 8})
    assert config.unlike_machine == {cand.id: ["GPU 0 power limit 700 W -> 500 W"]}
    assert config.objective is None and config.objective_effect is None and not config.objective_boots
    assert config.energy == {}
    # the strategies see no samples of it either
    view = next(v for v in analysis.history(store, spec) if v.trial is not None and v.trial.id == cand.id)
    assert view.samples == ()


def test_on_a_like_machine_the_same_candidate_counts(tmp_path):
    spec, store, _ = _study(tmp_path, gpu(power_limit_w=700.0))
    config = next(c for c in analysis.analyze(store, spec).configs if c.params == {"max-num-seqs": 8})
    assert config.unlike_machine == {}
    assert config.objective_effect is not None and config.objective_effect.effect_pct > 20


def test_energy_per_output_token_and_tokens_per_joule_with_intervals(tmp_path):
    spec, store, _ = _study(tmp_path, gpu())
    result = analysis.analyze(store, spec)
    base = result.baseline.energy["a"]
    assert base.boots == 2 and base.source == "energy counter"
    j = base.joules_per_token
    assert j.estimate == pytest.approx(2.0, rel=0.05) and j.low < j.estimate < j.high
    t = base.tokens_per_joule
    assert t.estimate == pytest.approx(1 / j.estimate) and (t.low, t.high) == pytest.approx((1 / j.high, 1 / j.low))
    cand = next(c for c in result.configs if c.params == {"max-num-seqs": 8}).energy["a"]
    assert cand.joules_per_token.estimate == pytest.approx(1.5, rel=0.05) and cand.boots == 1


def test_joules_per_token_needs_energy_and_tokens(tmp_path):
    _, store, _ = _study(tmp_path, gpu())
    run = store.trials()[0].runs[0]
    assert analysis.joules_per_token(run) == pytest.approx(run.machine.energy_j / 1000)
    assert analysis.joules_per_token(run.__class__(**{**run.__dict__, "machine": None})) is None


def test_the_report_names_the_machine_the_throttling_and_what_was_left_out(tmp_path):
    spec, store, _ = _study(tmp_path, gpu(power_limit_w=500.0))
    store.set_spec_doc(spec.model_dump(mode="json"))
    write_report(analysis.analyze(store, spec), store, tmp_path)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    section = md.split("## Machine", 1)[1].split("## Study cost", 1)[0]
    assert "Measured on 1 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4, power limit 700 W" in md
    assert "| 0 | NVIDIA H100 80GB HBM3 | GPU-1111aaaa | 700 W | 1980 / 2619 MHz |" in section
    assert "**Left out, machine unlike its baseline's:** trial 3 (candidate, max-num-seqs=8): " \
           "GPU 0 power limit 700 W -> 500 W" in section
    assert "**Throttled:** trial 3 (candidate, max-num-seqs=8): power cap 50 % of samples" in section
    assert "J per output token" in section and "| baseline | a |" in section
    assert 'id="machine"' in html and "power limit 700 W" in html and "Left out, machine unlike" in html


def test_a_report_of_a_store_without_records_says_so(tmp_path):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    store.set_spec_doc(spec.model_dump(mode="json"))
    _trial(store, spec, np.random.default_rng(1), "baseline", {}, 100)
    write_report(analysis.analyze(store, spec), store, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Machine\n\nNot recorded" in md and "Measured on" not in md


def test_the_ab_report_names_the_machine_and_a_boot_on_another(tmp_path):
    from servetune.ab.analysis import machine_lines
    from servetune.engine.config import Config

    store = StudyStore.in_dir(tmp_path)
    for role, machine in ((TrialRole.ab_a, gpu()), (TrialRole.ab_b, gpu()), (TrialRole.ab_a, gpu(driver="560.1"))):
        trial = store.begin_trial(role, Config.of({}), {})
        store.record_machine(trial.id, machine)
    assert machine_lines(store.trials()) == [
        "measured on 1 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4, power limit 700 W",
        "boot #3 ran on another machine than boot #1: driver 550.54.15 -> 560.1"]
