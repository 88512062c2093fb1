"""Rollout backends by name: the registry, the one resolution of `auto`, and building through it."""

import importlib.util

import pytest

from verl_lite.rollout import ROLLOUTS, Backend, RolloutRegistry, build_rollout, resolve_rollout_name
from verl_lite.rollout.base import Rollout
from verl_lite.rollout.memory import hf_memory


def test_auto_prefers_vllm_where_installed_and_keeps_other_names():
    installed = importlib.util.find_spec("vllm") is not None
    assert ROLLOUTS.names() == ["vllm", "hf"]
    assert resolve_rollout_name("auto") == ("vllm" if installed else "hf")
    assert resolve_rollout_name("hf") == "hf" and resolve_rollout_name("sglang") == "sglang"


def test_auto_takes_the_first_available_backend_in_registration_order():
    registry = RolloutRegistry()
    registry.register(Backend("fast", "nowhere:Fast", lambda: False, hf_memory))
    registry.register(Backend("slow", "nowhere:Slow", lambda: True, hf_memory))
    assert registry.resolve("auto") == "slow"
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(Backend("slow", "nowhere:Other", lambda: True, hf_memory))
    with pytest.raises(ValueError, match="named 'auto'"):
        registry.register(Backend("auto", "nowhere:Auto", lambda: True, hf_memory))
    empty = RolloutRegistry()
    empty.register(Backend("fast", "nowhere:Fast", lambda: False, hf_memory))
    with pytest.raises(ValueError, match="no rollout backend is available"):
        empty.resolve("auto")


def test_unknown_and_unresolved_names_are_refused_with_the_key():
    with pytest.raises(ValueError, match=r"rollout.name='sglang' is not a rollout backend.*'vllm', 'hf'"):
        ROLLOUTS.get("sglang")
    with pytest.raises(ValueError, match="rollout.name=auto reached a rollout builder unresolved"):
        build_rollout("auto", None, None, None, 0)


def test_backends_implement_the_interface():
    from verl_lite.rollout.hf_rollout import HFRollout

    assert issubclass(ROLLOUTS.get("hf").load(), Rollout) and ROLLOUTS.get("hf").load() is HFRollout
    if ROLLOUTS.get("vllm").is_available():
        assert issubclass(ROLLOUTS.get("vllm").load(), Rollout)
    with pytest.raises(TypeError, match="abstract"):
        type("Half", (Rollout,), {"update_weights": lambda self, t: {}})(0, 0)


def test_a_registered_backend_passes_config_validation(monkeypatch):
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig
    from verl_lite.rollout.checks import check_rollout

    cfg = PPOTrainerConfig()
    cfg.actor_rollout_ref.rollout.name = "mine"
    run = Run(world=1, critic=False, ref=False, reward_model=False, num_gpus=0, use_gpu=False)
    problems = check_rollout(cfg, run)
    assert any("rollout.name='mine' is not one of" in p for p in problems)
    registry = RolloutRegistry()
    for name in ROLLOUTS.names():
        registry.register(ROLLOUTS.get(name))
    registry.register(Backend("mine", "nowhere:Mine", lambda: True, hf_memory))
    monkeypatch.setattr("verl_lite.rollout.checks.ROLLOUTS", registry)
    problems = check_rollout(cfg, run)
    assert not any("rollout.name" in p for p in problems), problems
