"""The orchestrator loop: model turn, concurrent tool calls, repeat until answer, turn cap or budget.

Each step (model turn or tool call) goes into a `Trajectory` with its tokens, dollars, latency and
errors; trajectories are saved as JSONL.
"""

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.trajectory import Step, Trajectory, read_trajectories, write_trajectory
from toolorchestra.envs.base import current_task

__all__ = ["Orchestrator", "Preference", "Step", "Trajectory", "current_task", "read_trajectories", "write_trajectory"]
