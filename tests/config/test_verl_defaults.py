"""The schema's defaults are verl's (tests/config/verl_facts.py), links included, except the
deviations listed in verl_lite/config/deviations.py."""

import math

import pytest
from omegaconf import OmegaConf

from tests.config.verl_facts import MISSING, VERL_COMMIT, VERL_DEFAULTS, Link
from verl_lite.config.deviations import DEVIATIONS
from verl_lite.config.schema import PPOTrainerConfig

SCHEMA = OmegaConf.structured(PPOTrainerConfig)


def _has(key: str) -> bool:
    return OmegaConf.select(SCHEMA, key, default="<absent>", throw_on_missing=False) != "<absent>"


def _raw(key: str):
    """The default as written in the schema: the interpolation string for a link."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(SCHEMA, parent) if parent else SCHEMA
    value = node._get_node(leaf)._value()
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def _resolved(key: str):
    value = OmegaConf.select(SCHEMA, key)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _link_target(raw) -> str | None:
    if isinstance(raw, str) and raw.startswith("${") and raw.endswith("}"):
        return raw[2:-1].removeprefix("oc.select:").split(",")[0].strip()
    return None


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b)
    return a == b


SHARED = [k for k in VERL_DEFAULTS if _has(k)]


def test_the_facts_name_their_verl_commit_and_most_keys_are_shared():
    assert len(VERL_COMMIT) == 40 and len(VERL_DEFAULTS) > 500
    assert len(SHARED) > 190


@pytest.mark.parametrize("key", SHARED)
def test_a_shared_key_has_verls_default_or_a_listed_deviation(key):
    verl, raw = VERL_DEFAULTS[key], _raw(key)
    deviation = next((d for d in DEVIATIONS if d.key == key), None)
    if deviation is not None:
        assert _same(raw, deviation.default), (
            f"{key}: schema {raw!r}, deviations.py says {deviation.default!r}"
        )
        return
    if isinstance(verl, Link):
        target = _link_target(raw)
        assert target is not None, f"{key}: verl links it to {verl.key}, the schema has the value {raw!r}"
        owner = key.rsplit(".", 1)[0]
        absolute = owner + target if target.startswith(".") else target
        assert absolute == verl.absolute(key), (
            f"{key}: linked to {absolute}, verl links it to {verl.absolute(key)}"
        )
    else:
        assert verl != MISSING, f"{key}: mandatory in verl; a default here needs a deviation entry"
        ours = raw if isinstance(verl, str) and "${" in verl else _resolved(key)  # a template: as written
        assert _same(ours, verl), f"{key}: schema default {ours!r}, verl's {verl!r}"


def test_every_deviation_names_a_key_of_the_schema_with_a_reason():
    for d in DEVIATIONS:
        assert _has(d.key), d.key
        assert len(d.reason) > 40, d.key


def test_links_resolve_to_the_linked_keys_value():
    cfg = OmegaConf.structured(PPOTrainerConfig)
    cfg.actor_rollout_ref.actor.use_dynamic_bsz = True
    cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu = 4096
    cfg.data.max_response_length = 0
    cfg.critic.ppo_max_token_len_per_gpu = 1000
    resolved = OmegaConf.to_object(cfg)
    arr = resolved.actor_rollout_ref
    assert arr.rollout.log_prob_use_dynamic_bsz and arr.ref.log_prob_use_dynamic_bsz
    assert arr.rollout.log_prob_max_token_len_per_gpu == arr.ref.log_prob_max_token_len_per_gpu == 4096
    assert arr.rollout.response_length == 0  # a link, not `or`: 0 stays 0
    assert resolved.critic.use_dynamic_bsz and resolved.reward_model.use_dynamic_bsz
    assert (
        resolved.critic.forward_max_token_len_per_gpu == resolved.reward_model.forward_max_token_len_per_gpu
    )
    assert resolved.critic.forward_max_token_len_per_gpu == 1000
