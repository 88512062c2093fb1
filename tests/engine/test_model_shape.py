"""The model's shape (engine/model_shape.py): parameter counts against transformers, the 7B layout
written out by hand (tests/helpers/model_configs.py), the value head, config.json errors, and PEFT's
matching of LoRA target modules."""

import os

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from tests.helpers.model_configs import CONFIGS, LAYER, ROOT, SEVEN_B, H, N, V
from verl_lite.engine.model_shape import LINEARS, adapted_linears, read_shape
from verl_lite.errors import InputError

PUBLIC_PARAM_COUNTS = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-7b": 7_615_616_512,
}


@pytest.fixture(scope="module")
def seven_b():
    return read_shape(SEVEN_B)


@pytest.mark.parametrize("name", sorted(PUBLIC_PARAM_COUNTS))
def test_param_count_matches_the_real_model(name):
    path = os.path.join(CONFIGS, name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    real = sum(p.numel() for p in model.parameters())
    assert read_shape(path).num_params == real == PUBLIC_PARAM_COUNTS[name]


def test_hand_layout_of_the_7b_shape(seven_b):
    assert (LAYER, ROOT, N) == (233_057_792, 1_089_998_336, 7_615_616_512)
    assert (seven_b.layer_params, seven_b.root_params, seven_b.num_params) == (LAYER, ROOT, N)


def test_value_head_shape(seven_b):
    critic = read_shape(SEVEN_B, head="value")
    assert critic.root_params == V * H + H + H + 1  # embeddings, norm, a (1 x hidden) head and its bias
    assert critic.out_features == 1 and seven_b.out_features == V


def test_read_shape_names_the_key_and_the_missing_field(tmp_path):
    with pytest.raises(InputError, match="critic.model.path=.*no config.json.*set critic.model.path to"):
        read_shape(str(tmp_path), key="critic.model.path")
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ValueError, match="num_hidden_layers"):
        read_shape(str(tmp_path))


def test_lora_targets_follow_peft_matching():
    assert adapted_linears("all-linear") == LINEARS
    assert adapted_linears(["q_proj", "v_proj"]) == ("q_proj", "v_proj")
    assert adapted_linears(r".*self_attn\..*") == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert adapted_linears("all-linear", ["down_proj"]) == LINEARS[:-1]
    assert adapted_linears("all-linear", r".*\.mlp\..*") == LINEARS[:4]
