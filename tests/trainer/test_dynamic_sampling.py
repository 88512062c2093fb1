"""DAPO dynamic sampling: which groups are kept, how many batches are drawn, and the errors."""

import numpy as np
import pytest
import torch

from verl_lite.errors import RunError
from verl_lite.protocol import DataProto
from verl_lite.trainer.dynamic_sampling import collect_kept_groups, kept_group_rows, sequence_metric


def scored(scores_per_group: list[list[float]], tag: str) -> DataProto:
    """Groups of responses (one row each) with their score on the last of 3 response tokens."""
    rows = [(f"{tag}{g}", s) for g, group in enumerate(scores_per_group) for s in group]
    levels = torch.zeros(len(rows), 3)
    levels[:, -1] = torch.tensor([s for _, s in rows])
    return DataProto.from_dict(
        {"token_level_scores": levels, "token_level_rewards": levels - 0.1},
        {"uid": [u for u, _ in rows]},
    )


def test_all_equal_groups_are_dropped_in_order():
    uids = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
    rows, kept, total = kept_group_rows(uids, np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]))
    assert (rows, kept, total) == ([2, 3], 1, 3)


def test_a_group_of_one_is_kept_as_in_verl():
    """verl's DAPO trainer keeps a prompt whose group has one response (rollout.n=1: docs/algo/dapo.md's
    YAML block with verl's default n); it was dropped here, and the run refused."""
    uids = np.array(["a", "b", "c", "c"], dtype=object)
    rows, kept, total = kept_group_rows(uids, np.array([1.0, 0.0, 1.0, 1.0]))
    assert (rows, kept, total) == ([0, 1], 2, 3)


def test_metrics_come_from_scores_rewards_or_extra_info():
    batch = scored([[1.0, 0.0]], "a")
    assert sequence_metric(batch, {}, "reward").tolist() == [1.0, 0.0]  # verl 0.9.1's default: pre-KL
    assert sequence_metric(batch, {}, "seq_reward").tolist() == [1.0, 0.0]
    assert np.allclose(sequence_metric(batch, {}, "seq_final_reward"), [0.7, -0.3])
    assert sequence_metric(batch, {"acc": [True, False]}, "acc").tolist() == [1.0, 0.0]
    assert sequence_metric(batch, {}, "score").tolist() == [1.0, 0.0]
    # verl 0.9.1: any key of the reward function's extra info
    assert sequence_metric(batch, {"format_reward": [0.5, 0.5]}, "format_reward").tolist() == [0.5, 0.5]
    with pytest.raises(RunError, match="algorithm.filter_groups.metric='acc'"):
        sequence_metric(batch, {}, "acc")


def test_a_metric_the_reward_function_does_not_return_is_one_line_naming_the_key(capsys):
    """docs/algo/dapo.md's dynamic-sampling YAML block (`filter_groups: {enable: True, metric: acc}`,
    verl's default rollout.n=1) with a reward function that returns plain scores (verl_lite's arith
    task, verl's gsm8k scorer) ended the run at step 1 with a KeyError traceback; verl's DAPO trainer
    stops there too (KeyError 'acc'). Now: one line naming the key and the fix, exit 2."""
    from verl_lite.main_ppo import _report_failure
    from verl_lite.trainer.ppo_trainer import trainer_phase

    def next_batch(i):
        return scored([[1.0], [0.0]], f"b{i}"), {}  # n=1, a plain score per response

    with pytest.raises(RunError) as info, trainer_phase("gen", 1):
        collect_kept_groups(next_batch, 2, 1, "acc", max_num_gen_batches=10)
    with pytest.raises(SystemExit) as exit_info:
        _report_failure(info.value)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        "verl_lite: trainer phase 'gen' at step 1 failed: algorithm.filter_groups.metric='acc'"
    )
    assert "use reward" in err


def test_more_batches_are_drawn_until_enough_groups_are_kept():
    batches = [
        scored([[1, 1], [0, 1], [0, 0]], "x"),  # 1 kept
        scored([[0, 0], [1, 1], [1, 1]], "y"),  # 0 kept
        scored([[1, 0], [0, 1], [0, 1]], "z"),  # 3 kept, 1 needed
    ]
    drawn = []

    def next_batch(i):
        drawn.append(i)
        return batches[i], {}

    kept, metrics = collect_kept_groups(next_batch, 2, 2, "seq_reward", max_num_gen_batches=0)
    assert drawn == [0, 1, 2]
    assert list(kept.non_tensor_batch["uid"]) == ["x1", "x1", "z0", "z0"]
    assert metrics == {
        "train/num_gen_batches": 3,
        "train/num_kept_groups": 4,
        "train/kept_group_ratio": 4 / 9,
    }


def test_too_many_generation_batches_is_an_error_naming_the_key():
    def next_batch(i):
        return scored([[1, 1], [0, 0]], f"b{i}"), {}

    with pytest.raises(RunError, match="algorithm.filter_groups.max_num_gen_batches") as info:
        collect_kept_groups(next_batch, 2, 2, "seq_reward", max_num_gen_batches=3)
    assert "3 generation batches kept only 0 of the 2 prompts" in str(info.value)


def test_a_reward_model_scores_any_number_of_rows_over_its_ranks():
    """DAPO under the async modes scores the groups finished so far (k x n rows, any k): the reward
    model's ranks each get an equal share (the worker group chunks by rank), the scores come back
    in row order, one per row, whatever the world size."""
    from types import SimpleNamespace

    from verl_lite.trainer.batching import Dispatch
    from verl_lite.trainer.ppo_phases import StepPhases

    def compute_rm_score(data: DataProto) -> DataProto:  # a row's score: its first token, so order shows
        assert len(data) % world == 0, f"{len(data)} rows do not chunk over {world} ranks"
        scores = torch.zeros(len(data), 3)
        scores[:, -1] = data.batch["input_ids"][:, 0].float()
        return DataProto.from_dict({"rm_scores": scores})

    config = SimpleNamespace(trainer=SimpleNamespace(balance_batch=True))
    for world, rows in ((4, 2), (4, 6), (2, 5), (8, 8)):
        ids = torch.arange(rows).unsqueeze(-1) * 10 + torch.arange(5)  # row i starts with 10 * i
        batch = DataProto.from_dict(
            {
                "input_ids": ids,
                "attention_mask": (torch.arange(5) <= torch.arange(rows).unsqueeze(-1) % 5).long(),
                "position_ids": torch.arange(5).repeat(rows, 1),
                "responses": ids[:, 2:],
                "response_mask": torch.ones(rows, 3),
            }
        )
        steps = SimpleNamespace(
            workers=SimpleNamespace(rm_wg=SimpleNamespace(compute_rm_score=compute_rm_score)),
            dispatch=Dispatch(config, world),
        )
        scores, extra = StepPhases._compute_scores(steps, batch, {})
        assert extra == {} and scores[:, -1].tolist() == [10.0 * i for i in range(rows)], (world, rows)
