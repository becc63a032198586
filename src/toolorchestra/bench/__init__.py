"""Benchmarking: policies (baselines and the orchestrator), the eval runner, metrics and reports.

Every policy solves a task through the env's tools and returns a `Trajectory`, so baselines and the
orchestrator are recorded, scored and compared the same way (`toolorchestra eval`, `toolorchestra
report`).
"""
