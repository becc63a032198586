"""Single-machine GRPO training of an orchestrator policy (CPU or one GPU).

config: the YAML schema (verl knob names); sampler: per-prompt tool/price/preference draws; rollout:
batched multi-turn episodes, token-in/token-out; grpo: the policy loss; trainer: the step loop;
checkpoint: save and exact resume. Modules that need torch import it themselves; importing this package
does not.
"""
