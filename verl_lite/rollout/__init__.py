"""Rollout backends behind one small interface (base.py); `build_rollout` picks one by name."""

from __future__ import annotations


def build_rollout(name: str, model_cfg, rollout_cfg, tokenizer, rank: int):
    if name == "hf":
        from verl_lite.rollout.hf_rollout import HFRollout

        return HFRollout(model_cfg, rollout_cfg, tokenizer, rank)
    raise ValueError(f"actor_rollout_ref.rollout.name={name!r} is not a rollout backend; use 'hf'")
