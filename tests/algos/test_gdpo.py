"""gdpo (verl 0.9.1's adv_estimator=gdpo) against numbers worked out by hand, its start-up checks,
its metrics, and the gdpo reward manager that hands it the components."""

import math

import numpy as np
import pytest
import torch

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.checks import _estimator
from verl_lite.algos.gdpo import gdpo_metrics
from verl_lite.algos.registry import REWARD_EXTRA
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.protocol import DataProto
from verl_lite.reward.managers import build_reward_manager

GDPO = ADV_ESTIMATORS.get("gdpo")
INDEX = np.array(["a", "a", "b", "b"], dtype=object)
# two groups of two responses; components acc and fmt, per response
EXTRA = np.array(
    [{"acc": 1.0, "fmt": 1.0}, {"acc": 0.0, "fmt": 1.0}, {"acc": 0.0, "fmt": 1.0}, {"acc": 0.0, "fmt": 0.0}],
    dtype=object,
)
MASK = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.float32)


def test_each_component_is_normalised_in_its_group_then_weighted_and_whitened():
    # GRPO per component (unbiased std; a group whose scores are equal gets 0):
    #   acc: group a [1, 0] -> [+1/sqrt(2), -1/sqrt(2)]; group b [0, 0] -> [0, 0]
    #   fmt: group a [1, 1] -> [0, 0];                   group b [1, 0] -> [+1/sqrt(2), -1/sqrt(2)]
    # weights [1, 0.5]: [h, -h, h/2, -h/2] with h = 1/sqrt(2); every row has 2 valid tokens, so the
    # token mean is 0 and the unbiased token variance (8 tokens) is 2 (h^2 + h^2/4) * 2 / 7 = 5/14
    h = 1 / math.sqrt(2)
    per_row = torch.tensor([h, -h, h / 2, -h / 2]) / math.sqrt(5 / 14 + 1e-8)
    adv, returns = GDPO(
        torch.zeros(4, 3), MASK, INDEX, EXTRA, gdpo_reward_keys=["acc", "fmt"], gdpo_reward_weights=[1.0, 0.5]
    )
    torch.testing.assert_close(adv, per_row[:, None] * MASK, atol=1e-5, rtol=1e-5)
    assert torch.equal(adv, returns) and (adv[:, 2] == 0).all()


def test_a_dominant_component_does_not_drown_a_weak_one():
    # group b: acc [0, 1], fmt [100, 0]. GRPO on the sum [100, 1] ranks row 2 first (+h, -h): the
    # format reward's scale decides. GDPO normalises each: acc [-h, +h] + fmt [+h, -h] = [0, 0].
    extra = np.array(
        [{"acc": 1, "fmt": 0}, {"acc": 0, "fmt": 0}, {"acc": 0, "fmt": 100}, {"acc": 1, "fmt": 0}],
        dtype=object,
    )
    adv, _ = GDPO(torch.zeros(4, 3), MASK, INDEX, extra, gdpo_reward_keys=["acc", "fmt"])
    assert adv[0, 0] > 0 > adv[1, 0]
    torch.testing.assert_close(adv[2:], torch.zeros(2, 3), atol=1e-5, rtol=0)
    summed = torch.tensor([[1.0, 0, 0], [0, 0, 0], [100.0, 0, 0], [1.0, 0, 0]])
    grpo, _ = ADV_ESTIMATORS.get("grpo")(summed, MASK, INDEX)
    assert grpo[2, 0] > 0.7 and grpo[3, 0] < -0.7


def test_a_component_the_reward_function_did_not_return_is_named():
    with pytest.raises(ValueError, match=r"returned no 'format_reward' \(it returned \['acc', 'fmt'\]\)"):
        GDPO(torch.zeros(4, 3), MASK, INDEX, EXTRA, gdpo_reward_keys=["acc", "format_reward"])
    bad = np.array([{"acc": "yes"}] * 4, dtype=object)
    with pytest.raises(ValueError, match="'acc' must be a number for every response"):
        GDPO(torch.zeros(4, 3), MASK, INDEX, bad, gdpo_reward_keys=["acc"])


@pytest.mark.parametrize(
    ("keys", "weights", "message"),
    [
        (None, None, "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys"),
        ([], None, "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys"),
        (["acc", "acc"], None, "names a key twice"),
        (["acc", "fmt"], [1.0], "has 1 weights for the 2 keys"),
    ],
)
def test_start_up_refuses_what_gdpo_cannot_run(keys, weights, message):
    cfg = PPOTrainerConfig()
    cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n = "gdpo", 4
    cfg.algorithm.gdpo_reward_keys, cfg.algorithm.gdpo_reward_weights = keys, weights
    [line] = _estimator(cfg)
    assert message in line
    cfg.algorithm.gdpo_reward_keys, cfg.algorithm.gdpo_reward_weights = ["acc", "fmt"], [1.0, 2.0]
    assert _estimator(cfg) == []


def test_metrics_are_verls_per_component_statistics():
    cfg = PPOTrainerConfig()
    cfg.algorithm.gdpo_reward_keys = ["acc", "fmt"]
    batch = DataProto.from_dict({"responses": torch.zeros(4, 3)}, {REWARD_EXTRA: EXTRA})
    metrics = gdpo_metrics(cfg, batch)
    assert metrics == {
        "gdpo/acc/mean": 0.25,
        "gdpo/acc/std": pytest.approx(math.sqrt(3 / 16)),  # np.std: the population std, as verl's
        "gdpo/acc/max": 1.0,
        "gdpo/acc/min": 0.0,
        "gdpo/fmt/mean": 0.75,
        "gdpo/fmt/std": pytest.approx(math.sqrt(3 / 16)),
        "gdpo/fmt/max": 1.0,
        "gdpo/fmt/min": 0.0,
    }


class Tok:
    def decode(self, ids, skip_special_tokens=True):
        return "x" * len(ids)


def test_the_gdpo_manager_keeps_every_component_and_a_plain_score_as_acc():
    batch = DataProto.from_dict(
        {"responses": torch.ones(2, 3, dtype=torch.long), "response_mask": torch.ones(2, 3)},
        {"data_source": np.array(["d", "d"], dtype=object), "reward_model": np.array([{}, {}], dtype=object)},
    )

    seen = []

    def components(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(extra_info["experiment_name"])  # verl's gdpo manager tells it (rlla.py reads it)
        return {"score": 1.5, "accuracy_reward": 1.0, "format_reward": 0.5}

    rewards, extra = build_reward_manager("gdpo", Tok(), components, experiment_name="qwen3_8b")(batch)
    assert seen == ["qwen3_8b", "qwen3_8b"]
    assert dict(extra) == {"score": [1.5, 1.5], "accuracy_reward": [1.0, 1.0], "format_reward": [0.5, 0.5]}
    assert rewards[:, -1].tolist() == [1.5, 1.5]
    _, extra = build_reward_manager("gdpo", Tok(), lambda **kw: 0.25)(batch)
    assert dict(extra) == {"acc": [0.25, 0.25]}
    infos = []

    def plain(data_source, solution_str, ground_truth, extra_info=None):
        infos.append(extra_info)
        return {"score": 1.5, "accuracy_reward": 1.0}

    _, extra = build_reward_manager("naive", Tok(), plain, experiment_name="qwen3_8b")(batch)
    assert dict(extra) == {"score": [1.5, 1.5], "accuracy_reward": [1.0, 1.0]}  # every key, as verl's naive
    assert "experiment_name" not in infos[0]  # as verl's naive manager
