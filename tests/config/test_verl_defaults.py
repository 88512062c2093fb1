"""The config is verl 0.9.1's (verl_lite/config/verl_0_9_1_ppo_trainer.yaml, verl's generated ppo_trainer
config): `--cfg job` of ppo_trainer has every one of its keys, verl's defaults and verl's
links, except the deviations declared beside their fields (`deviates`, config/schema.DEVIATIONS). A key verl 0.9 spells otherwise (its
`reward.*` group; verl 0.9.1 keeps the verl 0.7 spellings as null legacy keys) is compared at verl 0.9's
spelling (config/dialects.py), as verl's own migration reads it."""

import functools
import math

from omegaconf import OmegaConf

from verl_lite.config import dialects, keys, verl_keys
from verl_lite.config.compose import compose_config
from verl_lite.config.schema import DEVIATIONS

WRITTEN, RESOLVED = verl_keys.facts()
DEVIATING = set(DEVIATIONS)
RUN_NAMES = {"trainer.project_name", "trainer.experiment_name"}
ABSENT = object()
# the engine spellings of a role's entropy options: verl links them to the role's; here the command line's
# spelling is rewritten to the role's key (config/dialects.py) and the engine's key keeps verl's default
LINKS_LEFT = {
    f"actor_rollout_ref.{role}.fsdp_config.{k}"
    for role in ("actor", "ref")
    for k in ("entropy_from_logits_with_chunking", "entropy_checkpointing")
}
# defaults that still differ from verl 0.9.1's, each a feature of issue 35 not landed yet: none since
# data.gen_batch_size became null and filter_groups.metric `reward`
DIFFERING_LEFT: set[str] = set()


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b)
    return a == b


@functools.cache
def _job() -> dict:
    """`python -m verl_lite.main_ppo --cfg job --resolve`, as {dotted key: value}."""
    return verl_keys.leaves(OmegaConf.to_container(compose_config([]), resolve=True))


def _verl_values(key: str) -> list:
    """verl 0.9.1's values for `key`: at the key, and at verl 0.9's spelling of the value it holds
    (verl 0.9.1 keeps verl 0.7's spellings as null legacy keys, read through its migration)."""
    spelled = dialects.spelling(key)
    found = [keys.lookup(RESOLVED, k, ABSENT) for k in {key, spelled.verl09 if spelled else key}]
    return [v for v in found if v is not ABSENT]


def _in_linked_section(key: str) -> bool:
    """Whether a section above `key` is a link here (its keys are the linked section's)."""
    parts = key.split(".")
    sections = (".".join(parts[:end]) for end in range(1, len(parts)))
    return any(keys.has_default(s) and keys.link_target(keys.written_default(s), s) for s in sections)


def _deviates(key: str) -> bool:
    """A listed deviation: the key, the key it is held in, or the key verl links it to."""
    spelled = dialects.spelling(key)
    verl_key = spelled.verl09 if spelled else key
    return bool({key, spelled and spelled.key, keys.link_target(WRITTEN.get(verl_key), verl_key)} & DEVIATING)


def test_cfg_job_has_every_key_of_verl_0_9_1():
    verl = verl_keys.leaves(RESOLVED)  # as verl's `--cfg job --resolve` shows it
    assert len(verl) > 850
    assert [k for k in verl if k not in _job()] == []


def test_shared_defaults_are_verl_0_9_1s_but_the_deviations():
    differing = {}
    for key, value in _job().items():
        verl = _verl_values(key)
        if not verl or key in RUN_NAMES or _deviates(key):
            continue
        if not any(_same(value, v) for v in verl):
            differing[key] = (value, verl)
    assert set(differing) == DIFFERING_LEFT, differing


def test_verls_links_between_declared_keys_are_links_here():
    """Where verl 0.9.1 links a key to another and the dataclasses declare both, the schema links them
    (a link between keys added from verl's file is its value: both are accepted only at it)."""
    added, wrong = keys.added_keys(), set()
    for key, written in WRITTEN.items():
        target = keys.link_target(written, key)
        if target is None or key in DEVIATING or key in added or target in added or not keys.has_default(key):
            continue
        if _in_linked_section(key):
            continue
        if keys.link_target(keys.written_default(key), key) != target:
            wrong.add(key)
    assert wrong == LINKS_LEFT


def test_every_deviation_is_a_key_of_the_schema_with_a_reason():
    assert len(DEVIATIONS) >= 10
    for key, why in DEVIATIONS.items():
        assert key in keys.leaf_keys(), key
        assert len(why) > 40, key


def test_links_resolve_to_the_linked_keys_value():
    cfg = compose_config(
        [
            "actor_rollout_ref.actor.use_dynamic_bsz=True",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
            "data.max_response_length=0",
            "critic.ppo_max_token_len_per_gpu=1000",
            "reward.num_workers=3",
        ]
    )
    resolved = OmegaConf.to_container(cfg, resolve=True)
    arr = resolved["actor_rollout_ref"]
    assert arr["rollout"]["log_prob_use_dynamic_bsz"] and arr["ref"]["log_prob_use_dynamic_bsz"]
    assert (
        arr["rollout"]["log_prob_max_token_len_per_gpu"]
        == arr["ref"]["log_prob_max_token_len_per_gpu"]
        == 4096
    )
    assert arr["rollout"]["response_length"] == 0  # a link, not `or`: 0 stays 0
    assert resolved["critic"]["forward_max_token_len_per_gpu"] == 1000
    assert resolved["critic"]["use_dynamic_bsz"] and resolved["reward_model"]["use_dynamic_bsz"]
    # verl 0.9's spelling shows the value the run uses (it is held in verl 0.7's key here)
    assert resolved["reward"]["num_workers"] == resolved["reward_model"]["num_workers"] == 3
