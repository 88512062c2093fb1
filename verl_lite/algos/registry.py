"""Registries of advantage estimators and policy losses: each extension registers once, with a spec.

A spec holds everything the rest of verl_lite needs to know about an extension, so adding one (one of
verl's or a user's) touches one file and no code elsewhere tests its name:

  estimator   the function; whether it trains a critic; the smallest group (rollout.n) it works with
              (verl runs most group estimators with n=1: `group_of_one` says what such a group gets);
              the extra trainer phases it needs (the trainer's phase names, e.g. ReMax's `gen_max`);
              the batch tensors it reads besides token_level_rewards and response_mask ("index" is
              the group ids, REWARD_EXTRA each response's extra info from the reward function); the config keys it reads
              (from the config root), the config values it requires of other keys, and rules
              across its keys (`problems`, checked before Ray).
  policy loss the function; the actor keys it reads (relative to actor_rollout_ref.actor); the
              aggregation it fixes for pg_loss (verl's gspo, sapo, geo_mean ignore loss_agg_mode);
              whether its per-token losses depend on how a mini-batch is split into micro-batches;
              how rollout correction's IS weights scale it (per token, or per sequence).

Both kinds may declare value checks on the keys they read: (key, predicate, requirement) triples,
checked before Ray. A config key is passed to the function as a keyword named after its last part
(`algorithm.norm_adv_by_std_in_grpo` -> norm_adv_by_std_in_grpo). Names that verl defines but
verl_lite cannot build are registered as refused, with what to use instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Check = tuple[str, Callable[[object], bool], str]  # (key as in config_keys, predicate, requirement)
# the batch field holding each response's extra info from the reward function (verl's
# reward_extra_info), one dict per row; an estimator names it in its inputs to read it
REWARD_EXTRA = "reward_extra_info"


@dataclass(frozen=True)
class Spec:
    """A plain named extension (e.g. a reward manager): just the function or class."""

    name: str
    fn: Callable


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    fn: Callable
    needs_critic: bool = False
    min_group_size: int = 1
    phases: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    requires: tuple[tuple[str, object], ...] = ()
    checks: tuple[Check, ...] = ()
    why_group: str = ""  # why min_group_size, for the error message
    group_of_one: str = ""  # what a prompt with one response gets (rollout.n=1 runs, as in verl): said once
    problems: Callable | None = None  # config -> [one line per problem]: rules across its keys (gdpo.py)
    metrics: Callable | None = None  # (config, batch) -> its own metrics, after it ran (gdpo/*)


@dataclass(frozen=True)
class PolicyLossSpec:
    name: str
    fn: Callable
    config_keys: tuple[str, ...] = ()
    agg_mode: str | None = None
    split_invariant: bool = True
    checks: tuple[Check, ...] = ()
    is_weights: str = "token"  # how rollout IS weights scale pg_loss: token, or sequence (geometric mean)


def select(node, dotted: str):
    """The value at a dotted key under a dataclass (or any attribute) tree."""
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


class Registry:
    """name -> spec, plus names refused with a reason. `key_prefix` is where config_keys start."""

    def __init__(self, kind: str, config_key: str, spec_cls: type = Spec, key_prefix: str = ""):
        self.kind, self.config_key, self.spec_cls, self.key_prefix = kind, config_key, spec_cls, key_prefix
        self._specs: dict[str, object] = {}
        self._refused: dict[str, str] = {}

    def register(self, name: str, **spec_fields) -> Callable[[Callable], Callable]:
        def deco(fn: Callable) -> Callable:
            if name in self._specs or name in self._refused:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._specs[name] = self.spec_cls(name=name, fn=fn, **spec_fields)
            return fn

        return deco

    def refuse(self, name: str, instead: str) -> None:
        """A name verl has and verl_lite does not build; `instead` says what to use."""
        if name in self._specs or name in self._refused:
            raise ValueError(f"{self.kind} '{name}' registered twice")
        self._refused[name] = instead

    def problem(self, name: str) -> str | None:
        """One line when `name` cannot be used (refused or unknown), else None."""
        if name in self._refused:
            return f"{self.config_key}={name} is not supported by verl_lite: {self._refused[name]}"
        if name not in self._specs:
            return f"{self.config_key}={name!r} is not a known {self.kind}; choose one of {self.names()}"
        return None

    def spec(self, name: str):
        problem = self.problem(name)
        if problem:
            raise ValueError(problem)
        return self._specs[name]

    def get(self, name: str) -> Callable:
        return self.spec(name).fn

    def names(self) -> list[str]:
        return sorted(self._specs)

    def refused(self) -> dict[str, str]:
        return dict(self._refused)

    def full_key(self, key: str) -> str:
        return f"{self.key_prefix}.{key}" if self.key_prefix else key

    def read_keys(self, spec, node) -> dict[str, object]:
        """The spec's config values as keywords, read under `node` (the config at key_prefix)."""
        return {key.rsplit(".", 1)[-1]: select(node, key) for key in spec.config_keys}

    def check_values(self, spec, node) -> list[str]:
        """The spec's value checks, one line per failing key."""
        problems = []
        for key, ok, requirement in spec.checks:
            value = select(node, key)
            if not ok(value):
                problems.append(
                    f"{self.full_key(key)}={value} {requirement}; {self.config_key}={spec.name} reads it"
                )
        return problems


ADV_ESTIMATORS = Registry("advantage estimator", "algorithm.adv_estimator", EstimatorSpec)
POLICY_LOSSES = Registry(
    "policy loss",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    PolicyLossSpec,
    key_prefix="actor_rollout_ref.actor",
)
