"""Run: what a config amounts to, decided once at start-up (verl_lite/startup.py) and handed to
every start-up check, so that no check re-derives it: the worker count, which optional roles exist,
and whether the workers use GPUs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    world: int  # workers: trainer.nnodes x trainer.n_gpus_per_node
    critic: bool  # a value model is trained
    ref: bool  # the reference policy is needed (a KL term)
    reward_model: bool  # a reward model scores responses
    num_gpus: int  # GPUs visible here (0: a CPU-only machine)
    use_gpu: bool  # the workers run on GPUs (trainer.device)
