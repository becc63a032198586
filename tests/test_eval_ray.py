"""`eval --ray`: the same trajectories and metrics as the single-process run on replay:routerbench, and it
resumes a dir a plain run started."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from toolorchestra.bench.eval import EvalRequest, run_eval  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _ray_session():
    yield
    if ray.is_initialized():
        ray.shutdown()


def _records(path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (path / "trajectories.jsonl").read_text().splitlines()]
    return {row["task_id"]: row for row in rows}


def _request(shared_data, out, limit: int, **options) -> EvalRequest:
    return EvalRequest(env="replay:routerbench", policy="random", out=out, limit=limit, data_dir=shared_data,
                       progress=False, **options)


def test_ray_eval_equals_the_plain_run_and_resumes(tmp_path, shared_data) -> None:
    plain = run_eval(_request(shared_data, tmp_path / "plain", 12))
    parallel = run_eval(_request(shared_data, tmp_path / "ray", 12, ray=True, num_workers=2))
    assert parallel == plain
    assert _records(tmp_path / "ray") == _records(tmp_path / "plain")
    assert (tmp_path / "ray" / "decisions.csv").read_text() == (tmp_path / "plain" / "decisions.csv").read_text()
    # a plain run of the first 5 tasks, resumed with Ray to 12: the same as the plain run of 12
    run_eval(_request(shared_data, tmp_path / "mixed", 5))
    resumed = run_eval(_request(shared_data, tmp_path / "mixed", 12, ray=True, num_workers=2))
    assert resumed == plain
    assert len((tmp_path / "mixed" / "trajectories.jsonl").read_text().splitlines()) == 12
