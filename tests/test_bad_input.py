"""Bad input gets one message naming the file, the line and what was expected; never a traceback (issue 26).

Every bad file is built in tmp_path and given to the real CLI in a subprocess (or to the real loader), as a
careless user would: an eval resuming a trajectories.jsonl with a line that is not a trajectory, a replay world
with bad UTF-8, huge ids, deep nesting, a binary price sheet or a 200 MB line, a binary --config, an episode that
ends in an error, and a --config the policy never reads.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from toolorchestra.envs.replay.format import DirectorySource, FormatError, load_world
from toolorchestra.files import MAX_LINE_BYTES_ENV

TOOLORCHESTRA = Path(sys.executable).parent / "toolorchestra"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOLORCHESTRA), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "400", **(env or {})})


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The run's error message, checked to be a single line with no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def write_world(root: Path, questions: list[str] | None = None) -> Path:
    """A tiny replay world: four questions, two models with recorded costs."""
    rows = questions or [json.dumps({"id": i, "problem": f"q{i}", "answer": str(i)}) for i in range(4)]
    (root / "models").mkdir(parents=True)
    (root / "questions.jsonl").write_text("\n".join(rows) + "\n")
    for model in ("alpha", "beta"):
        (root / "models" / f"{model}.jsonl").write_text("".join(
            json.dumps({"id": i, "response": str(i), "correct": model == "alpha", "cost_usd": 0.01}) + "\n"
            for i in range(4)))
    return root


def load(root: Path) -> None:
    load_world(DirectorySource(root), "test")


# --- eval resuming a trajectories.jsonl ----------------------------------------------------------
@pytest.fixture
def finished_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """An eval run dir with its two test episodes saved, and the eval arguments that resume it."""
    world = write_world(tmp_path / "world")
    out = tmp_path / "run"
    args = ["eval", "--env", f"replay:{world}", "--policy", "random", "--out", str(out), "--no-progress"]
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 2
    return out, args


@pytest.mark.parametrize(("line", "expected"), [
    (b"[1, 2, 3]", "expected a JSON object (a saved trajectory), got an array"),
    (b"null", "expected a JSON object (a saved trajectory), got null"),
    (b'{"task_id": 5, "steps": "none"}', "not a saved trajectory: field 'task_id': Input should be a valid string"),
    (b'{"policy": "random"}', "not a saved trajectory: field 'task_id': Field required"),
    (b"\x89PNG\r\n\x1a\x00\xff\xfe", "not UTF-8 text (byte 0x89 at column 1)"),
])
def test_eval_refuses_to_resume_over_a_line_that_is_not_a_trajectory(
        finished_run: tuple[Path, list[str]], line: bytes, expected: str) -> None:
    out, args = finished_run
    path = out / "trajectories.jsonl"
    with open(path, "ab") as handle:
        handle.write(line + b"\n")
    before = path.read_bytes()
    result = cli(*args)
    assert result.returncode == 2
    message = one_error_line(result)
    assert f"{path} (resuming --out {out}):3: {expected}" in message
    assert "file was left as it is" in message
    assert path.read_bytes() == before  # nothing deleted, nothing appended


def test_eval_refuses_a_line_over_the_limit_before_reading_it(finished_run: tuple[Path, list[str]]) -> None:
    out, args = finished_run
    path = out / "trajectories.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"task_id": "' + b"x" * 5000 + b'"}\n')
    result = cli(*args, env={MAX_LINE_BYTES_ENV: "1000"})
    assert result.returncode == 2
    assert f"{path}:3: line longer than 1,000 bytes, refused without reading it" in one_error_line(result)


def test_eval_skips_a_torn_line_with_a_warning_and_redoes_its_episode(finished_run: tuple[Path, list[str]]) -> None:
    out, args = finished_run
    path = out / "trajectories.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:40] + "\n")  # the second episode's line torn, then a newline
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert f"{path}:2: skipped, not a complete JSON line" in result.stderr and "Traceback" not in result.stderr
    assert path.read_text().splitlines()[:2] == [lines[0], lines[1][:40]]  # the torn line is kept, not deleted
    assert json.loads((out / "metrics.json").read_text())["n"] == 2


# --- the replay loader -----------------------------------------------------------------------------
def test_replay_questions_with_bad_utf8(tmp_path: Path) -> None:
    root = write_world(tmp_path / "w")
    with open(root / "questions.jsonl", "ab") as handle:
        handle.write(b'{"id": 9, "problem": "caf\xe9"}\n')
    with pytest.raises(FormatError, match=r"questions\.jsonl:5: not UTF-8 text \(byte 0xe9 at column 26\)"):
        load(root)


def test_replay_a_5000_digit_id(tmp_path: Path) -> None:
    number = json.dumps({"id": int("7" * 4000), "problem": "q"}).replace("7" * 4000, "7" * 5000)
    with pytest.raises(FormatError, match=r"questions\.jsonl:1: a number of more than 4300 digits, "
                       r"which Python refuses to read") as raised:
        load(write_world(tmp_path / "int", [number]))
    assert len(str(raised.value)) < 400
    text = json.dumps({"id": "7" * 5000, "problem": "q"})  # as a string: no split without a readable integer
    with pytest.raises(FormatError, match=r"questions\.jsonl:1: field 'split': id '7777.*\(5,002 characters\) is "
                       r"not an integer \(of at most 4300 digits\)") as raised:
        load(write_world(tmp_path / "str", [text]))
    assert len(str(raised.value)) < 400


def test_replay_deep_nesting(tmp_path: Path) -> None:
    deep = '{"id": 1, "problem": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(FormatError, match=r"questions\.jsonl:1: JSON nested too deeply to read"):
        load(write_world(tmp_path / "w", [deep]))
    shallow = '{"id": 1, "problem": ' + "[" * 500 + "]" * 500 + "}"  # parses, then fails the field's type
    with pytest.raises(FormatError, match=r"questions\.jsonl:1: field 'problem': Input should be a valid string"):
        load(write_world(tmp_path / "w2", [shallow]))


def test_replay_binary_price_sheet(tmp_path: Path) -> None:
    root = write_world(tmp_path / "w")
    (root / "prices.yaml").write_bytes(b"models:\n  alpha: \x00\x01\xff\xd8\xff\xe0 JFIF\n")
    with pytest.raises(FormatError, match=r"prices\.yaml:2: not UTF-8 text \(byte 0xff at offset 19\)"):
        load(root)
    (root / "prices.yaml").write_bytes(b"models:\n  alpha: \x00\x01\n")  # UTF-8, but bytes YAML does not allow
    with pytest.raises(FormatError, match=r"prices\.yaml:2: not valid YAML"):
        load(root)


def test_replay_a_200_mb_line_is_refused_by_size_through_the_cli(tmp_path: Path) -> None:
    """A sparse 200 MB line (no memory taken to build it) under the default 64 MiB limit: the loader reads at
    most limit + 1 bytes of it and stops with one line; before, the process died with SIGABRT."""
    root = write_world(tmp_path / "w")
    with open(root / "models" / "beta.jsonl", "r+b") as handle:
        handle.seek(200 * 2**20)  # after the four answer lines: line 5 is 200 MB of zero bytes
        handle.write(b"\n")
    result = cli("eval", "--env", f"replay:{root}", "--policy", "random", "--out", str(tmp_path / "run"),
                 "--no-progress")
    assert result.returncode == 2
    assert f"{root / 'models' / 'beta.jsonl'}:5: line longer than 67,108,864 bytes, refused without reading it" \
        in one_error_line(result)


# --- run and eval with --config ------------------------------------------------------------------------
def test_run_with_a_binary_config(tmp_path: Path) -> None:
    config = tmp_path / "pool.yaml"
    config.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    result = cli("run", "hi", "--config", str(config))
    assert result.returncode == 2
    assert f"error: {config}:2: not UTF-8 text (byte 0x80 at offset 136); expected a YAML file" \
        in one_error_line(result)


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def catalog(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(f"""
orchestrator: remote
models:
  - name: remote
    backend: {{type: openai, base_url: "{base_url}", model: served-model, max_retries: 0, timeout_s: 10}}
