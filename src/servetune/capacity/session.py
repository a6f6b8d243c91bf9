"""`servetune capacity`'s search on one server (`CapacitySession`): the first level from a
saturation probe unless given, the stored runs of a resumed search replayed before any request,
each level measured over HTTP and the result document rewritten as each level ends. What it
shows as it goes is the caller's (`SessionView`: the command's live table)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..load.scenario import Scenario
from .document import RUNNING, capacity_document, write_document
from .estimate import estimate
from .http import LoadKind, http_measure
from .levels import LevelSample
from .probe import SaturationProbe, http_probe
from .replay import Replay
from .search import SearchResult, SearchSettings, search
from .slo import Slo


class SessionView(Protocol):
    """What a search tells as it goes."""

    def note(self, line: str) -> None: ...

    def probed(self, probe: SaturationProbe, start: float) -> None: ...

    def progress(self, level: float, run: int, done: int, total: int) -> None: ...

    def level_done(self, result: SearchResult) -> None: ...


@dataclass
class CapacitySession:
    """One capacity search as it runs: what it measures, where its document (`out`, the command's
    --out) is rewritten as each level ends, and what it has found so far (`result`)."""

    out: Path
    sc: Scenario
    slos: list[Slo]
    settings: SearchSettings
    load: str
    kind: LoadKind
    target: dict[str, str | None]  # the document's "url" and "serve"
    num_prompts: int
    start: float | None  # --start as given; None: from a saturation probe
    model: str | None
    runs_dir: Path
    stored: list[LevelSample]  # --resume: the runs OUT already holds, replayed before any request
    view: SessionView
    search_start: dict[str, Any]  # the first level and the probe behind it, as written to OUT
    result: SearchResult = field(default_factory=SearchResult)

    def document(self, status: str) -> dict[str, Any]:
        est = estimate(self.result.levels, integer=self.kind == "concurrency", alpha=self.settings.alpha)
        return capacity_document(self.result, est, self.slos, self.settings, self.load, {
            **self.target, "scenario": json.loads(self.sc.model_dump_json()),
            "num_prompts": self.num_prompts, **self.search_start}, status)

    def on_level(self, done: SearchResult) -> None:
        write_document(self.out, self.document(RUNNING))
        self.view.level_done(done)

    def run_search(self, base_url: str, key: str | None, tok: Path | None, kv_cache_tokens: int | None = None) -> None:
        settings, view = self.settings, self.view
        first = settings.start
        if self.search_start["start"] is not None:
            first = float(self.search_start["start"])   # a resumed search starts where it started
        elif self.start is None:
            first = probed_start(base_url, key, tok, self.sc, self.kind, settings, self.runs_dir, self.model, view,
                                 self.search_start)
        self.search_start["start"] = first
        if self.stored:
            view.note(f"resuming {self.out}: {len(self.stored)} stored runs replayed")
        measure = http_measure(base_url, self.sc, self.slos, load=self.kind, num_prompts=self.num_prompts,
                               looks=settings.looks, out_dir=self.runs_dir, model=self.model, tokenizer_dir=tok,
                               api_key=key, first_run=len(self.stored), progress=view.progress,
                               kv_cache_tokens=kv_cache_tokens)
        search(Replay(self.stored, measure), self.slos, replace(settings, start=first), on_level=self.on_level,
               result=self.result)


def probed_start(url: str, key: str | None, tok: Path | None, sc: Scenario, kind: LoadKind, settings: SearchSettings,
                 runs_dir: Path, model: str | None, view: SessionView, record: dict[str, Any]) -> float:
    """The first level from a saturation probe (settings.start when the probe completes too few)."""
    view.note("probe: keeping the server busy for a few seconds ...")
    probe = http_probe(url, sc, out_dir=runs_dir, model=model, tokenizer_dir=tok, api_key=key)
    if probe is None:
        view.note(f"probe: too few requests completed to say; first level {settings.start:g}")
        return settings.start
    first = min(max(probe.start(kind), settings.min_level), settings.max_level)
    record["probe"] = probe.to_dict()
    view.probed(probe, first)
    return first
