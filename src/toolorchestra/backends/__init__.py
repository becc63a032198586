"""Model backends: one async interface over remote OpenAI-compatible endpoints, in-process
transformers models and recorded (replay) outputs.

Every backend returns a `Completion`: text, parsed tool calls, token usage and wall latency. The
agent loop never knows which kind it talks to.
"""

from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage

__all__ = ["Backend", "Completion", "ToolCall", "Usage"]
