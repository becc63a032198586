"""The reader policy (agent/reader.py, `--policy reader`): decisions from the offered labels' prices and
profiles, never their names, with the embedded SmolLM2 reading each question's task type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolorchestra.agent.preference import Preference
from toolorchestra.agent.reader import Offer, choose, expected_rewards, offers, p_right
from toolorchestra.bench.eval import EvalRequest, run_eval
from toolorchestra.catalog.schema import ModelProfile, Price
from toolorchestra.envs.replay.world import DirectoryWorldEnv
from toolorchestra.errors import UserError

ACCURACY = Preference.parse("accuracy").weights()
COST = Preference.parse("cost").weights()


def offer(label: str, per_call: float, algebra: float, history: float) -> Offer:
    profile = ModelProfile(n=40, accuracy={"algebra": algebra, "history": history}, output_tokens=20)
    return Offer("answer", label, Price(per_call=per_call), 1.0, profile)


def test_the_decision_reads_numbers_not_names():
    pool = [offer("a", 0.001, 0.9, 0.3), offer("b", 0.001, 0.3, 0.9), offer("c", 0.002, 0.8, 0.8)]
    algebra, history = {"algebra": 1.0}, {"history": 1.0}
    assert choose(pool, algebra, 50, ACCURACY).label == "a"
    assert choose(pool, history, 50, ACCURACY).label == "b"
    renamed = [Offer(o.tool, f"zz-{index}", o.price, o.latency_s, o.profile) for index, o in enumerate(pool)]
    assert choose(renamed, algebra, 50, ACCURACY).label == "zz-0"
    assert choose(list(reversed(pool)), history, 50, ACCURACY).label == "b"  # the order offered does not matter
    assert p_right(pool[2], {"algebra": 0.5, "history": 0.5}) == pytest.approx(0.8)
    assert p_right(pool[0], {"algebra": 0.25, "history": 0.75}) == pytest.approx(0.45)
    assert p_right(pool[0], {"geometry": 1.0}) == pytest.approx(0.6)  # a type it was not measured on: its mean


def test_prices_move_the_decision():
    pool = [offer("a", 0.001, 0.9, 0.3), offer("c", 0.002, 0.8, 0.8)]
    assert choose(pool, {"algebra": 1.0}, 50, COST).label == "a"
    dear = [offer("a", 0.1, 0.9, 0.3), pool[1]]  # a at 100x: cost preference moves to c, accuracy stays
    assert choose(dear, {"algebra": 1.0}, 50, COST).label == "c"
    assert choose(dear, {"algebra": 1.0}, 50, ACCURACY).label == "a"
    same = [offer("x", 0.01, 0.8, 0.8), offer("y", 0.001, 0.8, 0.8)]
    assert choose(same, {"algebra": 1.0}, 50, ACCURACY).label == "y"  # equal accuracy: the cheaper (cost floor)
    rewards = expected_rewards(same, {"algebra": 1.0}, 50, ACCURACY)
    assert rewards[1] > rewards[0]


def test_a_call_is_priced_on_the_questions_type():
    """A flat price per call (a replay world's recorded mean) is scaled by how the type's answers compared to it; a
    price per token is paid on the type's mean output tokens. So a label cheap on average but dear on programs
    loses the programs and keeps the rest."""
    from toolorchestra.agent.reader import expected_cost

    def priced(label: str, price: Price, relative: dict | None = None, tokens: dict | None = None) -> Offer:
        profile = ModelProfile(n=40, accuracy={"code": 0.8, "choice": 0.8}, output_tokens=100,
                               relative_cost_by_type=relative, output_tokens_by_type=tokens)
        return Offer("answer", label, price, 1.0, profile)

    verbose = priced("verbose", Price(per_call=0.001), relative={"code": 2.0, "choice": 0.5})
    even = priced("even", Price(per_call=0.0012))
    code, choice = {"code": 1.0}, {"choice": 1.0}
    assert expected_cost(verbose, code, 50) == pytest.approx(0.002)
    assert expected_cost(verbose, {"code": 0.5, "choice": 0.5}, 50) == pytest.approx(0.00125)
    assert expected_cost(verbose, {"geometry": 1.0}, 50) == pytest.approx(0.001)  # a type it lacks: the mean
    assert expected_cost(even, code, 50) == pytest.approx(0.0012)  # no per-type figures: the price as shown
    assert choose([verbose, even], code, 50, COST).label == "even"
    assert choose([verbose, even], choice, 50, COST).label == "verbose"
    from toolorchestra.agent.reader import expected_latency

    timed = Offer("answer", "timed", Price(per_call=0.001), 2.0,
                  verbose.profile.model_copy(update={"latency_s_by_type": {"code": 9.0, "choice": 0.5}}))
    assert expected_latency(timed, code) == 9.0 and expected_latency(timed, {"code": 0.5, "choice": 0.5}) == 4.75
    assert expected_latency(verbose, code) == 1.0  # no per-type seconds: the label's latency prior
    per_token = priced("tokens", Price(input_per_m=1.0, output_per_m=10.0), tokens={"code": 300, "choice": 1})
    assert expected_cost(per_token, code, 50) == pytest.approx((50 * 1.0 + 300 * 10.0) / 1e6)
    assert expected_cost(per_token, choice, 50) == pytest.approx((50 * 1.0 + 1 * 10.0) / 1e6)


def test_profiles_measure_output_tokens_and_dollars_per_type(tmp_path):
    from toolorchestra.envs.replay.profiles import measure_profiles

    def long(i: int) -> bool:  # two of each type in turn, so that either split has both
        return (i // 2) % 2 == 0

    root = write_world(tmp_path / "world", [{"id": i, "problem": f"q{i}", "answer": "a",
                                             "subset": "long" if long(i) else "short"} for i in range(40)],
                       {"m": [{"id": i, "response": "word " * (30 if long(i) else 3), "correct": True,
                               "cost_usd": 0.003 if long(i) else 0.001, "latency_s": 1.0} for i in range(40)]})
    profile = measure_profiles(DirectoryWorldEnv(root), "train", None)["m"]
    assert profile.relative_cost_by_type == {"long": 1.5, "short": 0.5}
    assert profile.latency_s_by_type == {"long": 1.0, "short": 1.0}  # the recorded seconds
    assert profile.output_tokens_by_type is not None
    assert profile.output_tokens_by_type["long"] > 5 * profile.output_tokens_by_type["short"]


def test_labels_without_profiles_are_named(tmp_path):
    env = DirectoryWorldEnv(write_typed_world(tmp_path / "w"))
    with pytest.raises(UserError, match=r"reader: labels \['generalist', 'histo', 'mathy'\] have no capability profile"):
        offers(env.tools_for(env.tasks("test")[0]))


EVENTS = ["the war of the roses", "the hundred years war", "the thirty years war", "the cold war", "the siege of troy"]


def write_typed_world(root: Path, count: int = 60) -> Path:
    """A replay world whose question text says its type: sums (algebra) and dates (history). mathy is right on
    every sum and on 1 in 5 dates, histo the reverse, generalist on 4 in 5 of both at twice the price."""
    rows: dict[str, list[dict]] = {"mathy": [], "histo": [], "generalist": []}
    questions = []
    for i in range(count):
        subset = "algebra" if (i // 2) % 2 == 0 else "history"
        problem = (f"Compute {i} + {3 * i} and write the sum as a number." if subset == "algebra"
                   else f"In which year did {EVENTS[i % len(EVENTS)]} end? Name the year only.")
        questions.append({"id": i, "problem": problem, "answer": str(i), "subset": subset})
        right = {"mathy": subset == "algebra" or i % 5 == 0, "histo": subset == "history" or i % 5 == 0,
                 "generalist": i % 5 != 0}
        for model, correct in right.items():
            rows[model].append({"id": i, "response": str(i) if correct else "no", "correct": correct,
                                "cost_usd": 0.002 if model == "generalist" else 0.001, "latency_s": 1.0})
    return write_world(root, questions, rows)


def write_world(root: Path, questions: list[dict], rows: dict[str, list[dict]]) -> Path:
    """A directory in the replay format: questions.jsonl, and models/MODEL.jsonl per model."""
    (root / "models").mkdir(parents=True)
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    for model, answers in rows.items():
        (root / "models" / f"{model}.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
    return root


def test_reader_reads_the_question_and_the_pool(tmp_path):
    """The real SmolLM2 places each test question by its type; renamed labels change nothing; a price change
    under the cost preference moves the sums to the generalist."""
    env_name = f"replay:{write_typed_world(tmp_path / 'world')}"

    def run(out: str, **options) -> tuple[dict, dict[str, str]]:
        metrics = run_eval(EvalRequest(env=env_name, policy="reader", out=tmp_path / out, progress=False,
                                       **options))
        lines = (tmp_path / out / "trajectories.jsonl").read_text().splitlines()
        return metrics, {row["task_id"]: row["answered_by"] for row in map(json.loads, lines)}

    metrics, chosen = run("accuracy", prefer="accuracy")
    env = DirectoryWorldEnv(Path(env_name.split(":", 1)[1]))
    expected = {task.id: "mathy" if task.subtask == "algebra" else "histo" for task in env.tasks("test")}
    assert chosen == expected
    assert metrics["accuracy"] == 1.0 and metrics["profiles"] == "train"
    _, renamed = run("renamed", prefer="accuracy", rename_labels=5)
    assert renamed == chosen
    _, dear = run("dear", prefer="cost", price_scale={"mathy": 100.0})
    assert {dear[task_id] for task_id, model in expected.items() if model == "mathy"} == {"generalist"}
    assert {dear[task_id] for task_id, model in expected.items() if model == "histo"} == {"histo"}


def test_question_vectors_are_read_once_per_model(tmp_path, monkeypatch):
    import torch

    from toolorchestra.backends.question_reader import QuestionReader

    monkeypatch.setattr(QuestionReader, "_cache_path", lambda self: tmp_path / "vectors.pt")
    first = QuestionReader().embed(["Compute 2 + 5.", "In which year did the cold war end?"])
    assert torch.allclose(first.norm(dim=1), torch.ones(2))
    again = QuestionReader()
    vectors = again.embed(["In which year did the cold war end?", "Compute 2 + 5."])
    assert again._loaded is None  # both came from the file: the model was not even loaded
    assert torch.equal(vectors, first.flip(0))
    (tmp_path / "vectors.pt").write_text("torn")
    assert torch.allclose(QuestionReader().embed(["Compute 2 + 5."]), first[:1], atol=1e-5)  # a bad file: read again


def test_stored_vectors_stay_in_memory_until_another_process_rewrites_the_file(tmp_path, monkeypatch):
    from toolorchestra.backends.question_reader import QuestionReader

    monkeypatch.setattr(QuestionReader, "_cache_path", lambda self: tmp_path / "vectors.pt")
    QuestionReader().embed(["Compute 2 + 5.", "In which year did the cold war end?"])
    reader = QuestionReader(keep_questions=False)
    reads = []
    original = reader._read_cache
    reader._read_cache = lambda: reads.append(1) or original()
    for _ in range(3):
        reader.embed(["Compute 2 + 5."])
    assert len(reads) == 1  # one read of the file, then memory
    reader.embed(["A question of a user, not kept."], keep=False)
    assert len(reader._stored()) == 2 and len(reads) == 1  # neither on disk nor in memory
    QuestionReader().embed(["Compute 3 + 4."])  # another reader (another process) adds a vector to the file
    assert len(reader._stored()) == 3 and len(reads) == 2


def test_episodes_read_unprepared_questions_concurrently(tmp_path):
    """Without `prepare` (a caller that runs episodes directly), concurrent episodes read their own questions."""
    import asyncio

    from toolorchestra.bench.policies import ReaderPolicy
    from toolorchestra.envs.replay.profiles import measure_profiles

    env = DirectoryWorldEnv(write_typed_world(tmp_path / "world"))
    env.show_profiles(measure_profiles(env, "train"))
    policy = ReaderPolicy("reader", env, Preference.parse("accuracy"))
    tasks = env.tasks("test")[:8]

    async def play() -> list:
        return await asyncio.gather(*(policy.run(task, env.tools_for(task)) for task in tasks))

    trajectories = asyncio.run(play())
    assert [trajectory.answered_by for trajectory in trajectories] == [
        "mathy" if task.subtask == "algebra" else "histo" for task in tasks
    ]


def test_a_plan_consults_a_cheap_label_and_escalates_when_it_commits_to_nothing():
    from toolorchestra.agent.reader import Plan, PlanTable, choose_plan

    def outcome_offer(label: str, per_call: float, letters: str) -> Offer:
        outcomes = {str(index): letter for index, letter in enumerate(letters)}
        right = sum(letter in "Rr" for letter in letters) / len(letters)
        profile = ModelProfile(n=len(letters), accuracy={"all": right}, output_tokens=20, outcomes=outcomes)
        return Offer("answer", label, Price(per_call=per_call), 1.0, profile)

    shy = outcome_offer("shy", 0.001, "RRRRRnnnnn")  # right whenever it commits, silent on half
    sure = outcome_offer("sure", 0.01, "RRRRWRRRRW")  # 0.8, always commits
    pool = [shy, sure]
    table = PlanTable(pool, {})
    assert table.plans == [Plan(shy), Plan(sure), Plan(shy, sure), Plan(sure, shy)]  # no answer keys: no consult-two
    right, paid = table.mixed({"all": 1.0})
    assert list(right) == pytest.approx([0.5, 0.8, 0.9, 0.8]) and list(paid) == pytest.approx([0, 0, 0.5, 0])
    assert choose_plan(pool, table, {"all": 1.0}, 50, ACCURACY, "expert") == Plan(shy, sure)
    cheaper_sure = [shy, outcome_offer("sure", 0.0001, "RRRRWRRRRW")]  # now sure alone costs less than consulting
    assert choose_plan(cheaper_sure, PlanTable(cheaper_sure, {}), {"all": 1.0}, 50, COST, "expert").fallback is None


def test_a_plan_consults_two_cheap_labels_and_escalates_when_they_disagree():
    from toolorchestra.agent.reader import Plan, PlanTable, choose_plan

    def keyed_offer(label: str, per_call: float, answers: str) -> Offer:
        # every question's right answer is "a"; "-" commits to nothing (wrong)
        outcomes = {str(i): ("n" if key == "-" else "R" if key == "a" else "W") for i, key in enumerate(answers)}
        keys = {str(i): key for i, key in enumerate(answers) if key != "-"}
        right = answers.count("a") / len(answers)
        profile = ModelProfile(n=len(answers), accuracy={"all": right}, output_tokens=20, outcomes=outcomes,
                               answers=keys)
        return Offer("answer", label, Price(per_call=per_call), 1.0, profile)

    one = keyed_offer("one", 0.001, "aaaabbbbaa")  # 0.6
    two = keyed_offer("two", 0.001, "aaaaaacccc")  # 0.6; agrees with one on 0-3 only, both right there
    dear = keyed_offer("dear", 0.1, "aaaaaaaaad")  # 0.9
    pool = [one, two, dear]
    table = PlanTable(pool, {})
    right, paid = table.mixed({"all": 1.0})
    escalate, adopt_two = table.plans.index(Plan(one, dear, check=two)), table.plans.index(Plan(one, two, check=two))
    # they agree (and are right) on 0-3; dear is right on 4-8 of the 6 they split on, two itself on 4-5
    assert right[escalate] == pytest.approx(0.9) and right[adopt_two] == pytest.approx(0.6)
    assert paid[escalate] == pytest.approx(0.6) and paid[adopt_two] == 0  # a consulted fallback is adopted
    # 0.9, as dear alone, for 0.002 + 0.6 * 0.1 instead of 0.1
    assert choose_plan(pool, table, {"all": 1.0}, 50, ACCURACY, "expert") == Plan(one, dear, check=two)
    unkeyed = [Offer(o.tool, o.label, o.price, o.latency_s, o.profile.model_copy(update={"answers": None}))
               for o in pool if o.profile]
    assert all(plan.check is None for plan in PlanTable(unkeyed, {}).plans)
    assert choose_plan(unkeyed, PlanTable(unkeyed, {}), {"all": 1.0}, 50, ACCURACY, "expert") == Plan(unkeyed[2])


def test_reader_consults_two_and_escalates_on_disagreement_in_a_replay_world(tmp_path):
    root = tmp_path / "world"
    (root / "models").mkdir(parents=True)
    questions = [{"id": i, "problem": f"Compute {i} + {2 * i}.", "answer": str(3 * i)} for i in range(60)]

    def rows(right, wrong: int, cost: float) -> list[dict]:
        return [{"id": i, "response": str(3 * i) if right(i) else str(i + wrong), "correct": right(i),
                 "cost_usd": cost, "latency_s": 1.0} for i in range(60)]

    models = {"one": rows(lambda i: i % 5 < 3, 1, 0.001), "two": rows(lambda i: i % 5 in (0, 1, 3), 2, 0.001),
              "dear": rows(lambda i: i % 10 != 9, 3, 0.1)}
    (root / "questions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in questions))
    for name, records in models.items():
        (root / "models" / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in records))
    metrics = run_eval(EvalRequest(env=f"replay:{root}", policy="reader", prefer="accuracy", out=tmp_path / "out",
                                   progress=False))
    episodes = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    for episode in episodes:
        consulted = sorted(step["model"] for step in episode["steps"] if step.get("name") == "expert")
        assert consulted == ["one", "two"]
        agree = int(episode["task_id"]) % 5 in (0, 1)  # both right (their wrong answers never match)
        assert episode["answered_by"] == ("one" if agree else "dear")
        assert episode["cost_usd"] == pytest.approx(0.002 if agree else 0.102)
    assert metrics["calls_per_tool"]["expert"] == 2 * len(episodes)


def write_shy_and_sure_world(root: Path) -> Path:
    """40 sums of one type: `shy` answers half of them right and says "I don't know" to the rest for $0.001,
    `sure` answers 4 in 5 right for $0.01."""
    questions = [{"id": i, "problem": f"Compute {i} + {2 * i}.", "answer": str(3 * i)} for i in range(40)]
    shy = [{"id": i, "response": str(3 * i) if i % 4 < 2 else "I don't know", "correct": i % 4 < 2,
            "cost_usd": 0.001, "latency_s": 1.0} for i in range(40)]
    sure = [{"id": i, "response": str(3 * i) if i % 5 else "7", "correct": bool(i % 5), "cost_usd": 0.01,
             "latency_s": 1.0} for i in range(40)]
    return write_world(root, questions, {"shy": shy, "sure": sure})


def test_eval_runs_the_reader_on_a_replay_world_when_no_policy_is_named(tmp_path):
    import subprocess
    import sys

    root = write_shy_and_sure_world(tmp_path / "world")
    done = subprocess.run([sys.executable, "-m", "toolorchestra.cli.main", "eval", "--env", f"replay:{root}",
                           "--out", str(tmp_path / "out"), "--no-progress"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["policy"] == "reader" and metrics["n"] == 20


def test_reader_consults_and_adopts_or_escalates_in_a_replay_world(tmp_path):
    root = write_shy_and_sure_world(tmp_path / "world")
    metrics = run_eval(EvalRequest(env=f"replay:{root}", policy="reader", prefer="accuracy", out=tmp_path / "out",
                                   progress=False))
    episodes = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    for episode in episodes:
        consulted = [step for step in episode["steps"] if step.get("name") == "expert"]
        assert [step["model"] for step in consulted] == ["shy"]  # consult the cheap one first, every time
        committed = int(episode["task_id"]) % 4 < 2
        assert episode["answered_by"] == ("shy" if committed else "sure")
        assert episode["cost_usd"] == pytest.approx(0.001 if committed else 0.011)  # an adopted answer is not paid twice
    assert metrics["calls_per_tool"] == {"expert": 20, "answer": 20} and metrics["accuracy"] == pytest.approx(
        sum(int(e["task_id"]) % 4 < 2 or int(e["task_id"]) % 5 != 0 for e in episodes) / len(episodes))


def test_profiles_measured_on_different_questions_leave_single_label_decisions():
    from toolorchestra.agent.reader import all_outcomes

    def with_outcomes(label: str, ids: range) -> Offer:
        profile = ModelProfile(n=len(ids), accuracy={"all": 0.5}, outcomes={str(i): "R" for i in ids})
        return Offer("answer", label, Price(per_call=0.001), 1.0, profile)

    assert all_outcomes([with_outcomes("a", range(5)), with_outcomes("b", range(3, 8))])
    assert not all_outcomes([with_outcomes("a", range(5)), with_outcomes("b", range(5, 9))])  # no question shared
    assert not all_outcomes([with_outcomes("a", range(5)), offer("b", 0.001, 0.5, 0.5)])  # b has no outcomes


def test_profiles_measured_on_test_are_grouped_by_the_test_questions_types(tmp_path):
    """The hindsight ceiling (docs/results.md): profiles measured on the test split itself. Their questions are
    grouped by type as train's are; pooled untyped, the reader would judge every plan over both types at once and
    send the sums to the generalist (4 in 5 right) instead of mathy (every sum right)."""
    from toolorchestra.envs.replay.profiles import measure_profiles, write_profiles

    root = write_typed_world(tmp_path / "world")
    env = DirectoryWorldEnv(root)
    hindsight = tmp_path / "test-profiles.yaml"
    write_profiles(measure_profiles(env, "test", per_subset=None), hindsight, "the test split (hindsight)")
    metrics = run_eval(EvalRequest(env=f"replay:{root}", policy="reader", prefer="accuracy", out=tmp_path / "out",
                                   progress=False, profiles=str(hindsight)))
    episodes = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    expected = {task.id: "mathy" if task.subtask == "algebra" else "histo" for task in env.tasks("test")}
    assert {episode["task_id"]: episode["answered_by"] for episode in episodes} == expected
    assert metrics["accuracy"] == 1.0 and metrics["profiles"] == str(hindsight)
