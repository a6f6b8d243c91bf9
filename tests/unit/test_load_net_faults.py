"""Network faults against the FAKE streaming server: a server that stalls mid-stream, one that
wants an API key, one whose /v1/models fails, and a dead proxy in the environment. First the
client (run_scenario), then whole trials through TrialExecutor with a stand-in vLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from click.testing import Result
from pydantic import ValidationError
from typer.testing import CliRunner

from servetune.cli import app
from servetune.engine.config import Config, render_flags
from servetune.engine.launch import group_members
from servetune.engine.ports import free_port
from servetune.engine.vllm import VllmEngine
from servetune.errors import ServetuneError
from servetune.load.bench import run_scenario
from servetune.load.options import RunOptions
from servetune.load.records import RequestRecord
from servetune.load.scenario import Scenario
from servetune.server_http import DIRECT
from servetune.store import StudyStore, TrialRole
from servetune.tune.trial import TrialExecutor, TrialPlan
from servetune.vocabulary import Outcome
from tests.fakes.launch import SCRIPT, fake_server

pytestmark = pytest.mark.slow  # fast tier: ./scripts/test-fast.sh leaves these out

KEY = "sk-test-5f1d0c9a7b"  # a value to search every written file for


@pytest.fixture(autouse=True)
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with proxy variables pointing at a port nobody listens on: a request
    that honoured them would fail."""
    dead = f"http://127.0.0.1:{free_port()}"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, dead)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _small(**kw: object) -> Scenario:
    return Scenario(**{"name": "s", "input_len": 6, "output_len": 6, "concurrency": 1, "num_prompts": 2,
                       "warmups": 0, **kw})


def _records(path: str | None) -> list[RequestRecord]:
    return [RequestRecord.model_validate_json(x) for x in Path(path or "").read_text().splitlines()]


# --- the client ------------------------------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_stream_that_stalls_fails_its_requests_as_stalled(tmp_path: Path, workers: int) -> None:
    with fake_server(ttft_ms=0, itl_ms=0, stall_after_chunks=2) as url:
        r = run_scenario(url, None, _small(stall_timeout_s=0.5), RunOptions(out_dir=tmp_path, run_id="stall", workers=workers))
    assert r.outcome is Outcome.stalled
    assert "stall_timeout_s" in (r.error or "") and "2 of 2 requests stalled" in (r.error or "")
    recs = _records(r.records_path)
    assert len(recs) == 2 and all((x.error or "").startswith("stalled:") for x in recs)
    assert json.loads((tmp_path / "stall.json").read_text())["outcome"] == "stalled"


@pytest.mark.timeout(120)
def test_a_stall_in_the_warmups_ends_the_run_before_the_measured_phase() -> None:
    with fake_server(ttft_ms=0, itl_ms=0, stall_after_chunks=1) as url:
        r = run_scenario(url, None, _small(warmups=1, stall_timeout_s=0.5))
    assert r.outcome is Outcome.stalled and (r.error or "").startswith("warmup:")


@pytest.mark.timeout(120)
def test_a_run_past_its_deadline_is_ended_and_its_requests_cancelled(tmp_path: Path) -> None:
    # The stall timeout is far away: only the run's deadline can end this run.
    with fake_server(ttft_ms=0, itl_ms=0, stall_after_chunks=2) as url:
        r = run_scenario(url, None, _small(concurrency=2, stall_timeout_s=600, run_timeout_s=1.0),
                         RunOptions(out_dir=tmp_path, run_id="late"))
    assert r.outcome is Outcome.run_timeout and "run_timeout_s" in (r.error or "")
    recs = _records(r.records_path)
    assert recs and all((x.error or "").startswith("run_timeout:") for x in recs)


