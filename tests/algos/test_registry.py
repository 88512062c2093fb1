"""The registries and their specs: messages, and that every spec matches its function, the schema and
the docs, so an extension registered in one file is usable (and documented) everywhere."""

import inspect
from pathlib import Path

import pytest

from verl_lite.algos import ADV_ESTIMATORS, POLICY_LOSSES
from verl_lite.algos.registry import EstimatorSpec, Registry, select
from verl_lite.config.schema import ActorConfig, PPOTrainerConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"
ESTIMATOR_ARGS = {"token_level_rewards", "response_mask"}
LOSS_ARGS = {"old_log_prob", "log_prob", "advantages", "response_mask"}


def _leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _check_signature(fn, passed: set[str]) -> None:
    params = inspect.signature(fn).parameters
    assert passed <= set(params), f"{fn.__name__} does not take {passed - set(params)}"
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    assert required <= passed, f"{fn.__name__} needs {required - passed}, which the caller never passes"


@pytest.mark.parametrize("name", ADV_ESTIMATORS.names())
def test_estimator_spec_matches_its_function_and_the_schema(name):
    spec = ADV_ESTIMATORS.spec(name)
    _check_signature(spec.fn, ESTIMATOR_ARGS | set(spec.inputs) | {_leaf(k) for k in spec.config_keys})
    root = PPOTrainerConfig()
    for key in spec.config_keys + tuple(k for k, _ in spec.requires):
        select(root, key)  # raises AttributeError for a key the schema lacks
    assert {key for key, _, _ in spec.checks} <= set(spec.config_keys)
    assert spec.min_group_size == 1 or spec.why_group, "say why a group is needed"


@pytest.mark.parametrize("mode", POLICY_LOSSES.names())
def test_policy_loss_spec_matches_its_function_and_the_schema(mode):
    spec = POLICY_LOSSES.spec(mode)
    _check_signature(spec.fn, LOSS_ARGS | {_leaf(k) for k in spec.config_keys})
    actor = ActorConfig()
    for key in spec.config_keys:
        select(actor, key)
    assert {key for key, _, _ in spec.checks} <= set(spec.config_keys)
    assert spec.agg_mode in (None, "seq-mean-token-mean")


def test_every_name_is_documented():
    text = DOC.read_text()
    for registry in (ADV_ESTIMATORS, POLICY_LOSSES):
        for name in [*registry.names(), *registry.refused()]:
            assert f"| `{name}` |" in text, f"docs/algorithms.md has no table row for {name}"


def test_refused_unknown_and_duplicate_names():
    reg = Registry("thing", "section.thing", EstimatorSpec)
    reg.register("a")(lambda token_level_rewards, response_mask: None)
    reg.refuse("b", "it needs X; use a")
    assert reg.names() == ["a"] and reg.refused() == {"b": "it needs X; use a"}
    assert reg.problem("a") is None
    assert reg.problem("b") == "section.thing=b is not supported by verl_lite: it needs X; use a"
    assert reg.problem("c") == "section.thing='c' is not a known thing; choose one of ['a']"
    with pytest.raises(ValueError, match="section.thing=b is not supported"):
        reg.get("b")
    for name in ("a", "b"):
        with pytest.raises(ValueError, match=f"thing '{name}' registered twice"):
            reg.refuse(name, "again")


def test_read_keys_passes_each_key_by_its_last_name():
    spec = ADV_ESTIMATORS.spec("gae")
    cfg = PPOTrainerConfig()
    cfg.algorithm.gamma, cfg.algorithm.lam = 0.9, 0.5
    assert ADV_ESTIMATORS.read_keys(spec, cfg) == {"gamma": 0.9, "lam": 0.5}
    actor = ActorConfig()
    actor.policy_loss.kl_cov_ratio = 0.25
    assert POLICY_LOSSES.read_keys(POLICY_LOSSES.spec("kl_cov"), actor) == {
        "kl_cov_ratio": 0.25,
        "ppo_kl_coef": 0.1,
    }
