"""Option values gated by the GPU's compute capability or an installed kernel package: `init`
leaves them out of the space it drafts (saying so), `plan` flags those a study file names."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import servetune

from servetune.engine.defaults import EngineDefaults
from servetune.engine.gates import why_not_here
from servetune.engine.hardware import Gpu, Hardware
from servetune.engine.vllm import VllmEngine
from servetune.models.presets import make_model
from servetune.study import load_study, parse_study
from servetune.tune.plan import hardware_warnings

AMPERE = Hardware((Gpu("NVIDIA GeForce RTX 3090", 24.0, (8, 6)),), 16, "test")
HOPPER = Hardware((Gpu("NVIDIA H100", 80.0, (9, 0)),), 16, "test")


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    model = tmp_path / "tiny"
    make_model("tiny", model)
    return model


def test_init_leaves_an_fp8_kv_cache_out_on_ampere_and_says_why(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", tiny, "--gpus", "1", "--compute-capability", "8.6").code == 0
    assert "kv-cache-dtype" not in load_study(study).space
    assert ("# left out: kv-cache-dtype fp8: an fp8 KV cache (native from Ada, Hopper, Blackwell) needs compute "
            "capability 8.9 or newer; these GPUs are 8.6") in study.read_text()
    assert servetune("init", study, "--model", tiny, "--gpus", "1", "--compute-capability", "9.0",
                     "--force").code == 0
    assert load_study(study).space["kv-cache-dtype"].values == ("fp8",)
    assert "left out" not in study.read_text()


def test_init_warns_of_a_serve_line_flag_the_gpus_cannot_run(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    result = servetune("init", study, "--serve-cmd", f"vllm serve {tiny} --kv-cache-dtype fp8_e5m2", "--gpus", "1",
                       "--compute-capability", "8.6")
    assert result.code == 0, result
    assert "warning: engine.args.kv-cache-dtype: kv-cache-dtype: fp8_e5m2: an fp8 KV cache" in " ".join(result.stdout.split())
    assert load_study(study).engine.args["kv-cache-dtype"] == "fp8_e5m2"  # the baseline is the user's


def _study(tiny: Path) -> str:
    return f"""name: gates
engine: {{model: {tiny}, args: {{quantization: fp8}}}}
space:
  attention-backend: [FLASHMLA, FLASHINFER, TRITON_ATTN]
scenarios: [{{preset: chat}}]
"""


def test_plan_flags_values_above_the_gpu_or_without_their_kernels(tiny: Path) -> None:
    spec = parse_study(_study(tiny))
    flagged = dict(hardware_warnings(spec, AMPERE, modules=[]))
    assert set(flagged) == {("engine", "args", "quantization"), ("space", "attention-backend")}
    assert "fp8 compute" in flagged[("engine", "args", "quantization")]
    shown = [why for loc, why in hardware_warnings(spec, AMPERE, modules=[]) if loc == ("space", "attention-backend")]
    assert any("FLASHMLA" in w and "9.0 or newer; these GPUs are 8.6" in w for w in shown)
    assert any("FLASHINFER" in w and "'flashinfer'" in w for w in shown)
    assert not any("TRITON_ATTN" in w for w in shown)
    # FlashInfer installed, a Hopper GPU: only what Hopper lacks is left (nothing here)
    assert hardware_warnings(spec, HOPPER, modules=["flashinfer"]) == []
    # nothing known of the hardware or the engine's packages: nothing to say
    assert hardware_warnings(spec, None, modules=None) == []


def test_the_plan_command_prints_the_flags_with_their_lines(tmp_path: Path, tiny: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(_study(tiny))
    monkeypatch.setattr(VllmEngine, "read_defaults",
                        lambda self: EngineDefaults(known=True, source="test parser", modules=["flashinfer"]))
    monkeypatch.setattr("servetune.cli.plan_cmd.detect", lambda: AMPERE)
    result = servetune("plan", study)
    assert result.code == 0, result  # flagged, not refused: the plan may be made on another machine
    text = "".join(result.stdout.split())  # rich wraps long lines, even inside the path, at the console's width
    assert "".join(f"warning: {study}:4: space.attention-backend: attention-backend: FLASHMLA".split()) in text
    assert "'flashinfer'" not in text  # the engine's interpreter has it


def test_values_that_run_anywhere_pass() -> None:
    assert why_not_here("kv-cache-dtype", "auto", AMPERE) is None
    assert why_not_here("max-num-seqs", 64, AMPERE) is None
    assert "no GPU here" in (why_not_here("kv-cache-dtype", "fp8", Hardware((), 2, "no nvidia-smi")) or "")