tools:
  - {{name: answer, type: answer, description: Give the final answer.}}
""")
    return path


def test_run_exits_non_zero_when_its_episode_ended_in_an_error(tmp_path: Path) -> None:
    port = closed_port()
    saved = tmp_path / "saved.jsonl"
    result = cli("run", "hi", "--config", str(catalog(tmp_path, f"http://127.0.0.1:{port}/v1")), "--save", str(saved))
    assert result.returncode == 1
    message = one_error_line(result)
    assert message.startswith("error: the episode ended in an error: orchestrator failed:")
    assert f"127.0.0.1:{port}" in message
    assert json.loads(saved.read_text())["stop_reason"] == "error"  # saved before the exit


def test_eval_reports_a_broken_config_the_policy_does_not_use(tmp_path: Path) -> None:
    world = write_world(tmp_path / "world")
    broken = tmp_path / "broken.yaml"
    broken.write_text("orchestrator: a\nmodels: [\n")
    args = ["eval", "--env", f"replay:{world}", "--policy", "random", "--no-progress"]
    result = cli(*args, "--config", str(broken), "--out", str(tmp_path / "a"))
    assert result.returncode == 2
    assert f"error: {broken}:3: not valid YAML" in one_error_line(result)
    assert not (tmp_path / "a").exists()
    valid = catalog(tmp_path, "http://127.0.0.1:9/v1")
    result = cli(*args, "--config", str(valid), "--out", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    assert f"warning: --config {valid} is not used by --policy random" in result.stderr


def test_task_ids_from_a_file(tmp_path: Path) -> None:
    """--task-ids @FILE reads one id per line (# comment lines and blank lines skipped); a missing or empty file
    is one clear error naming it."""
    from conftest import SHARED_DATA
    from toolorchestra.envs.registry import make_env

    first, second = [task.id for task in make_env("replay:routerbench", SHARED_DATA).tasks("test")[:2]]
    ids = tmp_path / "ids.txt"
    ids.write_text(f"# two tasks (ids hold a '#' themselves)\n{first}\n\n  {second}  \n")
    result = cli("eval", "--env", "replay:routerbench", "--policy", "random", "--task-ids", f"@{ids}",
                 "--out", str(tmp_path / "run"), "--no-progress", "--data-dir", str(SHARED_DATA))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["n"] == 2
    missing = cli("eval", "--env", "replay:routerbench", "--policy", "random", "--task-ids", f"@{tmp_path}/none.txt",
                  "--out", str(tmp_path / "run2"), "--no-progress")
    assert missing.returncode != 0 and "none.txt" in one_error_line(missing)
    (tmp_path / "empty.txt").write_text("# nothing\n")
    empty = cli("eval", "--env", "replay:routerbench", "--policy", "random", "--task-ids", f"@{tmp_path}/empty.txt",
                "--out", str(tmp_path / "run3"), "--no-progress")
    assert "lists no task ids" in one_error_line(empty)


# --- report and export-results over a metrics.json that is not an eval's ------------------------------
@pytest.mark.parametrize(("content", "expected"), [
    ("[1, 2]", "(a JSON object), got an array"),
    ('{"policy": "random", "n": 2, "accuracy": "high", "cost_per_task_usd": 0}',
     "field 'accuracy': Input should be a valid number, unable to parse string as a number, got 'high'"),
    ('{"kind": "sweep", "sweep": [{"policy": "router:0", "accuracy": 0.5}]}',
     "field 'sweep.0.cost_per_task_usd': Field required"),
    ('{"n": 2,\n', ":2: not valid JSON: Expecting property name enclosed in double quotes (column 1)"),
    ("", "empty file"),
])
def test_report_and_export_name_the_field_of_a_bad_metrics_json(
        finished_run: tuple[Path, list[str]], tmp_path: Path, content: str, expected: str) -> None:
    out, _ = finished_run
    (out / "metrics.json").write_text(content)
    for command in ("report", "export-results"):
        target = tmp_path / f"{command}-out"
        result = cli(command, str(out), "--out", str(target))
        assert result.returncode == 2
        message = one_error_line(result)
        assert f"error: {out / 'metrics.json'}" in message and expected in message
        assert not target.exists()


def test_eval_names_a_torn_run_json_instead_of_calling_it_another_run(
        finished_run: tuple[Path, list[str]]) -> None:
    out, args = finished_run
    (out / "run.json").write_text('{"env": ')
    result = cli(*args)
    assert result.returncode == 2
    message = one_error_line(result)
    assert f"{out / 'run.json'}:1: not valid JSON: Expecting value (column 9); expected the manifest of the run " \
        f"in --out {out}" in message
    assert "different run" not in message


# --- export-orchestrator ------------------------------------------------------------------------------
def test_export_orchestrator_never_replaces_a_folder_it_did_not_write(tmp_path: Path) -> None:
    """An --out holding anything but a previous export (here an eval run given by mistake) is refused before the
    model loads; before, the folder was deleted and replaced by the adapter."""
    checkpoint = tmp_path / "step_1"
    checkpoint.mkdir()
    (checkpoint / "state.json").write_text("{}")
    kept = tmp_path / "eval-run"
    kept.mkdir()
    (kept / "metrics.json").write_text("{}")
    result = cli("export-orchestrator", str(checkpoint), "--out", str(kept))
    assert result.returncode == 2
    assert f"error: --out {kept}: holds metrics.json, so it is not a previous export" in one_error_line(result)
    assert [path.name for path in kept.iterdir()] == ["metrics.json"]
    result = cli("export-orchestrator", str(checkpoint), "--out", str(kept / "metrics.json"))
    assert f"--out {kept / 'metrics.json'}: is a file" in one_error_line(result)


def test_export_orchestrator_names_a_torn_or_edited_state_json(tmp_path: Path) -> None:
    checkpoint = tmp_path / "step_1"
    checkpoint.mkdir()
    state = checkpoint / "state.json"
    for content, expected in [
        ('{"step": ', f"{state}:1: not valid JSON: Expecting value (column 10); expected a training checkpoint's"),
        ('{"step": "1", "config": {}}', f"{state}: field 'step': expected an integer, got '1'"),
    ]:
        state.write_text(content)
        result = cli("export-orchestrator", str(checkpoint), "--out", str(tmp_path / "out"))
        assert result.returncode == 2
        assert expected in one_error_line(result)
    state.write_text('{"step": 1, "config": {"model": {"lora_rank": "x"}}}')
    result = cli("export-orchestrator", str(checkpoint), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {state} (field config): invalid configuration\n  field model.lora_rank: Input should be a " \
        "valid integer" in result.stderr
    assert not (tmp_path / "out").exists()


# --- train ---------------------------------------------------------------------------------------------
def test_train_refuses_an_empty_config_instead_of_training_on_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "train.yaml"
    empty.write_text("# nothing yet\n")
    result = cli("train", "--config", str(empty), "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert f"error: {empty}: empty file; expected a training config" in one_error_line(result)
    assert not (tmp_path / "run").exists()


def test_train_refuses_a_run_dir_holding_another_run_without_resume(tmp_path: Path) -> None:
    from conftest import REPO

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step_20").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_20" / "state.json").write_text('{"step": 20}')
    (run_dir / "metrics.jsonl").write_text('{"step": 20}\n')
    before = sorted(str(path) for path in run_dir.rglob("*"))
    result = cli("train", "--config", str(REPO / "configs" / "train" / "frames-counterfactual.yaml"),
                 "--run-dir", str(run_dir), "--steps", "1")
    assert result.returncode == 2
    assert f"error: --run-dir {run_dir}: holds a previous run (checkpoints up to step_20, metrics.jsonl); pass " \
        "--resume to continue it" in one_error_line(result)
    assert sorted(str(path) for path in run_dir.rglob("*")) == before
    assert (run_dir / "metrics.jsonl").read_text() == '{"step": 20}\n'


# --- paths and options in the wrong place ------------------------------------------------------------------
def test_a_file_where_a_folder_goes_or_the_reverse_says_what_was_expected(tmp_path: Path) -> None:
    world = write_world(tmp_path / "world")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    args = ["eval", "--env", f"replay:{world}", "--policy", "random", "--no-progress"]
    result = cli(*args, "--out", str(a_file))
    assert f"error: {a_file}: is a file; expected a folder there" in one_error_line(result)
    result = cli(*args, "--out", str(a_file / "run"))
    assert f"error: {a_file / 'run'}: Not a directory (a part of this path is a file; expected a folder there)" \
        in one_error_line(result)
    result = cli("run", "hi", "--save", str(tmp_path))
    assert f"error: {tmp_path}: Is a directory (expected a file, not a folder)" in one_error_line(result)
    assert result.returncode == 2 and a_file.read_text() == "mine\n"


def test_eval_profiles_that_is_neither_a_keyword_nor_a_file(tmp_path: Path) -> None:
    world = write_world(tmp_path / "world")
    result = cli("eval", "--env", f"replay:{world}", "--policy", "reader", "--profiles", "trian",
                 "--out", str(tmp_path / "run"), "--no-progress")
    assert result.returncode == 2
    assert "error: --profiles 'trian': file not found; expected auto, train, none, or a file `toolorchestra " \
        "profile` wrote" in one_error_line(result)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option", ["--num-trials", "--max-steps", "--user-max-tokens"])
def test_eval_refuses_a_zero_count(tmp_path: Path, option: str) -> None:
    world = write_world(tmp_path / "world")
    result = cli("eval", "--env", f"replay:{world}", "--policy", "random", option, "0",
                 "--out", str(tmp_path / "run"), "--no-progress")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"Invalid value for '{option}'" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("env", "options", "expected"), [
    ("replay:WORLD", ["--num-trials", "5", "--user-model", "m"], "only tau2 envs read --num-trials, --user-model"),
    ("tau2:airline", ["--price-scale", "m=2", "--tools", "answer"], "tau2 envs do not read --tools, --price-scale"),
])
def test_eval_refuses_options_the_env_does_not_read(tmp_path: Path, env: str, options: list[str],
                                                    expected: str) -> None:
    """--num-trials 5 on a replay world ran one trial, and replay options on tau2 were dropped, without a word."""
    env = env.replace("WORLD", str(write_world(tmp_path / "world")))
    result = cli("eval", "--env", env, "--policy", "random", *options, "--out", str(tmp_path / "run"),
                 "--no-progress")
    assert result.returncode == 2
    assert f"error: --env {env}: {expected}" in one_error_line(result)
    assert not (tmp_path / "run").exists()


def test_eval_warns_that_renamed_labels_do_not_change_a_baseline(tmp_path: Path) -> None:
    world = write_world(tmp_path / "world")
    result = cli("eval", "--env", f"replay:{world}", "--policy", "cheapest", "--rename-labels", "1",
                 "--out", str(tmp_path / "run"), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "warning: --rename-labels/--shuffle-labels do not change --policy cheapest" in result.stderr


def test_options_a_catalog_makes_moot_and_paths_of_the_wrong_kind_are_named(tmp_path: Path) -> None:
    """--corpus with --config used to be ignored without a word; an empty catalog said "got NoneType"; a file
    given to `replay check` was "directory not found"; serve --trajectories under a file said the folder was
    missing."""
    config = catalog(tmp_path, f"http://127.0.0.1:{closed_port()}/v1")
    corpus = tmp_path / "corpus.json"
    corpus.write_text("[]")
    for command in ("run", "serve"):
        args = ["q"] if command == "run" else []
        line = one_error_line(cli(command, *args, "--config", str(config), "--corpus", str(corpus)))
        assert "--corpus is read with the default pool only" in line
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert f"{empty}: empty file; expected" in one_error_line(cli("run", "q", "--config", str(empty)))
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    assert "got an array" in one_error_line(cli("run", "q", "--config", str(listed)))
    assert "a file, not a directory" in one_error_line(cli("replay", "check", str(corpus)))
    line = one_error_line(cli("serve", "--config", str(config), "--trajectories", f"{corpus}/t.jsonl"))
    assert f"folder {corpus} is a file, not a folder" in line
    for command in ("run", "serve"):  # a tool preference naming nothing on offer used to weigh nothing, silently
        args = ["q"] if command == "run" else []
        line = one_error_line(cli(command, *args, "--config", str(config), "--prefer", "tool:pyhton"))
        assert "--prefer tool:pyhton: no tool or label of that name is offered" in line and "'answer'" in line
    world = write_world(tmp_path / "world")
    line = one_error_line(cli("eval", "--env", f"replay:{world}", "--policy", "cheapest", "--prefer", "tool:nobody",
                              "--out", str(tmp_path / "ev")))
    assert "--prefer tool:nobody: no tool or label" in line and not (tmp_path / "ev").exists()


@pytest.mark.parametrize("policy", ["cascade:-1", "cascade:nan", "router:-0.5", "router:inf"])
def test_a_baselines_weight_on_dollars_must_be_a_finite_number_at_least_zero(tmp_path: Path, policy: str) -> None:
    """cascade:-1 used to run, fitting a cascade that is paid for choosing dearer models."""
    world = write_world(tmp_path / "world")
    line = one_error_line(cli("eval", "--env", f"replay:{world}", "--policy", policy, "--out", str(tmp_path / "e")))
    assert f"--policy '{policy}'" in line and "expected a finite number >= 0" in line
