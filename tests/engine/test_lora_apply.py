"""engine/lora.py on one process: which modules get adapters, names, initialisation, errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.helpers.configs import tiny_critic, tiny_model
from verl_lite.config.schema import ModelConfig
from verl_lite.engine.lora import (
    adapter_config_dict,
    adapter_file_state,
    apply_lora,
    base_param_name,
    merged_state_dict,
    save_adapter,
)
from verl_lite.engine.lora_spec import LoraSpec, lora_enabled
from verl_lite.utils.hf_model import load_value_model


def _lora(path, **over):
    return tiny_model(path, **{"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear", **over})


def _critic(path, **lora):
    return dataclasses.replace(tiny_critic(path).model, **lora)


def _spec(path, **over):
    return LoraSpec.of(_lora(path, **over))


def _trainable(model):
    return [n for n, p in model.named_parameters() if p.requires_grad]


def test_lora_is_on_with_a_rank_or_a_saved_adapter(tiny_model_dir):
    assert not lora_enabled(ModelConfig(path=tiny_model_dir))
    assert lora_enabled(_lora(tiny_model_dir))
    assert lora_enabled(ModelConfig(path=tiny_model_dir, lora_adapter_path="/somewhere"))


def test_all_linear_adapts_every_linear_but_the_head_and_freezes_the_base(tiny_model_dir):
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), _spec(tiny_model_dir))
    adapted = {n.split(".")[-4] for n in _trainable(model)}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert all(".lora_A." in n or ".lora_B." in n for n in _trainable(model))
    lora_b = [p for n, p in model.named_parameters() if ".lora_B." in n]
    assert all(torch.equal(p, torch.zeros_like(p)) for p in lora_b), "a fresh adapter changes nothing"


def test_target_and_exclude_modules(tiny_model_dir):
    cfg = _lora(
        tiny_model_dir, target_modules=["q_proj", "v_proj", "up_proj"], exclude_modules=r".*layers\.0\..*"
    )
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraSpec.of(cfg))
    names = _trainable(model)
    assert {n.split(".")[-4] for n in names} == {"q_proj", "v_proj", "up_proj"}
    assert names and not [n for n in names if ".layers.0." in n], "layer 0 is excluded"


def test_adapters_start_the_same_whatever_the_random_state(tiny_model_dir):
    def adapters(seed):
        torch.manual_seed(seed)
        model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), _spec(tiny_model_dir))
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    torch.manual_seed(5)
    want_next = torch.rand(3)
    torch.manual_seed(5)
    a = adapters(5)
    assert torch.equal(torch.rand(3), want_next), "applying LoRA must not consume the training RNG"
    b = adapters(123)
    assert all(torch.equal(a[n], b[n]) for n in a), "every rank and run starts from the same adapter"


def test_names_map_to_hf_and_peft_file_format(tiny_model_dir, tmp_path):
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), _spec(tiny_model_dir))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert sorted(base_param_name(n) for n in frozen) == sorted(k for k in base if k != "lm_head.weight")
    state = adapter_file_state(model, ((n, p) for n, p in model.named_parameters() if p.requires_grad))
    assert state and all(k.startswith("base_model.model.") and ".default." not in k for k in state)
    save_adapter(str(tmp_path / "adapter"), state, model.peft_config["default"])
    config = adapter_config_dict(model.peft_config["default"])
    assert config["r"] == 4 and config["base_model_name_or_path"] == tiny_model_dir
    saved = ModelConfig(path=tiny_model_dir, lora_adapter_path=str(tmp_path / "adapter"))
    assert LoraSpec.of(saved).max_rank == 4


def test_the_critic_trains_adapters_and_its_value_head(tiny_model_dir):
    cfg = _critic(tiny_model_dir, lora_rank=4, lora_alpha=8, target_modules="all-linear")
    model = apply_lora(load_value_model(cfg, torch.float32), LoraSpec.of(cfg, "value"))
    names = _trainable(model)
    head = [n for n in names if ".score." in n]
    assert head and [n for n in names if ".lora_A." in n], names
    assert not [n for n in names if ".lora_" not in n and ".score." not in n]


def test_bad_lora_settings_name_the_key(tiny_model_dir, tmp_path):
    model = lambda: AutoModelForCausalLM.from_pretrained(tiny_model_dir)  # noqa: E731
    with pytest.raises(ValueError, match=r"actor_rollout_ref.model.target_modules=\['nope'\]: .*nope"):
        apply_lora(model(), _spec(tiny_model_dir, target_modules=["nope"]))
    with pytest.raises(ValueError, match=r"actor_rollout_ref.model.lora_alpha=0: must be positive"):
        apply_lora(model(), _spec(tiny_model_dir, lora_alpha=0))
    with pytest.raises(
        FileNotFoundError, match=r"actor_rollout_ref.model.lora_adapter_path=.*no adapter_config"
    ):
        apply_lora(model(), LoraSpec.of(ModelConfig(path=tiny_model_dir, lora_adapter_path=str(tmp_path))))
    critic = _critic(tiny_model_dir, lora_rank=4)
    spec = dataclasses.replace(LoraSpec.of(critic, "value"), rank=-1)
    with pytest.raises(ValueError, match=r"critic.model.lora_rank=-1: LoRA needs a positive rank"):
        apply_lora(load_value_model(critic, torch.float32), spec)


def test_the_merged_export_leaves_the_state_it_reads_untouched(tiny_model_dir):
    """On one CPU rank the full state dict save_engine merges is the engine's own params (no copy):
    the merge must make new tensors, not add the adapter into the live base weights."""
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), _spec(tiny_model_dir))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_()
    live = model.state_dict()  # the tensors themselves, as get_model_state_dict gives on one rank
    before = {k: v.clone() for k, v in live.items()}
    merged = merged_state_dict(live, model.peft_config["default"], model.config)
    assert all(torch.equal(live[k], before[k]) for k in live), "the merge changed the state it read"
    key = "model.layers.0.self_attn.q_proj.weight"
    base = before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.equal(merged[key], base), "the adapter was merged"
