"""Test helpers for the ToolScale action tests: a domain's bound tools over a fresh episode database, the
check that a tool fails with given messages, and the checks every domain's action families must pass
(generated after the earlier families, both families present, at least 100 in the test split, refusals that
carry their failing request and write nothing, no owner in both splits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolorchestra.envs.toolscale.actions import domain_specs
from toolorchestra.envs.toolscale.data import load_domain
from toolorchestra.envs.toolscale.tasks import (
    ACTION_FAMILIES,
    BASE_FAMILIES,
    generate_tasks,
)


def tools_of(shared_data: Path, name: str) -> tuple[Any, dict[str, Any]]:
    """(a fresh episode database of domain `name`, its tools bound to it by name)."""
    domain = load_domain(shared_data, name)
    database = domain.new_database()
    return database, {spec.name: spec.bind(database) for spec in domain_specs(domain)}


def expect_errors(tool: Any, cases: list[tuple[dict[str, Any], str]]) -> None:
    """Each (arguments, message): the call fails with an error containing the message."""
    for arguments, message in cases:
        result = tool.call(arguments)
        assert result.error and message in result.error, (arguments, result.error)


def checked_action_tasks(shared_data: Path, name: str) -> tuple[Any, list[Any]]:
    """(domain, its seed-0 action-family tasks) of domain `name`, after the shared checks."""
    domain = load_domain(shared_data, name)
    tasks = generate_tasks(domain, 0)
    families = [t.meta["family"] for t in tasks]
    first = min(families.index(family) for family in ACTION_FAMILIES)
    assert families[:first] == [f for f in families if f in BASE_FAMILIES]  # appended after the earlier ones
    actions = [t for t in tasks if t.meta["family"] in ACTION_FAMILIES]
    assert {t.meta["family"] for t in actions} == set(ACTION_FAMILIES)
    assert sum(t.split == "test" for t in actions) >= 100
    for task in actions:
        if task.meta["family"] == "action_refusal":  # the forbidden request is in the task and fails
            assert task.meta["refused_actions"] and not task.meta["writes"]
    by_owner = {(t.meta["owner"], t.split) for t in tasks}
    assert len({owner for owner, _ in by_owner}) == len(by_owner)  # no user in both splits
    return domain, actions
