"""LoRA's keys and rollout.load_format at start-up: accepted with verl's meaning, bad values named."""

import pytest

from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.config.values import check_choices
from verl_lite.preflight import prepare
from verl_lite.roles import run_of
from verl_lite.workers.lora_checks import check_lora

ARR = "actor_rollout_ref"


def check(*overrides) -> str:
    """The LoRA and load_format problems of the demo config with `overrides` ('' when there are none):
    LoRA's checks and the choice sets' (load_format's is one, config/values.py)."""
    cfg = load_config(list(overrides), "demo")
    run = run_of(cfg, 0)
    return "\n".join(check_lora(cfg, run) + check_choices(cfg, run))


def test_start_up_reports_them_with_the_rest():
    with pytest.raises(ConfigError) as info:
        prepare(load_config([f"{ARR}.model.lora_adapter_path=/no/such/adapter"], "demo"), num_gpus=0)
    assert any(p.startswith(f"{ARR}.model.lora_adapter_path=") for p in info.value.problems)


def test_verls_lora_keys_are_accepted():
    assert (
        check(
            f"{ARR}.model.lora_rank=8", f"{ARR}.model.lora_alpha=16", f"{ARR}.model.target_modules=all-linear"
        )
        == ""
    )
    assert (
        check(
            f"{ARR}.model.lora_rank=32",
            f"{ARR}.model.target_modules=[q_proj,v_proj]",
            f"{ARR}.model.exclude_modules=[down_proj]",
            f"{ARR}.rollout.name=vllm",
            f"{ARR}.rollout.load_format=safetensors",
            f"{ARR}.rollout.layered_summon=True",
        )
        == ""
    )
    assert check("critic.model.lora_rank=8", "algorithm.adv_estimator=gae") == ""


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            (f"{ARR}.model.lora_adapter_path=/no/such/adapter",),
            "lora_adapter_path='/no/such/adapter': no adapter_config.json",
        ),
        (
            (f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=[1,2]"),
            "target_modules=[1, 2]: give all-linear",
        ),
        (
            (f"{ARR}.model.lora_rank=1024", f"{ARR}.rollout.name=vllm"),
            f"{ARR}.model.lora_rank=1024: vLLM serves LoRA ranks up to 512",
        ),
        (
            (f"{ARR}.model.lora_rank=8", f"{ARR}.rollout.name=vllm", f"{ARR}.rollout.layered_summon=True"),
            f"{ARR}.rollout.layered_summon=True needs the base model preloaded in vLLM: set {ARR}.rollout.load_format=safetensors",
        ),
        (
            (f"{ARR}.rollout.load_format=pt",),
            f"{ARR}.rollout.load_format='pt' is not one of ['dummy', 'auto', 'safetensors']",
        ),
    ],
)
def test_bad_lora_values_are_one_line_each(overrides, message):
    assert message in check(*overrides)


def test_the_critics_lora_keys_are_read_only_with_a_critic():
    bad = ("critic.model.lora_rank=8", "critic.model.target_modules=[1,2]")
    assert check(*bad) == ""  # GRPO: no critic
    assert "critic.model.target_modules=[1, 2]: give all-linear" in check(*bad, "algorithm.adv_estimator=gae")


def test_the_hf_rollout_takes_any_rank():
    assert check(f"{ARR}.model.lora_rank=1024", f"{ARR}.rollout.name=hf") == ""


def test_with_lora_merge_vllm_serves_no_adapter_so_its_lora_limits_do_not_apply():
    merged = (f"{ARR}.model.lora.merge=True", f"{ARR}.rollout.name=vllm")
    assert check(f"{ARR}.model.lora_rank=1024", *merged) == ""
    assert check(f"{ARR}.model.lora_rank=8", f"{ARR}.rollout.layered_summon=True", *merged) == ""
    assert "ranks up to 512" in check(f"{ARR}.model.lora_rank=1024", f"{ARR}.rollout.name=vllm")


def test_with_lora_merge_what_a_merge_cannot_send_is_refused_before_ray(tmp_path):
    """The tiny model ties its LM head to the embedding: an adapter on it has no weight of its own to
    merge into; a saved DoRA adapter's magnitude is not W + scale * B A."""
    from peft import LoraConfig

    from verl_lite.config.schema import TINY_MODEL
    from verl_lite.data import assets

    path = f"{ARR}.model.path={assets.resolve(TINY_MODEL)}"  # as start-up's RESOLVE leaves it
    merged = (path, f"{ARR}.model.lora.merge=True", f"{ARR}.model.lora_rank=8")
    tied = check(*merged, f"{ARR}.model.target_modules=[q_proj,lm_head]")
    assert (
        "lora.merge=True merges W + scale * B A of plain linear layers; lm_head's adapter has a tied weight"
        in tied
    )
    assert check(path, f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=[q_proj,lm_head]") == ""
    assert check(*merged, f"{ARR}.model.target_modules=all-linear") == ""
    LoraConfig(r=4, target_modules=["q_proj"], use_dora=True).save_pretrained(tmp_path)
    dora = check(path, f"{ARR}.model.lora.merge=True", f"{ARR}.model.lora_adapter_path={tmp_path}")
    assert "model.layers.0.self_attn.q_proj's adapter has DoRA" in dora


def test_fused_kernels_with_an_adapter_on_the_lm_head_is_refused_before_ray(tmp_path):
    """The fused head computes log-probs from its own weight (engine/token_head.py): an adapter on
    the head, by the target list or a saved adapter, would be left out of them. all-linear leaves the
    head out (PEFT's rule), so it runs."""
    from peft import LoraConfig

    from verl_lite.config.schema import TINY_MODEL
    from verl_lite.data import assets

    path = f"{ARR}.model.path={assets.resolve(TINY_MODEL)}"  # as start-up's RESOLVE leaves it
    fused = (path, f"{ARR}.model.use_fused_kernels=True")
    line = f"{ARR}.model.use_fused_kernels=True with a LoRA adapter on the LM head"
    assert line in check(*fused, f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=[q_proj,lm_head]")
    assert check(*fused, f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=all-linear") == ""
    assert check(path, f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=[q_proj,lm_head]") == ""
    LoraConfig(r=4, target_modules=["v_proj", "lm_head"]).save_pretrained(tmp_path)
    assert line in check(*fused, f"{ARR}.model.lora_adapter_path={tmp_path}")


def test_of_verl_09s_lora_block_merge_is_implemented_and_megatrons_keys_are_refused_by_name():
    assert load_config([f"{ARR}.model.lora.merge=True"], "demo").actor_rollout_ref.model.lora.merge is True
    with pytest.raises(ConfigError) as info:
        load_config([f"{ARR}.model.lora.rank=8"], "demo")
    assert info.value.problems[0].startswith(f"{ARR}.model.lora.rank=8 is not supported by verl_lite: ")


def test_vllm_rank_table_is_vllms():
    vllm_lora = pytest.importorskip("vllm.config.lora", reason="vLLM not installed")
    from typing import get_args

    from verl_lite.rollout import VLLM_LORA_RANKS

    assert VLLM_LORA_RANKS == tuple(sorted(get_args(vllm_lora.MaxLoRARanks)))
