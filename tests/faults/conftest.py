"""Fixtures shared by the fault-injection tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import standin


@pytest.fixture
def marks() -> Iterator[list[str]]:
    """Markers of the tuners a test starts; whatever still carries one afterwards is killed."""
    made: list[str] = []
    yield made
    for mark in made:
        standin.kill_marked(mark)
