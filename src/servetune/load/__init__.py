"""Load generation: scenarios, token-exact prompts, the streaming client, vLLM-compatible metrics.

The tuner calls `run_scenario(base_url, model, scenario, RunOptions(...)) -> RunResult`.
"""

from .bench import arun_scenario, run_scenario
from .options import RunOptions
from .records import RequestRecord, RunResult
from .scenario import PRESETS, Scenario, preset

__all__ = ["PRESETS", "RequestRecord", "RunOptions", "RunResult", "Scenario", "arun_scenario", "preset", "run_scenario"]
