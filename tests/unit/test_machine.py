"""The machine under a boot: its record through a fake NVML, a fake nvidia-smi and psutil; what
makes two records unlike; the run sampler's summary (energy, throttling)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from servetune.machine import MachineRecord, RunSampler, differences, take
from servetune.machine.record import CpuState, GpuState
from servetune.machine.sampler import summarise, throttle_names
from tests.fakes.machine import H100, install_fake_nvml, install_fake_smi, no_nvml, nvml_state, write_state

SMI_STATE = ("0, NVIDIA H200, GPU-aaaa, 570.86.15, 600.00, 1980, 3201, 1980, 3201, Enabled, Enabled, 41, 600, 143771\n"
             "1, NVIDIA H200, GPU-bbbb, 570.86.15, 700.00, [N/A], [N/A], 1980, 3201, Disabled, [N/A], 39, 20480, 143771")
SMI_APPS = "GPU-bbbb, 4242, /usr/bin/python3, 20000"
SMI_VERSION = "NVIDIA-SMI version  : 570.86.15\nNVML version        : 570.86\nDRIVER version      : 570.86.15\nCUDA Version        : 12.8"


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    second = {**H100, "uuid": "GPU-2222bbbb", "processes": [{"pid": 4242, "used": 20 * 2**30}],
              "mem_used": 21 * 2**30}
    state = write_state(tmp_path / "nvml.json", nvml_state([dict(H100), second]))
    install_fake_nvml(monkeypatch, state)
    return state


def test_nvml_records_the_slots_gpus_only(fake_gpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = take({"CUDA_VISIBLE_DEVICES": "1"}, cpu_window_s=0)
    assert record.source == "nvml" and record.driver == "550.54.15" and record.cuda == "12.4"
    (gpu,) = record.gpus
    assert (gpu.index, gpu.name, gpu.uuid) == (1, "NVIDIA H100 80GB HBM3", "GPU-2222bbbb")
    assert (gpu.power_limit_w, gpu.app_sm_clock_mhz, gpu.app_mem_clock_mhz) == (700.0, 1980, 2619)
    assert (gpu.max_sm_clock_mhz, gpu.persistence, gpu.ecc, gpu.temperature_c) == (1980, True, True, 34)
    assert gpu.memory_used_mib == 21 * 1024 and gpu.memory_total_mib == 80 * 1024
    assert [(p.pid, p.used_mib) for p in gpu.processes] == [(4242, 20 * 1024)]
    assert record.cpu is not None and record.cpu.cores >= 1
    # every GPU of the host without a mask; a record survives the store's JSON
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g.index for g in take({}, cpu_window_s=0).gpus] == [0, 1]
    assert MachineRecord.model_validate_json(record.model_dump_json()) == record


def test_a_query_the_gpu_does_not_support_reads_as_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = {**H100, "app_sm": None, "app_mem": None, "ecc": None}
    install_fake_nvml(monkeypatch, write_state(tmp_path / "nvml.json", nvml_state([cloud])))
    (gpu,) = take({"CUDA_VISIBLE_DEVICES": "0"}, cpu_window_s=0).gpus
    assert gpu.app_sm_clock_mhz is None and gpu.ecc is None and gpu.power_limit_w == 700.0


def test_without_nvml_nvidia_smi_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_nvml(monkeypatch)
    install_fake_smi(monkeypatch, tmp_path / "bin", {"--query-gpu=index,name": SMI_STATE,
                                                    "--query-compute-apps": SMI_APPS, "--version": SMI_VERSION})
    record = take({"CUDA_VISIBLE_DEVICES": "0,1"}, cpu_window_s=0)
    assert record.source == "nvidia-smi" and record.driver == "570.86.15" and record.cuda == "12.8"
    first, second = record.gpus
    assert (first.name, first.power_limit_w, first.app_sm_clock_mhz, first.persistence, first.ecc) == \
        ("NVIDIA H200", 600.0, 1980, True, True)
    assert second.app_sm_clock_mhz is None and second.ecc is None and second.persistence is False  # [N/A]
    assert [p.pid for p in second.processes] == [4242] and not first.processes
    assert [g.index for g in take({"CUDA_VISIBLE_DEVICES": "1"}, cpu_window_s=0).gpus] == [1]


def test_without_nvml_or_nvidia_smi_the_cpu_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_nvml(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    record = take({}, cpu_window_s=0.05)
    assert record.source == "psutil" and not record.gpus and not record.is_gpu
    assert record.cpu is not None and record.cpu.cores >= 1
    assert record.cpu.others_share is not None and 0.0 <= record.cpu.others_share <= 1.0
    assert "CPU" in record.label()


def test_a_slot_without_gpus_records_the_cpu_even_on_a_gpu_host(fake_gpus: Path) -> None:
    record = take({"CUDA_VISIBLE_DEVICES": ""}, cpu_window_s=0)
    assert not record.gpus and record.source == "psutil"


def _gpu_record(**gpu: object) -> MachineRecord:
    return MachineRecord(source="nvml", taken_at=0, driver="550.54.15", cuda="12.4",
                         gpus=(GpuState(**{"index": 0, "name": "H100", "power_limit_w": 700.0,
                                           "app_sm_clock_mhz": 1980, "app_mem_clock_mhz": 2619,
                                           "temperature_c": 30.0, **gpu}),))  # type: ignore[arg-type]


def test_power_limit_clocks_and_driver_make_machines_unlike_temperature_does_not() -> None:
    base = _gpu_record()
    assert differences(base, _gpu_record(temperature_c=70.0, memory_used_mib=900.0)) == []
    assert differences(base, _gpu_record(power_limit_w=500.0)) == ["GPU 0 power limit 700 W -> 500 W"]
    assert differences(base, _gpu_record(app_sm_clock_mhz=1500)) == ["GPU 0 application SM clock 1980 MHz -> 1500 MHz"]
    newer = base.model_copy(update={"driver": "560.1"})
    assert differences(base, newer) == ["driver 550.54.15 -> 560.1"]
    cpu = MachineRecord(source="psutil", taken_at=0, cpu=CpuState(model="Xeon"))
    assert differences(base, cpu) == ["GPU -> CPU"]


def test_summary_integrates_power_and_counts_throttling() -> None:
    samples = [{"t": 1.0, "power_w": 300.0, "sm_util": 80.0, "sm_clock_mhz": 1980, "throttle": []},
               {"t": 2.0, "power_w": 500.0, "sm_util": 100.0, "sm_clock_mhz": 1500, "throttle": ["power cap"]},
               {"t": 3.0, "power_w": 500.0, "sm_util": 90.0, "sm_clock_mhz": 1600, "throttle": ["power cap"]}]
    run = summarise("nvidia-smi", 1.0, 4.0, samples, None)
    # trapezoids 1-3 s (400 + 500 J), the first second at 300 W, the last at 500 W
    assert run.energy_j == pytest.approx(300 + 400 + 500 + 500) and run.energy_source == "power samples"
    assert run.mean_power_w == pytest.approx(1300 / 3) and run.max_power_w == 500.0
    assert run.min_sm_clock_mhz == 1500 and run.mean_sm_util == pytest.approx(90.0)
    assert run.throttled == {"power cap": pytest.approx(2 / 3)}
    counted = summarise("nvml", 1.0, 4.0, samples, 1234.0)
    assert counted.energy_j == 1234.0 and counted.energy_source == "energy counter"
    assert throttle_names(0x4 | 0x40 | 0x1) == ["power cap", "thermal (hardware)"]  # idle is no slow-down


def _until(sampler: RunSampler, samples: int) -> None:
    done = threading.Event()
    while not done.wait(0.01):
        if len(sampler._samples) >= samples:
            done.set()


def test_the_sampler_reads_power_energy_and_throttling_through_a_run(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    throttled = {**H100, "reasons": 0x4 | 0x1}
    install_fake_nvml(monkeypatch, write_state(tmp_path / "nvml.json", nvml_state([throttled])))
    sampler = RunSampler({"CUDA_VISIBLE_DEVICES": "0"}, interval_s=0.01)
    with sampler:
        _until(sampler, 2)
    run = sampler.result
    assert run is not None and run.source == "nvml" and len(run.samples) >= 2
    assert run.mean_power_w == 350.0 and run.mean_sm_util == 90.0
    assert run.throttled == {"power cap": 1.0}
    assert run.energy_source == "energy counter" and run.energy_j is not None and run.energy_j >= 0


def test_the_sampler_reads_the_cpu_on_a_cpu_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_nvml(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    sampler = RunSampler({}, interval_s=0.01)
    with sampler:
        _until(sampler, 2)
    run = sampler.result
    assert run is not None and run.source == "psutil" and run.energy_j is None
    assert all("cpu_busy" in s and "load1" in s for s in run.samples)
    assert run.mean_cpu_busy is not None and 0.0 <= run.mean_cpu_busy <= 1.0
    assert run.mean_others_share is not None and 0.0 <= run.mean_others_share <= 1.0


def test_other_processes_cpu_during_a_run_marks_it_contended() -> None:
    from servetune.load.records import RunResult
    from servetune.tune.trial import marked_contended

    result = RunResult(scenario="s", summary={}, client_health={"contended": False, "warnings": []})
    busy = summarise("psutil", 1.0, 3.0, [{"t": 1.0, "cpu_busy": 0.9}], None, others_share=0.5)
    calm = summarise("psutil", 1.0, 3.0, [{"t": 1.0, "cpu_busy": 0.9}], None, others_share=0.05)
    marked = marked_contended(result, busy)
    assert marked.client_health["contended"] is True
    assert marked.client_health["warnings"] == ["machine contended: other processes took 50 % of the host's CPU "
                                                "during the run"]
    assert marked_contended(result, calm) is result and marked_contended(result, None) is result
