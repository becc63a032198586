"""The `toolorchestra` command line: run, eval, report, train.

Each command lives in its own module with a `register(app)` function; heavy imports happen inside the
commands so `toolorchestra --help` starts fast.
"""
