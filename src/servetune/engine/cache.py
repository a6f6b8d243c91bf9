"""A study's own compile caches: where a server keeps them, and whether a boot found them warm.

Every server of a study gets three cache roots in its environment, under one directory (the
study's `cache/` unless `engine.cache_root` names another), one per slot so that wiping a slot's
cache never pulls files from under a boot on another slot:

- `VLLM_CACHE_ROOT=<root>/slotN/vllm`: vLLM's torch.compile artifacts (and its other caches);
- `TORCHINDUCTOR_CACHE_DIR=<root>/slotN/inductor` and `TRITON_CACHE_DIR=<root>/slotN/triton`:
  kernels compiled outside vLLM's own compile step (vLLM redirects both into its compile-cache
  directory while it compiles, so these hold what is built before or after that).

So a result never depends on what an earlier job left in `~/.cache`: a poisoned compile cache (a
field report lost days to one that cut prefill 7x without an error) stays outside the study.

**Warm and cold.** vLLM 0.32 keys its compiled graphs by a hash, not by the directory: under
`VLLM_CACHE_ROOT/torch_compile_cache/` it keeps `<10 hex>/rank_R_D/<prefix>` (the hash of the
compile-relevant environment (`envs.compile_factors()`, which ignores `VLLM_CACHE_ROOT` itself),
`VllmConfig.compute_hash()`, the traced source files and the compiler's version) and, with AOT
compilation (the default of the CPU build), `torch_aot_compile/<64 hex>/rank_R_D/model` (the same
factors without the source files). Two configs that compile the same graph share an entry; a
config whose flags change the graph gets its own. The boot log names the entry it used ("Using
cache directory: ... for vLLM's torch.compile", "saved AOT compiled function to ...", "Directly load
AOT compilation from path ...", "Compiling model again due to a load failure from ..."). A boot is:

- `warm` when an entry it used already existed before it started (this config, or one with the
  same compile key, was compiled into this root earlier);
- `stale` when such an entry existed but the engine could not load it and compiled again ("Compiling
  model again due to a load failure from ..."; vLLM logs it only when the file exists: the 0.32 CPU
  build's logs under tests/fixtures/logs show it for its AOT artifacts, "'function' object has no
  attribute 'finalize_loading'");
- `cold` when none did: the root was empty, or held only other configs' entries (their Triton and
  inductor kernels may still be reused by content hash; `root_empty_before` tells the two apart);
- `unknown` when the log names no entry (no torch.compile: `enforce-eager`, another engine) and the
  root was not empty before the boot.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from .bootfacts import BootFacts

CACHE_ENV = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
_COMPILE_DIR = "torch_compile_cache"
# An entry of vLLM's compile cache: torch_compile_cache/<hash> or torch_compile_cache/torch_aot_compile/<hash>
_ENTRY = re.compile(r"torch_compile_cache/(?:(torch_aot_compile)/)?([0-9a-f]{8,64})(?:/|$)")

CacheState = Literal["cold", "warm", "stale", "unknown"]
# What a boot log says it did with torch.compile, where no snapshot of the root before it exists
# (stores older than the cache record): loaded compiled graphs from the cache, or compiled some.
_LOADED = re.compile(r"Directly load (?:AOT compilation from path|the compiled graph\(s\))")
_COMPILED = re.compile(r"Compiling a graph for |Compiling model again due to a load failure"
                       r"|saved AOT compiled function to ")


@dataclass(frozen=True)
class CacheDirs:
    """The cache roots of one slot of a study."""

    root: Path

    @classmethod
    def for_slot(cls, study_root: Path, slot: int) -> CacheDirs:
        return cls(Path(study_root).absolute() / f"slot{slot}")

    @property
    def vllm(self) -> Path:
        return self.root / "vllm"

    @property
    def inductor(self) -> Path:
        return self.root / "inductor"

    @property
    def triton(self) -> Path:
        return self.root / "triton"

    def env(self) -> dict[str, str]:
        """The variables that put a server's caches here (the directories are made first)."""
        for path in (self.vllm, self.inductor, self.triton):
            path.mkdir(parents=True, exist_ok=True)
        return dict(zip(CACHE_ENV, (str(self.vllm), str(self.inductor), str(self.triton)), strict=True))

    def wipe(self) -> None:
        """Remove everything the slot's servers cached (call with no server of the slot running)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def snapshot(self) -> CacheSnapshot:
        """What the root holds now: its file count and vLLM's compile-cache entries."""
        if not self.root.is_dir():
            return CacheSnapshot(0, frozenset())
        files = sum(1 for p in self.root.rglob("*") if p.is_file())
        compile_dir = self.vllm / _COMPILE_DIR
        entries: set[str] = set()
        if compile_dir.is_dir():
            for child in compile_dir.iterdir():
                if child.name == "torch_aot_compile" and child.is_dir():
                    entries.update(f"torch_aot_compile/{c.name}" for c in child.iterdir() if any(c.iterdir()))
                elif child.is_dir() and any(child.iterdir()):
                    entries.add(child.name)
        return CacheSnapshot(files, frozenset(entries))


