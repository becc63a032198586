"""The top-level API: `from toolorchestra import Orchestrator, make_env, ...` resolves every exported name to the
object its module defines, lazily, so `import toolorchestra` (every CLI start) loads neither torch nor pydantic."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import toolorchestra

SRC = Path(__file__).resolve().parents[1] / "src"


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert set(toolorchestra.__all__) == {"__version__", *toolorchestra._EXPORTS}


@pytest.mark.parametrize("name", sorted(toolorchestra._EXPORTS))
def test_every_exported_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(toolorchestra._EXPORTS[name])
    assert getattr(toolorchestra, name) is getattr(module, name)


def test_the_documented_import_line_works() -> None:
    from toolorchestra import EvalRequest, ModelPool, Orchestrator, Task, load_catalog, make_env, run_eval

    assert callable(make_env) and callable(load_catalog) and callable(run_eval)
    assert {cls.__name__ for cls in (EvalRequest, ModelPool, Orchestrator, Task)} == {
        "EvalRequest", "ModelPool", "Orchestrator", "Task"}


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Orchestrater'"):
        toolorchestra.Orchestrater  # noqa: B018


def test_import_toolorchestra_loads_no_heavy_module() -> None:
    # a fresh interpreter: this test process has long imported everything
    code = ("import json, sys; import toolorchestra; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'pydantic', 'numpy') or m.startswith('toolorchestra.'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert json.loads(result.stdout) == []
