"""The verl adapter: the ToolOrchestra recipe (environments, tools, sampler, reward, knob names) on verl + Ray.

Importing this package imports neither verl nor ray nor torch; only `agent_loop` (verl's AgentLoopBase
subclass and the group-reward AgentLoopManager) and `local_server` need the `verl` extra.

- config: the verl training YAML (configs/verl/*.yaml; the shared knobs are configs/train/'s own fields)
  and its translation into verl's Hydra overrides;
- data: `toolorchestra verl prepare`, the parquet files verl's RLHFDataset reads (one sampler draw per row);
- episode: one episode of a row, played by our rollout engine against any token sampler;
- reward: the paper's group reward of verl's rollouts, through `toolorchestra.reward`;
- agent_loop: the verl agent loop and the AgentLoopManager that writes group rewards (imports verl);
- local_server: a CPU stand-in for verl's rollout server (our HF model behind its async generate).
"""

AGENT_NAME = "toolorchestra_orchestrator"
"""The agent loop's name in verl's registry and in the parquet's `agent_name` column."""

EXTRA_KEY = "toolorchestra"
"""Key of our record in `extra_info` (parquet) and in the agent loop's `extra_fields`."""
