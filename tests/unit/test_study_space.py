"""Parameters: lists and ranges, their enumeration (ofat, grid) and Optuna distributions."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from pydantic import ValidationError

from servetune.errors import ServetuneError
from servetune.study import Parameter


def test_list_keeps_types() -> None:
    p = Parameter.model_validate([True, False, 1, "auto", None, 0.5])
    assert p.kind == "categorical"
    assert p.values == (True, False, 1, "auto", None, 0.5)
    assert [type(v) for v in p.values] == [bool, bool, int, str, type(None), float]
    assert p.contains(1) and not p.contains(2) and not p.contains(1.0)
    assert isinstance(p.distribution(), CategoricalDistribution)


@pytest.mark.parametrize(
    ("data", "values"),
    [
        ({"low": 256, "high": 1024, "step": 256}, (256, 512, 768, 1024)),
        ({"low": 4, "high": 40, "log": True}, (4, 8, 16, 32, 40)),
        ({"low": 1, "high": 4}, (1, 2, 3, 4)),
        ({"low": 0.5, "high": 0.9, "step": 0.2}, (0.5, 0.7, 0.9)),
    ],
)
def test_range_enumeration(data: dict[str, object], values: tuple[object, ...]) -> None:
    assert Parameter.model_validate(data).enumerate("x") == pytest.approx(values)


def test_float_range_without_step_cannot_be_enumerated() -> None:
    p = Parameter.model_validate({"low": 0.5, "high": 0.9})
    assert p.kind == "float" and not p.enumerable("gpu-memory-utilization")
    with pytest.raises(ServetuneError, match="space.gpu-memory-utilization: a float range needs a step"):
        p.enumerate("gpu-memory-utilization")
    assert isinstance(p.distribution(), FloatDistribution)
    assert p.contains(0.7) and not p.contains(1.0)


def test_int_distribution() -> None:
    d = Parameter.model_validate({"low": 256, "high": 4096, "step": 256}).distribution()
    assert isinstance(d, IntDistribution) and (d.low, d.high, d.step) == (256, 4096, 256)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "empty"),
        ({"low": 1}, "needs both low and high"),
        ({"low": 4, "high": 1}, "must be below high"),
        ({"low": 1, "high": 4, "step": 0}, "step must be positive"),
        ({"low": 0, "high": 4, "log": True}, "low > 0"),
        ({"low": 1.5, "high": 4, "type": "int"}, "whole-number"),
        ({"values": [1], "low": 1}, "not both"),
        ("auto", "expected a list of values or a range"),
    ],
)
def test_bad_parameters(data: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Parameter.model_validate(data)
