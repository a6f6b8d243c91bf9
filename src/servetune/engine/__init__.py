"""Engines: start a server with a Config, prove what took effect, classify failures, stop it."""

from .base import Engine, StartResult
from .launch import Server, stop_if_ours
from .registry import engine_for, engine_kinds, register_engine
from .vllm import VllmEngine

__all__ = ["Engine", "Server", "StartResult", "VllmEngine", "engine_for", "engine_kinds", "register_engine",
           "stop_if_ours"]