def test_limits_are_derived_from_the_traffic_and_overridable() -> None:
    base = _small()
    assert _small(input_len=50_000).effective_stall_timeout_s > base.effective_stall_timeout_s > 0
    assert _small(num_prompts=200).effective_run_timeout_s > base.effective_run_timeout_s
    assert _small(output_len=4096).effective_run_timeout_s > base.effective_run_timeout_s
    assert _small(num_prompts=None, duration_s=600).effective_run_timeout_s > 600
    assert _small(stall_timeout_s=2.5, run_timeout_s=9).effective_stall_timeout_s == 2.5
    assert _small(stall_timeout_s=2.5, run_timeout_s=9).effective_run_timeout_s == 9
    for bad in ({"stall_timeout_s": 0}, {"run_timeout_s": -1}):
        with pytest.raises(ValidationError):
            _small(**bad)


@pytest.mark.timeout(120)
def test_a_server_wanting_a_key_gets_it_on_every_request_and_it_is_written_nowhere(tmp_path: Path) -> None:
    with fake_server(ttft_ms=0, itl_ms=0, api_key=KEY) as url:
        r = run_scenario(url, None, _small(warmups=1), RunOptions(out_dir=tmp_path, run_id="key", api_key=KEY))
        with DIRECT.open(url + "/fake/seen", timeout=5) as resp:
            seen = json.load(resp)
    assert r.outcome is Outcome.ok and r.summary["completed"] == 2, r.error
    assert "error" not in r.server_stats  # /metrics answered too
    assert seen["unauthorized"] == 0  # /v1/models, /tokenize, /metrics, the streams: all with the key
    for path in tmp_path.rglob("*"):
        assert KEY not in path.read_text(), path
    assert KEY not in r.model_dump_json()


def test_run_options_keep_the_key_out_of_their_repr() -> None:
    options = RunOptions(run_id="key", api_key=KEY)
    assert KEY not in repr(options) and "run_id='key'" in repr(options)


@pytest.mark.timeout(120)
def test_no_key_or_a_wrong_key_is_an_unauthorized_run() -> None:
    with fake_server(ttft_ms=0, itl_ms=0, api_key=KEY) as url:
        for key in (None, "wrong"):
            r = run_scenario(url, None, _small(), RunOptions(api_key=key))
            assert r.outcome is Outcome.unauthorized and "HTTP 401" in (r.error or "")


@pytest.mark.timeout(120)
def test_an_error_from_v1_models_is_a_bad_response_run() -> None:
    with fake_server(ttft_ms=0, itl_ms=0, models_status=500) as url:
        r = run_scenario(url, None, _small())
    assert r.outcome is Outcome.bad_response and "HTTP 500" in (r.error or "")


# --- trials ----------------------------------------------------------------------------------

class FakeVllm(VllmEngine):
    """VllmEngine (its start, stop, diagnose and client_api_key) booting the fake server: the
    Config's flags become the fake's fault options, its environment is what vLLM would get."""

    def build_command(self, config: Config, port: int, cache: object = None) -> list[str]:
        return [sys.executable, str(SCRIPT), "--port", str(port), "--ttft-ms", "0", "--itl-ms", "0",
                *render_flags(config.flags)]


SCENARIO = _small(stall_timeout_s=0.5)


def _run_trial(executor: TrialExecutor, store: StudyStore, flags: dict[str, object]) -> str:
    trial = store.begin_trial(TrialRole.candidate, Config.of(flags), {})  # type: ignore[arg-type]
    return executor.run(trial, TrialPlan(scenarios=[SCENARIO], min_replicates=1, max_replicates=1),
                        enough=lambda t, reps: True, progress=lambda *a: None)


