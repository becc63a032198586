"""Errors meant for users: each names what was wrong and what was expected.

The CLI prints these as one clear message (a traceback only with --debug); anything else is a bug.
"""


class UserError(Exception):
    """A mistake in user input (a file, a field, an argument) with a message saying how to fix it."""


class ConfigError(UserError):
    """A catalog or training config file that does not validate."""


class BackendError(Exception):
    """A model backend failed after its retries; the message says which endpoint and why."""


class TrainingError(UserError):
    """A training run that cannot learn anything, e.g. every tool call of a step failed or the SFT warm start
    found no example; the message names the cause (the first distinct errors seen)."""


class EvalError(UserError):
    """An evaluation in which every episode failed; the message names the first distinct errors."""
