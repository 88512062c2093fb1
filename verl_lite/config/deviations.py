"""Where verl_lite's config deliberately differs from verl's, each with its reason.

The schema's defaults are verl's (config/schema.py). This list is the whole set of exceptions: a
default that differs from verl's, or a key whose value keeps verl's spelling but runs differently
here. docs/config.md renders it; tests/config/test_verl_defaults.py fails when a default differs
from verl's without an entry here, or when an entry's value is not the schema's default.
"""

from __future__ import annotations

from dataclasses import dataclass

ARR = "actor_rollout_ref"


@dataclass(frozen=True)
class Deviation:
    key: str
    default: object  # verl_lite's default (equal to verl's when only the meaning differs)
    reason: str


DEVIATIONS: list[Deviation] = [
    Deviation(
        f"{ARR}.rollout.name",
        "auto",
        "verl makes it mandatory (`???`); `auto` picks vllm where it is installed, else hf "
        "(transformers' generate), so the same command runs with or without vLLM",
    ),
    Deviation(
        "trainer.device",
        "auto",
        "verl's default is cuda; `auto` uses cuda where a GPU is visible and cpu (gloo) otherwise, so a "
        "command runs unchanged on a CPU-only machine",
    ),
    Deviation(
        f"{ARR}.actor.strategy",
        "fsdp",
        "verl's name is kept, but fsdp and fsdp2 both run FSDP2 (fully_shard): verl_lite has no FSDP1 "
        "(the same for critic.strategy, reward_model.strategy and ref.strategy)",
    ),
    Deviation(
        f"{ARR}.rollout.mode",
        "async",
        "verl's async server mode generates with the same sampling and gives the same updates; here "
        "generation runs synchronously inside the hybrid engine (said once in the log)",
    ),
    Deviation(
        f"{ARR}.rollout.tensor_model_parallel_size",
        2,
        "verl's value, applied by the vLLM rollout; the hf rollout has no tensor parallelism (each worker "
        "generates for its own prompts with its full weights), which is said once in the log",
    ),
    Deviation(
        f"{ARR}.actor.grad_clip",
        "${.optim.clip_grad}",
        "verl has two literals read by different worker implementations (actor.grad_clip by its default "
        "legacy worker, optim.clip_grad by its new engine); here grad_clip follows optim.clip_grad, so "
        "either spelling sets the clip (grad_clip wins when both are set)",
    ),
    Deviation(
        "critic.grad_clip",
        "${.optim.clip_grad}",
        "as actor_rollout_ref.actor.grad_clip: follows critic.optim.clip_grad",
    ),
    Deviation(
        "reward_model.rollout.name",
        None,
        "mandatory (`???`) in verl, where only the reward loop reads it (the engine serving the reward "
        "model); verl_lite scores with verl's legacy reward-model worker, so it is null and has no effect",
    ),
    Deviation(
        "reward_model.model.input_tokenizer",
        "${actor_rollout_ref.model.path}",
        "verl decodes with it and re-applies the reward model's chat template; verl_lite's reward model "
        "reads the actor's token ids as they are, so with reward_model.enable=True it must be null (a "
        "reward model sharing the actor's tokenizer)",
    ),
    Deviation(
        "reward_model.model.trust_remote_code",
        False,
        "verl 0.9.1 keeps it as a null legacy key and its reward loop loads the reward model's tokenizer "
        "with trust_remote_code=True; here it is verl 0.7's False, so no code from a model folder runs "
        "unless the command asks for it",
    ),
]
