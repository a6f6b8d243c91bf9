"""The CLI contract (docs/guides/cli-contract.md), one rule per test, on the cases that broke it:
bad values and URLs exit 2 before any work; outputs are named as given and never overwritten
without --force; OUT.runs/ is checked first; stores of another kind are refused; an interrupt
says what was kept. No server is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import assert_one_line_error, servetune, tree

from servetune.store import StudyStore

UNREACHABLE = "http://127.0.0.1:9"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml"
NO_ENGINE_STUDY = EXAMPLE.read_text().replace("command: [python, -m, vllm.entrypoints.openai.api_server]",
                                              "command: [servetune-test-no-such-engine]")


@pytest.mark.parametrize(("url", "needle"), [
    ("127.0.0.1:8301", "did you mean http://127.0.0.1:8301"), ("ftp://127.0.0.1:9", "http or https"),
    ("http://127.0.0.1:99999", "port"), ("http://127.0.0.1:9 x", "no spaces"), ("http://", "no host"),
])
@pytest.mark.parametrize("command", [["bench", "--scenario", "chat"], ["capacity", "--scenario", "chat-bursty",
                                                                        "--slo", "ttft:p50=100"], ["drift"]])
def test_a_bad_url_is_bad_input(tmp_path: Path, command: list[str], url: str, needle: str) -> None:
    assert_one_line_error(servetune(*command, "--url", url, "--out", tmp_path / "r.json"), "--url", needle)
    assert tree(tmp_path) == {}


@pytest.mark.parametrize("args", [
    ["--seed", "-5"], ["--num-prompts", "100000000000000000000"], ["--input-len", "100000000"],
    ["--slo", "ttft=0"], ["--stall-timeout", "nan"], ["--run-timeout", "-1"], ["--rate", "nan"],
    ["--connect-timeout", "0"], ["--workers", "100000"],
])
def test_bench_refuses_values_that_are_no_workload(tmp_path: Path, args: list[str]) -> None:
    assert_one_line_error(servetune("bench", "--url", UNREACHABLE, "--scenario", "chat", "--out",
                                    tmp_path / "r.json", *args), args[0])
    assert tree(tmp_path) == {}


def test_capacity_refuses_a_fractional_number_of_users(tmp_path: Path) -> None:
    assert_one_line_error(servetune("capacity", "--url", UNREACHABLE, "--scenario", "chat", "--slo", "ttft:p50=100",
                                    "--load", "concurrency", "--start", "1.5", "--out", tmp_path / "r.json"),
                          "--start 1.5", "whole number")


@pytest.mark.parametrize("command", [["capacity", "--scenario", "chat-bursty", "--slo", "ttft:p50=100"], ["drift"]])
def test_a_runs_folder_that_is_a_file_is_refused_before_measuring(tmp_path: Path, command: list[str]) -> None:
    # The URL refuses at once: a check after the measurement would end 1 ("unreachable"), not 2.
    (tmp_path / "res.runs").write_text("the user's file\n")
    assert_one_line_error(servetune(*command, "--url", UNREACHABLE, "--out", tmp_path / "res.json"),
                          "res.runs exists and is not a directory")
    assert tree(tmp_path) == {"res.runs": b"the user's file\n"}


@pytest.mark.parametrize("command", [["bench", "--scenario", "chat"], ["capacity", "--scenario", "chat-bursty",
                                                                        "--slo", "ttft:p50=100"], ["drift"]])
def test_an_existing_result_is_not_overwritten_without_force(tmp_path: Path, command: list[str]) -> None:
    out = tmp_path / "res.json"
    out.write_text("an earlier result\n")
    assert_one_line_error(servetune(*command, "--url", UNREACHABLE, "--out", out), "exists", "--force")
    forced = servetune(*command, "--url", UNREACHABLE, "--out", out, "--force")
    assert forced.code == 1 and "unreachable" in forced.stderr  # past the path check, at the server
    assert out.read_text() == "an earlier result\n"  # a run that measured nothing replaces nothing


def test_bench_refuses_a_device_as_its_result(tmp_path: Path) -> None:
    assert_one_line_error(servetune("bench", "--url", UNREACHABLE, "--scenario", "chat", "--out", "/dev/null"),
                          "not a regular file")


def test_model_make_keeps_a_model_that_is_there(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"a real": "model"}')
    (tmp_path / "tokenizer.json").write_text("{}")
    before = tree(tmp_path)
    assert_one_line_error(servetune("model", "make", "tiny", tmp_path), "not empty", "--force")
    assert tree(tmp_path) == before
    assert servetune("model", "make", "tiny", tmp_path, "--force").code == 0
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]


def test_tune_does_not_append_to_an_ab_store(tmp_path: Path) -> None:
    ab_dir = tmp_path / "ab"
    ab_dir.mkdir()
    store = StudyStore(ab_dir / StudyStore.FILENAME)
    store.set_meta_json("ab", {"A": {}, "B": {}})
    store.close()
    before = (ab_dir / StudyStore.FILENAME).read_bytes()
    study = tmp_path / "study.yaml"
    study.write_text(NO_ENGINE_STUDY)
    assert_one_line_error(servetune("tune", study, "--out", ab_dir), "holds an A/B")
    assert (ab_dir / StudyStore.FILENAME).read_bytes() == before


@pytest.mark.parametrize(("command", "needle"), [("python \"unclosed", "No closing quotation"), ("", "empty")])
def test_probe_context_refuses_a_command_it_cannot_run(tmp_path: Path, command: str, needle: str) -> None:
    assert_one_line_error(servetune("probe", "context", "--model", tmp_path, "--command", command,
                                    "--log-dir", tmp_path / "logs"), "--command", needle)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("command", ["context", "memory"])
def test_probe_without_any_answer_exits_1_in_both_probes(tmp_path: Path, command: str) -> None:
    args = {"context": ["--log-dir", tmp_path / "logs"],
            "memory": ["--scenario", "single-decode", "--out", tmp_path / "probe"]}[command]
    result = servetune("probe", command, "--model", tmp_path, "--command", "servetune-test-no-such-engine", *args)
    assert result.code == 1, result
    assert "Traceback" not in result.stderr + result.stdout


def test_a_broken_tokenizer_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text('{"model": ')
    assert_one_line_error(servetune("bench", "--url", UNREACHABLE, "--scenario", "chat", "--tokenizer", tmp_path,
                                    "--out", tmp_path / "r.json"), "--tokenizer", "tokenizer.json does not load")


def test_an_interrupt_says_what_was_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("servetune.cli.bench_cmd.check_reachable", lambda *a, **k: None)
    monkeypatch.setattr("servetune.cli.bench_cmd.run_scenario", interrupted)
    result = servetune("bench", "--url", UNREACHABLE, "--scenario", "chat", "--out", tmp_path / "r.json")
    assert result.code == 130
    assert result.error_lines == [f"interrupted; nothing written to {tmp_path / 'r.json'}"]


def test_a_silent_server_is_shown_waiting_with_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    from servetune.cli.waiting import Silence

    monkeypatch.setattr("servetune.cli.waiting.last_read_ns", lambda: 0)  # no stream read in this process
    silence = Silence(stall_timeout_s=60, run_timeout_s=600)
    assert silence.text().plain == ""  # just heard from: nothing to say
    silence.started = silence._heard = silence.started - 12 * 10**9  # 12 s of silence since the start
    text = silence.text().plain
    assert "no data for 12 s; giving up in 48 s (--stall-timeout, --run-timeout)" in text, text
    silence.started -= 590 * 10**9  # the run's deadline is nearer than the stall limit: it is the one shown
    assert "giving up in 0 s" in silence.text().plain
