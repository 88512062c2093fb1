"""verl_lite: a small PPO/GRPO trainer with FSDP2 workers, a Ray driver and exact CPU offload."""

__version__ = "0.1.0"
