"""Run: what a config amounts to, decided once at start-up (verl_lite/preflight.py) and handed to
every start-up check, so that no check re-derives it: the worker count, which optional roles exist,
whether the workers use GPUs, and which keys the config links to others."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    world: int  # workers: trainer.nnodes x trainer.n_gpus_per_node
    critic: bool  # a value model is trained
    ref: bool  # the reference policy is needed (a KL term)
    reward_model: bool  # a reward model scores responses
    num_gpus: int  # GPUs visible here (0: a CPU-only machine)
    use_gpu: bool  # the workers run on GPUs (trainer.device)
    # keys that follow another key in the composed config (`${...}`), so a bad value is named once,
    # where it was set (config/keys.links_in)
    links: dict[str, str] = field(default_factory=dict, compare=False)
