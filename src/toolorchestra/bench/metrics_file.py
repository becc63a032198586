"""Reading an eval dir's metrics.json back (report, export-results): the file is checked to be the metrics an
eval wrote before any of it is used, so an edited, truncated or foreign file is one message naming the file and
the field, not a traceback from the middle of a plot.

Three shapes (bench/rundir.py writes the first two, bench/export.py the third): one policy's metrics; a sweep
(`kind: sweep`, one entry per threshold under `sweep`); an exported results dir (`by_preference`: one entry
per preference). Each entry must hold the fields report and export-results read; other fields pass unchecked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolorchestra.errors import UserError
from toolorchestra.files import json_type, read_json_object

EXPECTED = "the metrics.json of a `toolorchestra eval` run (accuracy, cost_per_task_usd, ...), a sweep, or an export"


class MetricsEntry(BaseModel):
    """The fields of one policy's metrics that report and export-results read."""

    model_config = ConfigDict(extra="allow")

    policy: str | None = None  # an exported entry may leave it to its file's top level
    n: int = Field(0, ge=0)
    accuracy: float = Field(ge=0, le=1)
    cost_per_task_usd: float = Field(ge=0)
    latency_s: dict[str, float | None] = Field(default_factory=dict)
    calls_per_tool: dict[str, float] = Field(default_factory=dict)
    calls_per_model: dict[str, float] = Field(default_factory=dict)
    answered_by: dict[str, float] = Field(default_factory=dict)
    stop_reasons: dict[str, float] = Field(default_factory=dict)
    per_subtask: dict[str, dict[str, Any]] = Field(default_factory=dict)


def read_metrics(path: Path) -> dict[str, Any]:
    """metrics.json at `path`, checked to be one of the three shapes; a UserError naming the field otherwise."""
    metrics = read_json_object(path, EXPECTED)
    if metrics.get("kind") == "sweep":
        _check_entries(path, "sweep", metrics.get("sweep"), list, need_policy=True)
    elif "by_preference" in metrics:
        _check_entries(path, "by_preference", metrics.get("by_preference"), dict, need_policy=False)
    elif "accuracy" in metrics:
        _check_entry(path, "", metrics, need_policy=True)
    else:
        raise UserError(f"{path}: expected {EXPECTED}; it has no field 'accuracy', 'sweep' or 'by_preference'")
    return metrics


def _check_entries(path: Path, field: str, entries: object, kind: type, need_policy: bool) -> None:
    """Each entry of a non-empty array (kind list) or object (kind dict), named by its index or key."""
    if not isinstance(entries, kind) or not entries:
        wanted = "a non-empty array of metrics" if kind is list else "a non-empty object of preference -> metrics"
        raise UserError(f"{path}: field '{field}': expected {wanted}, got {json_type(entries)}")
    for key, entry in entries.items() if isinstance(entries, dict) else enumerate(cast(list[Any], entries)):
        where = f"{field}.{key}"
        if not isinstance(entry, dict):
            raise UserError(f"{path}: field '{where}': expected an object of metrics, got {json_type(entry)}")
        _check_entry(path, f"{where}.", entry, need_policy)


def _check_entry(path: Path, prefix: str, entry: dict[str, Any], need_policy: bool) -> None:
    try:
        checked = MetricsEntry.model_validate(entry)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = prefix + ".".join(str(part) for part in error["loc"])
        got = "" if error["type"] == "missing" else f", got {error.get('input')!r:.80}"
        raise UserError(f"{path}: field '{field}': {error['msg']}{got} (expected {EXPECTED})") from None
    if need_policy and checked.policy is None:
        raise UserError(f"{path}: field '{prefix}policy': Field required (expected {EXPECTED})")
