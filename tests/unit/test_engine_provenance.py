"""The engine's version read as a build (release, development number, commit) and the docker image
of an engine command, as `docker image inspect` describes it (engine/provenance.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servetune.engine.provenance import docker_image, inspect_image, parse_build, parse_inspect
from servetune.store import StudyStore
from servetune.tune.provenance import record_image


@pytest.mark.parametrize(("version", "release", "dev", "commit", "is_dev"), [
    ("0.32.0", "0.32.0", None, None, False),
    ("0.32.0+cpu", "0.32.0", None, None, False),
    ("0.26.0+cu129", "0.26.0", None, None, False),
    ("0.32.1.dev12+g1234abc", "0.32.1", 12, "1234abc", True),
    ("0.19.1rc1.dev231+g9dd5ee011", "0.19.1rc1", 231, "9dd5ee011", True),
    ("0.19.1rc1.dev231+g9dd5ee011.d20260413", "0.19.1rc1", 231, "9dd5ee011", True),
    ("0.20.0rc1", "0.20.0rc1", None, None, False),
    ("dev", "", None, None, False),
])
def test_versions_as_builds(version: str, release: str, dev: int | None, commit: str | None, is_dev: bool) -> None:
    build = parse_build(version)
    assert (build.release, build.dev, build.commit, build.is_dev) == (release, dev, commit, is_dev)


def test_a_development_build_is_described_with_its_commit() -> None:
    text = parse_build("0.19.1rc1.dev231+g9dd5ee011").describe()
    assert "development build" in text and "231 commits after 0.19.1rc1" in text and "commit 9dd5ee011" in text
    assert parse_build("0.32.0+cpu").describe() == "0.32.0+cpu (release, build cpu)"


@pytest.mark.parametrize(("command", "image"), [
    (["docker", "run", "--rm", "--gpus", "all", "-e", "HF_TOKEN", "vllm/vllm-openai:nightly"], "vllm/vllm-openai:nightly"),
    (["/usr/bin/podman", "run", "--network=host", "-v", "/a:/b", "img@sha256:ab", "--model", "m"], "img@sha256:ab"),
    (["docker", "run", "--", "localhost:5000/vllm:dev"], "localhost:5000/vllm:dev"),
    (["python", "-m", "vllm.entrypoints.openai.api_server"], None),
    (["docker", "compose", "up"], None),
])
def test_the_image_of_an_engine_command(command: list[str], image: str | None) -> None:
    assert docker_image(command) == image


def test_inspect_output_and_the_digest_of_the_named_repository() -> None:
    ref = parse_inspect("localhost:5000/vllm:dev",
                        'sha256:aa ["other/x@sha256:11","localhost:5000/vllm@sha256:22"]\n')
    assert ref.id == "sha256:aa" and ref.pinned == "localhost:5000/vllm@sha256:22"
    assert parse_inspect("mine:local", "sha256:bb []").pinned is None


def _fake_docker(tmp_path: Path, script: str) -> str:
    tool = tmp_path / "docker"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return str(tool)


def test_inspecting_through_the_docker_command(tmp_path: Path) -> None:
    docker = _fake_docker(tmp_path, 'echo "sha256:cc [\\"vllm/vllm-openai@sha256:33\\"]"\n')
    ref = inspect_image([docker, "run", "vllm/vllm-openai:nightly"])
    assert ref is not None and ref.reference == "vllm/vllm-openai:nightly"
    assert ref.pinned == "vllm/vllm-openai@sha256:33" and ref.error is None


def test_an_image_docker_does_not_know_is_kept_with_why(tmp_path: Path) -> None:
    docker = _fake_docker(tmp_path, 'echo "Error: No such image: x:y" >&2; exit 1\n')
    ref = inspect_image([docker, "run", "x:y"])
    assert ref is not None and ref.id is None and ref.error == "Error: No such image: x:y"


def test_a_study_keeps_each_image_its_starts_found(tmp_path: Path) -> None:
    store = StudyStore(tmp_path / "study.sqlite")
    notes: list[str] = []
    docker = _fake_docker(tmp_path, 'echo "sha256:$IMAGE_ID []"\n')
    command = [docker, "run", "mine:dev"]
    os.environ["IMAGE_ID"] = "01"
    try:
        record_image(store, command, notes.append)
        record_image(store, command, notes.append)            # a resume on the same image: nothing new
        os.environ["IMAGE_ID"] = "02"                         # the tag moved between two starts
        record_image(store, command, notes.append)
    finally:
        del os.environ["IMAGE_ID"]
    assert [i.id for i in store.engine_images()] == ["sha256:01", "sha256:02"]
    assert notes == ["the engine's image changed since the study's last start: mine:dev is now sha256:02"]
    assert record_image(store, ["python", "-m", "vllm"], notes.append) is None
