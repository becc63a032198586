"""Environments: sets of tasks, the tools each task offers, and deterministic scoring.

Every environment (the replay worlds, tau2, ToolScale, live HLE/FRAMES) implements `Env`.
"""

from toolorchestra.envs.base import Env, Score, Task

__all__ = ["Env", "Score", "Task"]
