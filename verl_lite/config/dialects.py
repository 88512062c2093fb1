"""verl 0.9's spellings of keys that verl 0.7 spelled otherwise, and which key of the schema holds each.

verl 0.9 moved the reward settings under `reward.*` and the critic's FSDP section to `critic.fsdp`;
its own migration (verl/experimental/reward_loop/reward_loop.py, `migrate_legacy_reward_impl`) is the
fact this table follows: reward_model.num_workers -> reward.num_workers, reward_model.reward_manager ->
reward.reward_manager.name, reward_model.reward_loop_{source,module_path,class_name} ->
reward.reward_manager.{source,module.path,module.name}, custom_reward_function -> reward.
custom_reward_function, reward_model.{enable,enable_resource_pool,n_gpus_per_node,nnodes} ->
reward.reward_model.*, reward_model.model.path -> reward.reward_model.model_path, reward_model.rollout
-> reward.reward_model.rollout, sandbox_fusion -> reward.sandbox_fusion, reward_model.reward_kwargs ->
reward.reward_kwargs. verl 0.9.1 keeps the old spellings as null keys and applies them only in its
fully-async entry; here both dialects are served on the command line (config/overrides.py):

- every spelling is rewritten to the key the schema holds it in (`Move.key`) before Hydra;
- a verl 0.7 spelling is said once on the console, naming verl 0.9's;
- two spellings of one value set to different values in one command are refused, naming both.

verl 0.9 also spells the sequence-parallel size and the entropy options of a role on its FSDP engine
section (`actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size`, `critic.fsdp.*`), which
verl_lite's engine takes from the role: those spellings are rewritten to the role's key.

Each spelling is declared beside the field it sets (config/fields.key's `verl09` and `older`); this
module reads them from the schema. Which spelling the schema holds: verl 0.9's for the critic's FSDP
section (critic.fsdp). For the reward group the schema still holds verl 0.7's (reward_model.*,
reward_manager.*, custom_reward_function.*): verl_lite's reward model is verl's legacy FSDP
reward-model worker, whose keys (strategy, micro-batch sizes, model.fsdp_config, max_length, ...)
verl 0.9 dropped with that worker, so moving the section is a change of the reward model's own keys,
not a rename (issue 35 leaves it open).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_lite.config.schema import FIELDS


@dataclass(frozen=True)
class Move:
    verl09: str  # verl 0.9.1's spelling: a key, or a section (every key under it)
    key: str  # the schema's key (or section) that holds the value
    older: tuple[str, ...] = ()  # verl 0.7's spellings besides `key`
    quiet: bool = False  # `key` is verl 0.9's spelling too (verl links one to the other): nothing to say


def _depth(move: Move) -> int:
    return max(k.count(".") for k in (move.verl09, move.key, *move.older))


# a key's own move before its section's (critic.fsdp.ulysses_sequence_parallel_size before critic.fsdp)
# the moves the schema's fields declare beside themselves (config/fields.key: verl09, older)
_DECLARED = [
    Move(s.verl09 or k, k, s.older, s.quiet)
    for k, f in FIELDS
    if (s := f.metadata.get("spelled")) is not None
]
MOVES: tuple[Move, ...] = tuple(sorted(_DECLARED, key=_depth, reverse=True))


# verl 0.9's config groups chosen on the command line (`model_engine=megatron`): the choices that are
# verl_lite's (dp: verl's FSDP engine, its default) and why the others are not
GROUPS = {
    "model_engine": (
        ("dp",),
        "verl_lite's engine is FSDP2, verl's `dp` (its default); Megatron, "
        "TorchTitan and VeOmni engines are not available",
    ),
}


def group_problem(key: str, value) -> str | None:
    """None for a verl 0.9 group choice verl_lite is (the override is then dropped: it changes nothing)."""
    accepted, why = GROUPS[key]
    return None if value in accepted else f"{key}={value}: {why}"


def _under(key: str, section: str) -> str | None:
    """The rest of `key` below `section` ('' for the section itself); None when it is not under it."""
    if key == section:
        return ""
    return key[len(section) :] if key.startswith(f"{section}.") else None


@dataclass(frozen=True)
class Spelling:
    """How one key of a command line maps: the key to give Hydra, the one value it names, the note."""

    given: str  # as written
    key: str  # the schema's key it sets
    verl09: str  # verl 0.9's spelling of that value: what conflicting spellings are grouped by
    old: bool  # written in verl 0.7's spelling: said once on the console


def spelling(key: str) -> Spelling | None:
    """The move covering `key` (the first that does: a key's own before its section's), or None."""
    for move in MOVES:
        for written in dict.fromkeys((move.verl09, move.key, *move.older)):
            rest = _under(key, written)
            if rest is not None:
                said = written != move.verl09 and not move.quiet
                return Spelling(key, f"{move.key}{rest}", f"{move.verl09}{rest}", said)
    return None


def note(s: Spelling) -> str:
    return f"{s.given}: verl 0.9 spells it {s.verl09} (the older spelling is taken as that)"


def conflict(a: tuple[Spelling, str], b: tuple[Spelling, str]) -> str:
    (sa, va), (sb, vb) = a, b
    return (
        f"{sa.given}={va} and {sb.given}={vb} set one value (verl 0.9's {sa.verl09}) two ways; "
        f"keep one, in verl 0.9's spelling {sa.verl09}"
    )
