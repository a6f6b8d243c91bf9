"""Engines: start a server with a Config, prove what took effect, classify failures, stop it."""

from .base import Engine, StartResult
from .launch import Server, stop_if_ours
from .registry import build_engine, engine_for, engine_for_study, engine_kinds, profile_for, register_engine
from .sglang import SglangEngine
from .vllm import VllmEngine

__all__ = ["Engine", "Server", "SglangEngine", "StartResult", "VllmEngine", "build_engine", "engine_for",
           "engine_for_study", "engine_kinds", "profile_for", "register_engine", "stop_if_ours"]
