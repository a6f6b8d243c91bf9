"""What engine a study measured: its version and build, and the docker image it ran in.

A version string is read as PEP 440 (vLLM's are setuptools-scm versions): `0.32.0` is a release;
`0.19.1rc1.dev231+g9dd5ee011` is a development build, 231 commits after the last tag, of commit
9dd5ee011 (the local part's `g<hash>`); `0.32.0+cpu` is a release with a local build label. A
development build has no published image tag, so nothing may derive one from its version
(report/emit.py). The image of a docker-run engine is what `docker image inspect` says of it:
its id and its registry digests (`RepoDigests`), the reference a deployment can pin.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

INSPECT_TIMEOUT_S = 30.0
_COMMIT = re.compile(r"^g?(?P<sha>[0-9a-f]{7,40})$")
# `docker run` options that take a value (the image is the first word after the options)
_DOCKER_VALUE_OPTS = frozenset({
    "-e", "--env", "-v", "--volume", "-p", "--publish", "--name", "--network", "--net", "--gpus", "--ipc",
    "--shm-size", "-u", "--user", "-w", "--workdir", "--entrypoint", "--env-file", "--mount", "--runtime",
    "--device", "--label", "-l", "--cpuset-cpus", "--memory", "-m", "--ulimit", "--add-host", "--platform",
    "--pull", "--hostname", "-h", "--restart", "--cap-add", "--security-opt", "--log-driver"})


@dataclass(frozen=True)
class EngineBuild:
    """A parsed engine version: release, development number, commit, local label."""

    version: str
    release: str           # the public version without dev/local parts ("0.19.1rc1"); "" when no version
    dev: int | None        # commits after the last tag (a nightly / source build)
    commit: str | None     # the commit it was built from, when the version names it
    local: str | None      # the local label ("g9dd5ee011", "cpu", "g1234abc.d20261205")

    @property
    def is_dev(self) -> bool:
        """A development build: no published release carries this version."""
        return self.dev is not None or self.commit is not None

    def describe(self) -> str:
        if not self.release:
            return f"{self.version} (not a version number: build unknown)"
        if self.is_dev:
            commit = f", commit {self.commit}" if self.commit else ""
            dev = f"{self.dev} commits after {self.release}" if self.dev is not None else f"built from {self.release}"
            return f"{self.version} (development build: {dev}{commit})"
        return f"{self.version} (release{f', build {self.local}' if self.local else ''})"


def parse_build(version: str) -> EngineBuild:
    """`version` as an EngineBuild; a string that is no PEP 440 version names no release."""
    try:
        v = Version(version)
    except InvalidVersion:
        return EngineBuild(version, "", None, None, None)
    commit = None
    for part in (v.local or "").split("."):
        m = _COMMIT.match(part)
        if m and part.startswith("g"):
            commit = m["sha"]
            break
    release = v.base_version + (f"{v.pre[0]}{v.pre[1]}" if v.pre else "") + (f".post{v.post}" if v.post else "")
    return EngineBuild(version, release, v.dev, commit, v.local)


class ImageRef(BaseModel):
    """A docker image as the engine command named it and as docker knows it."""

    reference: str                 # as written in the command ("vllm/vllm-openai:nightly")
    id: str | None = None          # "sha256:..." (the local image id)
    repo_digests: list[str] = []   # "vllm/vllm-openai@sha256:..." (pullable, pinned)
    error: str | None = None       # why docker could not say

    @property
    def pinned(self) -> str | None:
        """The pullable reference pinned by digest: the repo digest of the named repository, else the first."""
        if not self.repo_digests:
            return None
        name = self.reference.split("@")[0]
        head, _, last = name.rpartition("/")
        repo = f"{head}/{last.split(':')[0]}" if head else last.split(":")[0]   # a registry's port keeps its colon
        return next((d for d in self.repo_digests if d.split("@")[0] == repo), self.repo_digests[0])


def docker_image(command: list[str]) -> str | None:
    """The image of a `docker|podman run [options] IMAGE ...` command; None for any other command."""
    if not command or Path(command[0]).name not in ("docker", "podman") or "run" not in command:
        return None
    words = command[command.index("run") + 1:]
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return words[i + 1] if i + 1 < len(words) else None
        if word.startswith("-"):
            i += 2 if word in _DOCKER_VALUE_OPTS else 1
            continue
        return word
    return None


def inspect_image(command: list[str]) -> ImageRef | None:
    """The image a docker engine command runs, with its id and digests; None when it is no docker command."""
    image = docker_image(command)
    if image is None:
        return None
    tool = shutil.which(command[0]) or command[0]
    try:
        done = subprocess.run([tool, "image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}", image],
                              capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ImageRef(reference=image, error=f"{command[0]} image inspect: {exc}")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return ImageRef(reference=image, error=why)
    return parse_inspect(image, done.stdout)


def parse_inspect(image: str, output: str) -> ImageRef:
    """`docker image inspect --format '{{.Id}} {{json .RepoDigests}}'` output as an ImageRef."""
    image_id, _, digests = output.strip().partition(" ")
    try:
        found = json.loads(digests) if digests else []
    except ValueError:
        found = []
    return ImageRef(reference=image, id=image_id or None,
                    repo_digests=[str(d) for d in found or [] if isinstance(d, str)])
