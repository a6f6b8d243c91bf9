"""A study's cache roots (engine/cache.py): the servers' environment, the docker mount, and each
boot's cold / warm / stale record from the cache before it and its boot log (real vLLM logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.bootfacts import BootFacts, parse_boot_facts
from servetune.engine.cache import CACHE_ENV, CacheDirs, cache_record, compile_entries, compile_state_from_log
from servetune.engine.config import Config
from servetune.engine.vllm import VllmEngine

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
GPU_ENTRY = "5e4923d49b"   # vllm026-gpu-tiny.log: "Using cache directory: .../torch_compile_cache/5e4923d49b/..."
GPU_AOT = "torch_aot_compile/e8e9d372686cf246c85706b4487abf8e8a413bdb0053d5930af1bb2e44ac3856"


def test_the_entries_a_real_boot_log_names() -> None:
    gpu = parse_boot_facts((LOGS / "vllm026-gpu-tiny.log").read_text())
    assert compile_entries(gpu) == [GPU_ENTRY, GPU_AOT]
    assert gpu.torch_compile_seconds == pytest.approx(11.43)
    cpu = parse_boot_facts((LOGS / "vllm032-cpu-async-mbt1024.log").read_text())
    assert compile_entries(cpu) == ["torch_aot_compile/e756de8a2def8410f97fbf73ac00b0b0eed32ea4bb024d23813641fea1b490e2"]
    eager = parse_boot_facts((LOGS / "vllm032-cpu-unknown-flag.log").read_text())
    assert compile_entries(eager) == []


def test_the_compile_time_line_of_a_compile_that_ran_with_its_warmup() -> None:
    line = ("(EngineCore pid=1) INFO 12-06 10:00:00 [decorators.py:708] [backbone] torch.compile and initial "
            "profiling/warmup run together took 7.25 s in total")
    assert parse_boot_facts(line).torch_compile_seconds == pytest.approx(7.25)


def _entry(dirs: CacheDirs, entry: str) -> None:
    path = dirs.vllm / "torch_compile_cache" / entry / "rank_0_0"
    path.mkdir(parents=True)
    (path / "artifact").write_text("x")


def test_cold_then_warm_then_cold_after_a_wipe(tmp_path: Path) -> None:
    dirs = CacheDirs.for_slot(tmp_path / "cache", 0)
    gpu = parse_boot_facts((LOGS / "vllm026-gpu-tiny.log").read_text())
    first = cache_record(dirs, dirs.snapshot(), gpu)
    assert (first.state, first.root_empty_before, first.files_before) == ("cold", True, 0)
    assert first.compile_seconds == pytest.approx(11.43) and first.root == str(dirs.root)

    _entry(dirs, GPU_ENTRY)              # what the first boot compiled
    second = cache_record(dirs, dirs.snapshot(), gpu)
    assert second.state == "warm" and second.entries_present_before == [GPU_ENTRY]

    dirs.wipe()
    assert not dirs.root.exists()
    third = cache_record(dirs, dirs.snapshot(), gpu, wiped=True, replaces_trial=7)
    assert (third.state, third.root_empty_before, third.wipe_before_boot, third.replaces_trial) == ("cold", True, True, 7)


def test_another_configs_entry_leaves_a_boot_cold_but_not_on_an_empty_root(tmp_path: Path) -> None:
    dirs = CacheDirs.for_slot(tmp_path, 1)
    _entry(dirs, "0123456789")
    record = cache_record(dirs, dirs.snapshot(), parse_boot_facts((LOGS / "vllm026-gpu-tiny.log").read_text()))
    assert (record.state, record.root_empty_before) == ("cold", False)


def test_an_entry_the_engine_could_not_load_is_stale(tmp_path: Path) -> None:
    dirs = CacheDirs.for_slot(tmp_path, 0)
    cpu = parse_boot_facts((LOGS / "vllm032-cpu-auto-fit.log").read_text())
    (entry,) = compile_entries(cpu)
    assert compile_entries(cpu, failed=True) == [entry]    # "Compiling model again due to a load failure"
    _entry(dirs, entry)
    assert cache_record(dirs, dirs.snapshot(), cpu).state == "stale"


def test_a_log_without_a_compile_entry_on_a_used_root_is_unknown(tmp_path: Path) -> None:
    dirs = CacheDirs.for_slot(tmp_path, 0)
    (dirs.triton / "k").mkdir(parents=True)
    (dirs.triton / "k" / "kernel.so").write_text("x")
    assert cache_record(dirs, dirs.snapshot(), BootFacts()).state == "unknown"
    assert cache_record(CacheDirs(tmp_path / "empty"), CacheDirs(tmp_path / "empty").snapshot(),
                        BootFacts()).state == "cold"


def test_the_server_gets_the_slots_roots_over_the_machines(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/somewhere/else")
    dirs = CacheDirs.for_slot(tmp_path / "cache", 2)
    env = VllmEngine(model="m").environment(Config.of({}), cache=dirs)
    assert [env[name] for name in CACHE_ENV] == [str(dirs.vllm), str(dirs.inductor), str(dirs.triton)]
    assert dirs.root == (tmp_path / "cache" / "slot2").absolute() and dirs.triton.is_dir()
    assert VllmEngine(model="m").environment(Config.of({}))["VLLM_CACHE_ROOT"] == "/somewhere/else"


def test_a_docker_engine_mounts_the_root_and_forwards_its_variables(tmp_path: Path) -> None:
    dirs = CacheDirs.for_slot(tmp_path, 0)
    engine = VllmEngine(command=["docker", "run", "--rm", "vllm/vllm-openai:v0.32.0"], model="m")
    argv = engine.build_command(Config.of({}), 8000, dirs)
    image = argv.index("vllm/vllm-openai:v0.32.0")
    opts = argv[:image]
    assert f"{dirs.root}:{dirs.root}" in opts and opts[opts.index(f"{dirs.root}:{dirs.root}") - 1] == "-v"
    assert all(["-e", name] == opts[opts.index(name) - 1:opts.index(name) + 1] for name in CACHE_ENV)


def test_a_boot_log_says_whether_torch_compile_compiled_or_loaded_from_the_cache() -> None:
    """For boots stored without a cache record (the H200 studies): vLLM 0.26's GPU log compiles
    a graph, 0.32's CPU build saves an AOT artifact, a warm boot only loads (the lines of the
    H200 Qwen3-8B OFAT study's baseline), an eager boot shows neither."""
    assert compile_state_from_log((LOGS / "vllm026-gpu-tiny.log").read_text()) == "cold"
    assert compile_state_from_log((LOGS / "vllm032-cpu-async-mbt1024.log").read_text()) == "cold"
    warm = ("INFO [decorators.py:300] Directly load AOT compilation from path /c/vllm/torch_compile_cache/"
            "torch_aot_compile/eeb90e4aa5b2/rank_0_0/model\n"
            "INFO [backends.py:210] Directly load the compiled graph(s) for compile range (1, 8192) from the "
            "cache, took 1.834 s\n")
    assert compile_state_from_log(warm) == "warm"
    assert compile_state_from_log(warm + "INFO Compiling a graph for compile range (1, 16384) takes 7.40 s\n") == "cold"
    assert compile_state_from_log("INFO Application startup complete.\n") is None