@pytest.mark.timeout(300)
def test_failing_servers_end_their_trials_with_an_outcome_and_the_study_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The key lives in servetune's environment, which the launched server inherits (as vLLM
    # reads VLLM_API_KEY); the executor must find it there and send it.
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    store = StudyStore.in_dir(tmp_path)
    executor = TrialExecutor(FakeVllm(model="fake", startup_timeout_s=60, grace_s=5), store, tmp_path,
                             tokenizer_dir=None)
    cases = [({"stall-after-chunks": 2}, "stalled"), ({"models-status": 500}, "bad_response"),
             ({"models-status": 401}, "unauthorized"), ({}, "ok")]
    for flags, expected in cases:
        assert _run_trial(executor, store, flags) == expected
    trials = store.trials()
    assert [t.outcome for t in trials] == [expected for _, expected in cases]
    stalled, bad, unauthorized, ok = trials
    assert (stalled.detail or "").startswith("s replicate 1: measured phase: 2 of 2 requests stalled")
    assert [r.outcome for r in store.runs(stalled.id)] == ["stalled"]  # kept as evidence
    assert "/v1/models answered HTTP 500" in (bad.detail or "")
    assert "/v1/models answered HTTP 401" in (unauthorized.detail or "")
    assert [r.outcome for r in store.runs(ok.id)] == ["ok"]
    for t in trials:  # every server was stopped, the stalled one included
        assert t.server_pid is not None and t.server_pgid is not None
        assert not psutil.pid_exists(t.server_pid) and not group_members(t.server_pgid)
    store.close()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_direct_requests_ignore_proxy_variables_set_before_servetune_starts(tmp_path: Path) -> None:
    # A proxy in the environment from the start (as a user's shell has it), not only after import.
    probe = "import sys; from servetune import server_http as h; print(h.get_json(sys.argv[1], None)['data'][0]['id'])"
    with fake_server(ttft_ms=0, itl_ms=0) as url:
        done = subprocess.run([sys.executable, "-c", probe, url + "/v1/models"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout.strip() == "fake-model", done.stderr


# --- servetune bench -------------------------------------------------------------------------

def _bench(url: str, out: Path, *extra: str) -> Result:
    return CliRunner().invoke(app, ["bench", "--url", url, "--scenario", "single-decode", "--input-len", "6",
                                    "--output-len", "6", "--num-prompts", "2", "--warmups", "0",
                                    "--out", str(out), *extra])


@pytest.mark.timeout(120)
def test_bench_takes_the_key_from_the_named_variable_and_prints_it_nowhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVER_KEY", KEY)
    with fake_server(ttft_ms=0, itl_ms=0, api_key=KEY) as url:
        done = _bench(url, tmp_path / "r.json", "--api-key-env", "MY_SERVER_KEY")
        monkeypatch.setenv("VLLM_API_KEY", KEY)  # the default variable, without the option
        default = _bench(url, tmp_path / "d.json")
    assert done.exit_code == 0 and default.exit_code == 0, done.output + default.output
    assert KEY not in done.output + default.output
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 2
    for path in tmp_path.rglob("*"):
        assert KEY not in path.read_text(), path


def test_bench_names_a_missing_key_variable_without_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    done = _bench("http://127.0.0.1:9", tmp_path / "r.json", "--api-key-env", "NO_SUCH_KEY_VAR")
    assert isinstance(done.exception, ServetuneError) and "NO_SUCH_KEY_VAR" in str(done.exception)


@pytest.mark.timeout(120)
def test_bench_against_a_stalling_server_ends_with_a_failed_run(tmp_path: Path) -> None:
    with fake_server(ttft_ms=0, itl_ms=0, stall_after_chunks=1) as url:
        done = _bench(url, tmp_path / "r.json", "--stall-timeout", "0.5")
    assert done.exit_code == 1 and "stalled" in done.output
    assert json.loads((tmp_path / "r.json").read_text())["outcome"] == "stalled"


def test_the_client_key_is_the_one_vllm_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    engine = VllmEngine(model="m")
    assert engine.client_api_key(Config.of({})) is None
    assert engine.client_api_key(Config.of({}, env={"VLLM_API_KEY": "from-config"})) == "from-config"
    monkeypatch.setenv("VLLM_API_KEY", "from-servetune")
    assert engine.client_api_key(Config.of({})) == "from-servetune"
    assert engine.client_api_key(Config.of({"api-key": ["first", "second"]})) == "first"  # the flag wins, as in vLLM
