"""The `train` command: train an orchestrator from a YAML config with the recipe it names (see docs/training.md)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add this command to the app."""

    @app.command("train")
    def train(
        config: Path = typer.Option(
            ..., "--config", "-c", help="training YAML, e.g. configs/train/routerbench-smollm2.yaml"
        ),
        resume: bool = typer.Option(False, "--resume", help="continue from the latest checkpoint of the run dir"),
        run_dir: Path | None = typer.Option(None, "--run-dir", help="override trainer.default_local_dir"),
        steps: int | None = typer.Option(None, "--steps", help="override trainer.total_training_steps"),
        hold_out_models: str | None = typer.Option(
            None,
            "--hold-out-models",
            help="comma-separated models never "
            "offered in training (override sampler.hold_out_models); "
            "evaluate later with them in the pool",
        ),
        quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
    ) -> None:
        """Train an orchestrator on an environment's training split with its config's recipe."""
        from rich.console import Console

        from toolorchestra.train.config import load_train_config
        from toolorchestra.train.trainer import Trainer

        train_config = load_train_config(config)
        if steps is not None:
            if steps < 1:
                raise typer.BadParameter(f"--steps must be >= 1; got {steps}")
            train_config.trainer.total_training_steps = steps
        if hold_out_models is not None:
            train_config.sampler.hold_out_models = [name.strip() for name in hold_out_models.split(",") if name.strip()]
        if not resume:
            check_fresh_run_dir(run_dir, train_config.trainer.default_local_dir)
        trainer = Trainer(train_config, run_dir=run_dir, resume=resume)
        console = Console(stderr=True)
        if resume and trainer.global_step:
            console.print(f"resuming {trainer.run_dir} at step {trainer.global_step}")
        elif resume:  # a restart loop passes --resume every time; the first start has nothing to resume
            console.print(f"--resume: no checkpoint in {trainer.run_dir} yet; starting at step 0")
        history = trainer.fit(show_progress=not quiet)
        console.print(
            f"done: {trainer.global_step} steps; checkpoints, metrics.jsonl and tensorboard/ in "
            f"{trainer.run_dir}" + (f"; last reward {history[-1]['reward/mean']:.3f}" if history else "")
        )

    @app.command("export-orchestrator")
    def export_orchestrator(
        checkpoint: Path = typer.Argument(..., help="a checkpoint dir, e.g. runs/NAME/checkpoints/step_100"),
        out: Path = typer.Option(
            ...,
            "--out",
            help="the orchestrator folder to write, e.g. "
            "src/toolorchestra/data/orchestrators/NAME (then loadable by NAME)",
        ),
        card: Path | None = typer.Option(None, "--card", help="a Markdown model card to ship as README.md"),
        guided_calls: bool = typer.Option(
            True,
            "--guided-calls/--unguided-calls",
            help="how the adapter writes tool calls when loaded by name: under schema-guided decoding (the default) "
            "or unconstrained, as a recipe that trained on unconstrained calls needs (orchestrator.json decoding)",
        ),
    ) -> None:
        """Write a checkpoint's LoRA adapter as a shipped orchestrator (peft format + orchestrator.json)."""
        from rich.console import Console

        from toolorchestra.errors import UserError
        from toolorchestra.train.export import export_adapter

        if card is not None and not card.is_file():
            problem = "not a file" if card.exists() else "file not found"
            raise UserError(f"--card {card}: {problem} (expected a Markdown model card)")
        written = export_adapter(
            checkpoint,
            out,
            card=card.read_text() if card else None,
            extra={"decoding": {"guided_tool_calls": guided_calls}},
        )
        size = sum(path.stat().st_size for path in written.iterdir())
        Console(stderr=True).print(f"wrote {written} ({size / 1e6:.1f} MB)")


def check_fresh_run_dir(run_dir: Path | None, default_dir: str) -> None:
    """Refuse to start a new run where another one saved checkpoints or metrics: its steps would overwrite
    that run's checkpoints and mix into its metrics.jsonl."""
    from toolorchestra.errors import UserError
    from toolorchestra.train.checkpoint import latest_checkpoint

    folder = run_dir or Path(default_dir)
    where = f"--run-dir {folder}" if run_dir else f"{folder} (the config's trainer.default_local_dir)"
    checkpoint = latest_checkpoint(folder)
    metrics = folder / "metrics.jsonl"
    held = [f"checkpoints up to {checkpoint.name}"] if checkpoint else []
    held += ["metrics.jsonl"] if metrics.is_file() and metrics.stat().st_size else []
    if held:
        raise UserError(
            f"{where}: holds a previous run ({', '.join(held)}); pass --resume to continue it, or give another "
            "--run-dir to start over. Nothing was changed"
        )
