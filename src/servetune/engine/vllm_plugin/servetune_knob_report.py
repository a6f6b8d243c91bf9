"""A vLLM general plug-in: prints the values vLLM resolved for the variables servetune asks about.

vLLM loads every `vllm.general_plugins` entry point in each of its processes before it reads
its configuration. The launcher puts this folder (the module and its dist-info, which declares
the entry point) first on the server's PYTHONPATH and names the variables in
SERVETUNE_KNOB_REPORT; without that variable the plug-in does nothing. The line it prints is the
server's own reading of each variable (`vllm.envs`), parsed by engine/bootfacts.py: null for a
variable this vLLM does not know. The folder needs no install, so it works with any vLLM the
study's command runs (not inside a container, which does not see this path).
"""

from __future__ import annotations

import json
import os
import sys

PREFIX = "servetune-knobs: "  # engine/bootfacts.py KNOB_REPORT_PREFIX
ASK = "SERVETUNE_KNOB_REPORT"


def report() -> None:
    names = [n for n in os.environ.get(ASK, "").split(",") if n]
    if not names:
        return
    from vllm import envs  # only ever loaded by vLLM

    values: dict[str, str | None] = {}
    for name in names:
        if name not in envs.environment_variables:
            values[name] = None
            continue
        try:
            values[name] = str(getattr(envs, name))
        except Exception as exc:  # vLLM cannot parse the value: what it says is the evidence
            values[name] = f"<unreadable: {exc}>"
    print(PREFIX + json.dumps(values, sort_keys=True), file=sys.stderr, flush=True)
