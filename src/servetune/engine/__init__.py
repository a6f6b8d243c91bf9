"""Engines: start a server with a Config, prove what took effect, classify failures, stop it."""

from .base import Engine, StartResult
from .launch import Server, stop_if_ours
from .vllm import VllmEngine

__all__ = ["Engine", "Server", "StartResult", "VllmEngine", "stop_if_ours"]
