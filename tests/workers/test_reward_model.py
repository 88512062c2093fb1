"""The reward model: a tiny sequence classifier built here, served by the FSDP2 engine.

Its score, read at the last real token and placed on the last response token, must equal the
pooled score of transformers' own AutoModelForSequenceClassification forward, padded or packed.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForSequenceClassification

from tests.helpers.configs import fp32_fsdp, tiny_reward_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch, make_tiny_reward_model_dir
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.utils.hf_model import load_reward_model
from verl_lite.workers.reward_model import compute_rm_scores


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return make_tiny_reward_model_dir(str(tmp_path_factory.mktemp("tiny_rm")))


def _scores(rank, world, rm_dir, batch):
    out = {}
    for packed in (False, True):
        cfg = tiny_reward_model(rm_dir, use_remove_padding=packed)
        engine = FSDPEngine(
            cfg, fp32_fsdp(), init_device_mesh("cpu", (world,)), role="reward", model_kind="reward"
        )
        out[packed] = compute_rm_scores(engine, batch, micro_size=3, max_token_len=None)
    return out


@pytest.fixture(scope="module")
def batch():
    b = make_ppo_batch(vocab=110, bs=6, prompt_len=6, response_len=5, seed=7)
    b["response_mask"][0] = 0  # an empty response gets no reward
    b["attention_mask"][0, 6:] = 0
    b["input_ids"][0, 6:] = 0
    return b


def test_rm_score_is_the_classifiers_pooled_score_on_the_last_response_token(rm_dir, batch):
    result = run_ranks(_scores, 1, rm_dir, batch)[0]
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        pooled = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, 0]
    lengths = batch["response_mask"].sum(-1)
    for scores in (result[False], result[True]):
        assert scores[0].abs().sum() == 0
        for i in range(1, 6):
            assert (scores[i] != 0).sum() == 1
            assert abs(scores[i, lengths[i] - 1] - pooled[i]) < 1e-5
    assert pooled[1:].std() > 0  # the scores tell sequences apart: the check is not vacuous


def test_a_causal_lm_is_refused_as_reward_model(tiny_model_dir):
    with pytest.raises(ValueError, match="reward_model.model.path"):
        load_reward_model(tiny_reward_model(tiny_model_dir), torch.float32)
