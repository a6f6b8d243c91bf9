"""The machine under every boot: its record before the boot (GPUs through NVML or nvidia-smi,
the CPU through psutil), the busy-machine guard, and sampling through every measured run."""

from .guard import ALLOW_BUSY_ENV, MachineBusy, busy_reasons, checked_record
from .record import CpuState, GpuProcess, GpuState, MachineRecord, differences
from .sampler import RunMachine, RunSampler
from .snapshot import slot_gpus, take

__all__ = ["ALLOW_BUSY_ENV", "CpuState", "GpuProcess", "GpuState", "MachineBusy", "MachineRecord", "RunMachine",
           "RunSampler", "busy_reasons", "checked_record", "differences", "slot_gpus", "take"]
