"""Search strategies: one module per strategy behind the `Strategy` protocol (see base.py)."""

from . import stopping
from .base import Proposal, SearchBase, Strategy, TrialView, Tried
from .baseline import BaselineOnly
from .grid import Grid, gray_order
from .ofat import OneFactorAtATime
from .optuna_tpe import OptunaTPE
from .registry import STRATEGIES, make_strategy, register_strategy, strategy_names

__all__ = [
    "STRATEGIES",
    "BaselineOnly",
    "Grid",
    "OneFactorAtATime",
    "OptunaTPE",
    "Proposal",
    "SearchBase",
    "Strategy",
    "TrialView",
    "Tried",
    "gray_order",
    "make_strategy",
    "register_strategy",
    "stopping",
    "strategy_names",
]