@dataclass(frozen=True)
class CacheSnapshot:
    files: int
    entries: frozenset[str]   # "<hash>" or "torch_aot_compile/<hash>"


class CacheRecord(BaseModel):
    """One boot's caches, as stored with its trial (`trials.cache_json`)."""

    root: str | None = None               # the slot's cache root the server got (None: not booted yet)
    state: CacheState | None = None
    root_empty_before: bool | None = None
    files_before: int | None = None
    entries: list[str] = []               # the compile-cache entries the boot log names
    entries_present_before: list[str] = []
    compile_seconds: float | None = None  # "torch.compile took ... s in total"
    wipe_before_boot: bool = False        # the root was wiped before this boot
    replaces_trial: int | None = None     # the seq of the excluded boot this one was booted for


def compile_entries(facts: BootFacts, *, failed: bool = False) -> list[str]:
    """The compile-cache entries (`<hash>`, `torch_aot_compile/<hash>`) a boot log names (`failed`:
    those it could not load)."""
    out: list[str] = []
    for path in facts.compile_cache_load_failed if failed else facts.compile_cache_paths:
        m = _ENTRY.search(path)
        if m:
            entry = f"{m[1]}/{m[2]}" if m[1] else m[2]
            if entry not in out:
                out.append(entry)
    return out


def compile_state_from_log(log_text: str) -> Literal["cold", "warm"] | None:
    """`warm` when the log shows compiled graphs loaded from the cache and none compiled, `cold`
    when it compiled any, None when it shows neither (no torch.compile: `enforce-eager`, a build
    that does not compile, another engine). For boots recorded without a `CacheRecord`."""
    if _COMPILED.search(log_text):
        return "cold"
    return "warm" if _LOADED.search(log_text) else None


def cache_record(dirs: CacheDirs, before: CacheSnapshot, facts: BootFacts, *, wiped: bool = False,
                 replaces_trial: int | None = None) -> CacheRecord:
    """The record of a boot that started with `before` in `dirs` and logged `facts`."""
    used = compile_entries(facts)
    present = [e for e in used if e in before.entries]
    failed = set(compile_entries(facts, failed=True))
    state: CacheState
    if present and all(e in failed for e in present):
        state = "stale"
    elif present:
        state = "warm"
    elif used or before.files == 0:
        state = "cold"
    else:
        state = "unknown"
    return CacheRecord(root=str(dirs.root), state=state, root_empty_before=before.files == 0,
                       files_before=before.files, entries=used, entries_present_before=present,
                       compile_seconds=facts.torch_compile_seconds, wipe_before_boot=wiped,
                       replaces_trial=replaces_trial)
