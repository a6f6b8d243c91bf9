"""Knobs beyond flags: each `env.*` knob applied, not applied or unproven, from the engine's own
boot log (tests/fixtures/logs/, captured from real vLLM runs), and what the study does with it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from servetune.analysis import known
from servetune.cli import plan_cmd
from servetune.engine.bootfacts import parse_boot_facts
from servetune.engine.config import Config
from servetune.engine.defaults import EngineDefaults
from servetune.engine.equivalence import Booted, same_server
from servetune.engine.knobs import DeclaredEvidence, KnobEvidence, KnobStatus, check_knobs, metric_families
from servetune.engine.vllm import KNOB_REPORT_ENV, PLUGIN_DIR, VllmEngine
from servetune.models.source import ModelSource
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.tune import plan
from servetune.vocabulary import Outcome

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
# vLLM 0.32 CPU, started by tests/e2e/test_engine_vllm.py with a misspelled variable, one 0.32 no
# longer reads, one it honours (2 GiB against the flag's 1 GiB) and the dev-mode switch.
CPU_KNOBS_LOG = (LOGS / "vllm032-cpu-env-knobs.log").read_text()
CPU_KNOBS = Config.of(env={"VLLM_CPU_KVCACHE_SPCE": "3", "VLLM_ATTENTION_BACKEND": "TORCH_SDPA",
                           "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_SERVER_DEV_MODE": "1"})
# vLLM 0.26 on an H200 serving a MoE model: its own shipped kernel config, no tuned folder.
MOE_LOG = (LOGS / "vllm026-gpu-moe-mbt16k-noasync.log").read_text()
SHIPPED = "/tmp/gpukit/site/vllm/model_executor/layers/fused_moe/configs"


def statuses(knobs: list[KnobEvidence]) -> dict[str, KnobStatus]:
    return {k.knob: k.status for k in knobs}


def test_the_boot_log_shows_unknown_variables_and_the_values_the_server_resolved() -> None:
    facts = parse_boot_facts(CPU_KNOBS_LOG)
    assert facts.unknown_env == ["VLLM_CPU_KVCACHE_SPCE", "VLLM_ATTENTION_BACKEND"]
    assert facts.resolved_env == {"VLLM_ATTENTION_BACKEND": None, "VLLM_CPU_KVCACHE_SPACE": "2",
                                  "VLLM_CPU_KVCACHE_SPCE": None, "VLLM_SERVER_DEV_MODE": "True"}
    assert "Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND" in facts.evidence[
        "env.VLLM_ATTENTION_BACKEND"]
    assert parse_boot_facts("servetune-knobs: {cut short").resolved_env == {}


def test_misspelled_and_ignored_variables_are_not_applied_an_honoured_one_is() -> None:
    knobs = check_knobs(CPU_KNOBS, CPU_KNOBS_LOG, parse_boot_facts(CPU_KNOBS_LOG))
    assert statuses(knobs) == {
        "env.VLLM_ATTENTION_BACKEND": KnobStatus.not_applied,
        "env.VLLM_CPU_KVCACHE_SPACE": KnobStatus.applied,
        "env.VLLM_CPU_KVCACHE_SPCE": KnobStatus.not_applied,
        "env.VLLM_SERVER_DEV_MODE": KnobStatus.applied,
    }
    by = {k.knob: k for k in knobs}
    assert "vLLM 0.32.0 does not know the variable" in by["env.VLLM_ATTENTION_BACKEND"].reason
    assert "Explicitly set (2.0/" in (by["env.VLLM_CPU_KVCACHE_SPACE"].evidence_line or "")
    assert "resolved it to True" in by["env.VLLM_SERVER_DEV_MODE"].reason


def test_a_rule_value_that_differs_is_not_applied() -> None:
    """The log shows the engine's KV cache at 2 GiB: asking for 4 did not take."""
    config = Config.of(env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    (knob,) = check_knobs(config, CPU_KNOBS_LOG, parse_boot_facts(CPU_KNOBS_LOG))
    assert knob.status is KnobStatus.not_applied and "used 2.0 instead" in knob.reason


@pytest.mark.parametrize(("folder", "status"), [(SHIPPED, KnobStatus.applied), ("/opt/tuned", KnobStatus.not_applied)])
def test_a_tuned_moe_config_folder_is_proven_by_the_file_vllm_loaded(folder: str, status: KnobStatus) -> None:
    (knob,) = check_knobs(Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": folder}), MOE_LOG, parse_boot_facts(MOE_LOG))
    assert knob.status is status
    assert "for MoE layer" in (knob.evidence_line or "")


def test_the_default_moe_config_warning_is_not_applied_and_a_dense_model_is_unproven() -> None:
    line = ("(EngineCore pid=7) WARNING 11-30 07:41:37 [fused_moe.py:1164] Using default MoE config. Performance "
            "might be sub-optimal! Config file not found at /opt/tuned/E=128.json")
    config = Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/tuned"})
    (moe,) = check_knobs(config, line, parse_boot_facts(line))
    assert moe.status is KnobStatus.not_applied and moe.evidence_line == line
    (dense,) = check_knobs(config, CPU_KNOBS_LOG, parse_boot_facts(CPU_KNOBS_LOG))
    assert dense.status is KnobStatus.unproven


def test_a_variable_no_rule_knows_is_unproven_until_the_study_declares_its_evidence() -> None:
    config = Config.of(env={"OMP_NUM_THREADS": "1", "MY_SWITCH": "on"})
    facts = parse_boot_facts(CPU_KNOBS_LOG)
    assert set(statuses(check_knobs(config, CPU_KNOBS_LOG, facts)).values()) == {KnobStatus.unproven}
    declared = {"env.OMP_NUM_THREADS": DeclaredEvidence(log=r"Unknown vLLM environment variable"),
                "env.MY_SWITCH": DeclaredEvidence(unapplied_log=r"KV cache size: [\d,]+ tokens")}
    assert statuses(check_knobs(config, CPU_KNOBS_LOG, facts, declared)) == {
        "env.OMP_NUM_THREADS": KnobStatus.applied, "env.MY_SWITCH": KnobStatus.not_applied}
    metric = {"env.MY_SWITCH": DeclaredEvidence(metric="vllm:my_switch")}
    page = "# TYPE vllm:my_switch_total counter\nvllm:my_switch_total 1.0\n"
    assert "vllm:my_switch" in metric_families(page)
    assert statuses(check_knobs(config, "", facts, metric, metric_families(page)))["env.MY_SWITCH"] \
        is KnobStatus.applied
    assert statuses(check_knobs(config, "", facts, metric, set()))["env.MY_SWITCH"] is KnobStatus.unproven


def test_the_server_gets_the_plugin_only_for_vllm_variables_and_never_in_a_container(tmp_path: Path) -> None:
    engine = VllmEngine(model="m", log_dir=tmp_path)
    env = engine.environment(CPU_KNOBS)
    assert env["PYTHONPATH"].split(":")[0] == str(PLUGIN_DIR)
    assert env[KNOB_REPORT_ENV] == "VLLM_ATTENTION_BACKEND,VLLM_CPU_KVCACHE_SPACE,VLLM_CPU_KVCACHE_SPCE,VLLM_SERVER_DEV_MODE"
    assert KNOB_REPORT_ENV not in engine.environment(Config.of(env={"OMP_NUM_THREADS": "1"}))
    assert KNOB_REPORT_ENV not in engine.environment(Config.of(env={"VLLM_API_KEY": "k"}))  # never printed
    docker = VllmEngine(["docker", "run", "img"], model="m", log_dir=tmp_path)
    assert KNOB_REPORT_ENV not in docker.environment(CPU_KNOBS)
    assert (PLUGIN_DIR / "servetune_knob_report-1.0.dist-info" / "entry_points.txt").read_text().count(
        "servetune_knob_report = servetune_knob_report:report") == 1


# --- the study: a knob that did not apply is not booted again ----------------------------------

BASE = Config.of({"max-num-seqs": 4})
GHOST = BASE.merged(Config.of(env={"VLLM_ATTENTION_BACKEND": "TORCH_SDPA"}))


def test_an_unknown_variable_runs_as_unset() -> None:
    facts = parse_boot_facts(CPU_KNOBS_LOG)
    reasons = same_server(GHOST, facts, Booted("the baseline (#1)", BASE, None), EngineDefaults())
    assert reasons == ["env.VLLM_ATTENTION_BACKEND is unknown to this vLLM (this config's boot log), so it runs as unset"]
    assert same_server(GHOST, None, Booted("the baseline (#1)", BASE, None), EngineDefaults()) is None


def _store(tmp_path: Path) -> StudyStore:
    """The baseline measured, then a candidate whose knob did not apply (the engine's rule said so)."""
    store = StudyStore.in_dir(tmp_path)
    base = store.begin_trial(TrialRole.baseline, BASE, {})
    store.finish_trial(base.id, Outcome.ok)
    folder = BASE.merged(Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/tuned"}))
    trial = store.begin_trial(TrialRole.candidate, folder, {})
    store.record_boot(trial.id, healthy_at=1.0, boot_facts=None, mismatches=[], log_path=None, knobs=[
        KnobEvidence(knob="env.VLLM_TUNED_CONFIG_FOLDER", requested="/opt/tuned", status=KnobStatus.not_applied,
                     reason="the engine logged its default instead")])
    store.finish_trial(trial.id, Outcome.duplicate, detail="not measured")
    return store


def test_a_value_that_did_not_apply_is_not_booted_again(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.trials()[1].knobs[0].status is KnobStatus.not_applied  # stored and read back
    again = BASE.merged(Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/tuned"}))
    outcome, detail = known.before_boot(store, again, BASE, EngineDefaults()) or (None, "")
    assert outcome is Outcome.duplicate
    assert "env.VLLM_TUNED_CONFIG_FOLDER=/opt/tuned did not apply in #2" in detail and "the baseline (#1)" in detail
    with_flag = again.merged(Config.of({"max-num-seqs": 8}))
    outcome, detail = known.before_boot(store, with_flag, BASE, EngineDefaults()) or (None, "")
    assert outcome is Outcome.skipped and "did not apply" in detail
    other_folder = BASE.merged(Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/other"}))
    assert known.before_boot(store, other_folder, BASE, EngineDefaults()) is None  # another value may apply


def test_an_unknown_variable_is_not_booted_again_at_any_value(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    base = store.begin_trial(TrialRole.baseline, BASE, {})
    store.finish_trial(base.id, Outcome.ok)
    trial = store.begin_trial(TrialRole.candidate, GHOST, {})
    store.record_boot(trial.id, healthy_at=1.0, boot_facts=parse_boot_facts(CPU_KNOBS_LOG), mismatches=[],
                      log_path=None)
    store.finish_trial(trial.id, Outcome.duplicate)
    flash = BASE.merged(Config.of(env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}))
    outcome, detail = known.before_boot(store, flash, BASE, EngineDefaults()) or (None, "")
    assert outcome is Outcome.duplicate and "env.VLLM_ATTENTION_BACKEND is unknown to this vLLM" in detail


def test_a_store_from_before_knobs_reads_none(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store._conn.execute("UPDATE trials SET knobs_json = NULL")
    assert all(t.knobs == () for t in store.trials())


# --- the study file and the plan -----------------------------------------------------------------

STUDY = """name: knobs
engine:
  model: {model}
  env: {{VLLM_CPU_KVCACHE_SPACE: 2, OMP_NUM_THREADS: 1}}
  evidence:
{evidence}
space:
  env.MY_SWITCH: ["on", "off"]
  env.VLLM_ATTENTION_BACKEND: [TORCH_SDPA]
scenarios: [{{name: s, input_len: 8, output_len: 4, num_prompts: 2}}]
"""


def _study(tmp_path: Path, evidence: str) -> str:
    return STUDY.format(model=tmp_path, evidence=evidence)


def test_plan_shows_which_knobs_have_no_evidence(tmp_path: Path) -> None:
    spec = parse_study(_study(tmp_path, "    env.MY_SWITCH: {log: 'my switch is on'}"))
    assert isinstance(spec.engine.evidence["env.MY_SWITCH"], DeclaredEvidence)
    result = plan.assemble(spec, EngineDefaults(), ModelSource(str(tmp_path), True, "a directory"))
    assert result.knob_evidence == {
        "env.VLLM_CPU_KVCACHE_SPACE": "a boot-log rule",
        "env.OMP_NUM_THREADS": None,
        "env.MY_SWITCH": "the study's evidence",
        "env.VLLM_ATTENTION_BACKEND": "vLLM's unknown-variable warning, the value the server resolved",
    }
    out = io.StringIO()
    console, plan_cmd.console = plan_cmd.console, Console(file=out, width=200)
    try:
        plan_cmd._print_knobs(result)
    finally:
        plan_cmd.console = console
    text = out.getvalue()
    assert "4 env knob(s), 1 without evidence" in text
    assert "env.OMP_NUM_THREADS: no evidence" in text and "engine.evidence.env.OMP_NUM_THREADS" in text


@pytest.mark.parametrize(("evidence", "expected", "line_text"), [
    ("    env.MY_SWICH: {log: x}", "engine.evidence.env.MY_SWICH: 'env.MY_SWICH' is set neither in engine.env nor "
     "in the space (did you mean 'env.MY_SWITCH'?)", "MY_SWICH"),
    ("    env.MY_SWITCH: {log: 'on ('}", "engine.evidence.env.MY_SWITCH: log: 'on (' is not a regular "
     "expression", "on ("),
    ("    env.MY_SWITCH: {}", "engine.evidence.env.MY_SWITCH: give log, unapplied_log or metric",
     "MY_SWITCH"),
    ("    env.MY_SWITCH: {logs: x}", "engine.evidence.env.MY_SWITCH.logs: unknown key 'logs'", "logs"),
    ("    max-num-seqs: {log: x}", "engine.evidence.max-num-seqs: 'max-num-seqs' is not a knob: name a variable as env.NAME", "max-num-seqs"),
])
def test_evidence_errors_name_file_line_and_key(tmp_path: Path, evidence: str, expected: str,
                                                line_text: str) -> None:
    from servetune.errors import ServetuneError

    text = _study(tmp_path, evidence)
    with pytest.raises(ServetuneError) as info:
        parse_study(text, "study.yaml")
    message = str(info.value)
    assert expected in message, message
    line = next(i for i, row in enumerate(text.splitlines(), 1) if line_text in row)
    assert f"study.yaml:{line}: " in message, message


# --- the report: a knob that did not apply reads "not applied", never an effect ------------------

def test_the_report_says_not_applied_where_it_would_say_an_effect(tmp_path: Path) -> None:
    from dataclasses import replace

    from report_study import BASE as REPORT_BASE
    from report_study import SAME, build_study

    from servetune.report import write_report

    store, analysis = build_study(tmp_path)
    ghost = REPORT_BASE.merged(Config.of(env={"VLLM_ATTENTION_BACKEND": "TORCH_SDPA"}))
    trial = store.begin_trial(TrialRole.candidate, ghost, {})
    facts = parse_boot_facts(CPU_KNOBS_LOG)
    store.record_boot(trial.id, healthy_at=trial.started_at + 80.0, boot_facts=facts, mismatches=[], log_path=None,
                      knobs=check_knobs(ghost, CPU_KNOBS_LOG, facts))
    store.finish_trial(trial.id, Outcome.ok)
    # measured like SAME (its effect: no difference), as a not-applied knob is
    same = next(c for c in analysis.configs if c.key == SAME.key())
    measured = replace(same, key=ghost.key(), config=ghost, label=ghost.label(REPORT_BASE), trial_ids=[trial.id])
    analysis = replace(analysis, configs=[*analysis.configs, measured])
    paths = write_report(analysis, store, tmp_path / "report")
    md, html = paths["markdown"].read_text(), paths["html"].read_text()
    row = next(line for line in md.splitlines() if line.startswith("| env.VLLM_ATTENTION_BACKEND=TORCH_SDPA |"))
    assert "| not applied: env.VLLM_ATTENTION_BACKEND |" in row and "no difference" not in row  # its verdict
    effect = next(line for line in md.splitlines() if line.startswith("| `env.VLLM_ATTENTION_BACKEND` |"))
    assert effect.endswith("| not applied |") and "no difference" not in effect
    assert "env.VLLM_ATTENTION_BACKEND=TORCH_SDPA not applied" in md  # the trials table
    assert "Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND" in md  # the evidence line
    assert "not applied: env.VLLM_ATTENTION_BACKEND" in html and "env.VLLM_ATTENTION_BACKEND=TORCH_SDPA not applied" in html


def test_a_booted_knob_that_did_not_apply_is_not_measured(tmp_path: Path) -> None:
    """The MoE default-config warning: the boot runs as the baseline, so its runs would measure it again."""
    store = StudyStore.in_dir(tmp_path)
    base = store.begin_trial(TrialRole.baseline, BASE, {})
    store.finish_trial(base.id, Outcome.ok)
    folder = BASE.merged(Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": "/opt/tuned"}))
    trial = store.begin_trial(TrialRole.candidate, folder, {})
    line = "WARNING 11-30 07:41:37 [fused_moe.py:1164] Using default MoE config. Performance might be sub-optimal!"
    facts = parse_boot_facts(line)
    store.record_boot(trial.id, healthy_at=1.0, boot_facts=facts, mismatches=[], log_path=None,
                      knobs=check_knobs(folder, line, facts))
    detail = known.after_boot(store, trial, facts, BASE, EngineDefaults()) or ""
    assert detail.startswith("env.VLLM_TUNED_CONFIG_FOLDER=/opt/tuned did not apply (the engine logged its default")
    assert "same as the baseline (#1)" in detail


def test_serve_prints_each_knob_with_its_status() -> None:
    from servetune.cli import serve_cmd
    from servetune.engine.base import StartResult

    facts = parse_boot_facts(CPU_KNOBS_LOG)
    result = StartResult(outcome=Outcome.ok, boot_facts=facts, knobs=check_knobs(CPU_KNOBS, CPU_KNOBS_LOG, facts))
    out = io.StringIO()
    Console(file=out, width=400).print(serve_cmd._knobs_table(result))
    rows = {line.split("│")[1].strip(): line for line in out.getvalue().splitlines() if "env.VLLM" in line}
    assert "not applied" in rows["env.VLLM_CPU_KVCACHE_SPCE"] and "Unknown vLLM environment" in rows[
        "env.VLLM_CPU_KVCACHE_SPCE"]
    assert "│ applied" in rows["env.VLLM_CPU_KVCACHE_SPACE"]


# vLLM 0.26 on an H200 (2026-12-06, `servetune serve` in scripts/h200's call sequence): the MoE
# model with VLLM_TUNED_CONFIG_FOLDER at a folder holding the shipped H200 config, and the same
# variable misspelled.
H200_TUNED_LOG = (LOGS / "vllm026-h200-moe-tuned-folder.log").read_text()
H200_TUNED = Config.of(env={"VLLM_TUNED_CONFIG_FOLDER": "/tmp/moe-config/tuned",
                            "VLLM_TUNED_CONFG_FOLDER": "/tmp/moe-config/tuned"})


def test_on_a_real_gpu_the_tuned_moe_folder_is_applied_and_its_misspelling_is_not() -> None:
    facts = parse_boot_facts(H200_TUNED_LOG)
    knobs = check_knobs(H200_TUNED, H200_TUNED_LOG, facts)
    assert statuses(knobs) == {"env.VLLM_TUNED_CONFG_FOLDER": KnobStatus.not_applied,
                               "env.VLLM_TUNED_CONFIG_FOLDER": KnobStatus.applied}
    by = {k.knob: k for k in knobs}
    assert "for MoE layer" in (by["env.VLLM_TUNED_CONFIG_FOLDER"].evidence_line or "")
    assert "/tmp/moe-config/tuned/" in (by["env.VLLM_TUNED_CONFIG_FOLDER"].evidence_line or "")
    assert facts.resolved_env == {"VLLM_TUNED_CONFG_FOLDER": None, "VLLM_TUNED_CONFIG_FOLDER": "/tmp/moe-config/tuned"}
    assert (facts.gpu_memory_utilization_logged, facts.gpu_memory_utilization_without_graphs,
            facts.gpu_memory_utilization_to_keep_kv) == (0.92, 0.9154, 0.9246)
