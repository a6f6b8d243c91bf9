"""The busy-machine guard: a foreign GPU process or memory, or another process taking much of a
CPU box, refuses a boot in one line naming it; `--allow-busy-gpu` (or SERVETUNE_ALLOW_BUSY) boots anyway."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.machine import MachineBusy, MachineRecord, busy_reasons, checked_record
from servetune.machine.guard import ALLOW_BUSY_ENV, CPU_BUSY_SHARE
from servetune.machine.record import CpuState, GpuProcess, GpuState
from tests.fakes.machine import H100, install_fake_nvml, nvml_state, write_state
from tests.unit.cli_run import servetune


@pytest.fixture(autouse=True)
def guard_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_BUSY_ENV, raising=False)  # the suite's conftest turns it off


def _cpu(share: float, busiest: tuple[str, ...] = ()) -> MachineRecord:
    return MachineRecord(source="psutil", taken_at=0, cpu=CpuState(cores=2, others_share=share, busiest=busiest))


def test_a_foreign_process_on_the_slots_gpu_refuses_the_boot_in_one_line(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    busy = {**H100, "processes": [{"pid": 4242, "used": 30 * 2**30}], "mem_used": 31 * 2**30}
    install_fake_nvml(monkeypatch, write_state(tmp_path / "nvml.json", nvml_state([dict(H100), busy])))
    with pytest.raises(MachineBusy) as refused:
        checked_record({"CUDA_VISIBLE_DEVICES": "1"}, allow_busy=False, where="slot 1", settle_s=0)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("slot 1: the machine is busy: GPU 1 (GPU-1111aaaa): process 4242")
    assert "30,720 MiB" in line and "--allow-busy-gpu" in line
    # the other GPU is free: its slot boots
    assert checked_record({"CUDA_VISIBLE_DEVICES": "0"}, allow_busy=False, where="slot 0", settle_s=0).gpus
    # allowed: the record keeps who was there
    allowed = checked_record({"CUDA_VISIBLE_DEVICES": "1"}, allow_busy=True, where="slot 1", settle_s=0)
    assert [p.pid for p in allowed.gpus[0].processes] == [4242]
    monkeypatch.setenv(ALLOW_BUSY_ENV, "1")
    assert checked_record({"CUDA_VISIBLE_DEVICES": "1"}, allow_busy=False, where="slot 1", settle_s=0).gpus


def test_memory_no_listed_process_explains_is_a_tenant_too() -> None:
    def gpu(used: float, processes: tuple[GpuProcess, ...] = ()) -> MachineRecord:
        return MachineRecord(source="nvml", taken_at=0, gpus=(GpuState(index=0, name="H100", memory_used_mib=used,
                                                                       memory_total_mib=81559.0,
                                                                       processes=processes),))
    assert busy_reasons(gpu(600.0)) == []  # the driver's own reservation
    assert busy_reasons(gpu(40_000.0)) == ["GPU 0: 40,000 MiB in use by a process not visible here"]
    assert busy_reasons(gpu(40_000.0, (GpuProcess(pid=7, name="python"),))) == ["GPU 0: process 7 (python)"]


def test_a_cpu_box_is_busy_only_when_others_take_more_than_half_of_it() -> None:
    assert busy_reasons(_cpu(0.1)) == []
    assert busy_reasons(_cpu(CPU_BUSY_SHARE)) == []
    (reason,) = busy_reasons(_cpu(0.9, ("make (pid 12): 180% of a core",)))
    assert reason == "other processes use 90% of the host's 2 CPUs (make (pid 12): 180% of a core)"


def test_a_slot_with_cpus_of_its_own_is_judged_on_them() -> None:
    record = MachineRecord(source="psutil", taken_at=0, cpu=CpuState(cores=8, slot_cpus=(2, 3), others_share=0.8))
    assert busy_reasons(record) == ["other processes use 80% of the slot's 2 CPUs"]
    # measured on those CPUs only: the slots beside it (Ray actors, not this process's children) are not counted
    from servetune.machine.cpu import state
    mine = state(0.05, cpus=(0,))
    assert mine.slot_cpus == (0,) and mine.others_share is not None and 0.0 <= mine.others_share <= 1.0


def test_a_busy_reading_is_taken_again_before_refusing() -> None:
    readings = iter([_cpu(0.9), _cpu(0.05)])   # a tenant that just left: the second reading is free
    record = checked_record(None, allow_busy=False, where="serve", settle_s=60, take_record=lambda env: next(readings))
    assert record.cpu is not None and record.cpu.others_share == 0.05


def test_serve_refuses_a_busy_gpu_before_launching_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    busy = {**H100, "processes": [{"pid": 4242, "used": 2**30}]}
    install_fake_nvml(monkeypatch, write_state(tmp_path / "nvml.json", nvml_state([busy])))
    monkeypatch.setattr("servetune.machine.guard.SETTLE_S", 0.0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    result = servetune("serve", "--model", tmp_path, "--log-dir", tmp_path / "logs", "--command", "false")
    assert result.code == 2, result.stdout + result.stderr
    (line,) = result.error_lines
    assert line.startswith("error: serve: the machine is busy: GPU 0 (GPU-1111aaaa): process 4242 holding 1,024 MiB")
    assert "starting vLLM" not in result.stdout
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
