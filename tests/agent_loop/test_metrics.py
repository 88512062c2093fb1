"""The step's multi-turn metrics from the per-trajectory fields, worked by hand."""

import json

import numpy as np
import pytest
import torch

from verl_lite.agent_loop.base import TokenOutput, count_preempted
from verl_lite.agent_loop.metrics import compute_agent_loop_metrics
from verl_lite.protocol import DataProto
from verl_lite.trainer.tracking import FileLogger


def test_metrics_by_hand():
    stats = [
        {"tool_calls": 2, "tool_errors": 1, "tool_timeouts": 1, "tool_malformed": 0, "tool_dropped": 1,
         "tool_latencies": [0.5, 1.5], "tool_seconds": 1.5, "generate_seconds": 2.0, "tokenization_mismatch": True},
        {"tool_calls": 0, "tool_errors": 1, "tool_timeouts": 0, "tool_malformed": 1, "tool_dropped": 0,
         "tool_latencies": [], "tool_seconds": 0.0, "generate_seconds": 1.0, "tokenization_mismatch": False},
    ]  # fmt: skip
    attention = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])  # prompt 2 | response 4
    response_mask = torch.tensor([[1, 0, 0, 1], [1, 1, 0, 0]])  # 2 of the 6 real response tokens masked
    batch = DataProto.from_dict(
        {
            "attention_mask": attention,
            "responses": torch.zeros(2, 4, dtype=torch.long),
            "response_mask": response_mask,
        },
        {
            "__num_turns__": np.array([6, 2], dtype=np.int32),
            "tool_call_counts": np.array([2, 0]),
            "agent_loop_stats": stats,
        },
    )
    m = compute_agent_loop_metrics(batch)
    assert (m["num_turns/min"], m["num_turns/max"], m["num_turns/mean"]) == (2, 6, 4)
    assert m["tool_call_counts/mean"] == 1 and m["timing_s/agent_loop/generate_sequences/max"] == 2.0
    assert m["timing_s/agent_loop/tool_calls/mean"] == 0.75
    assert m["timing_s/agent_loop/compute_score/max"] == 0.0  # scored in the reward phase
    assert (m["agent_loop/num_tool_errors"], m["agent_loop/num_tool_timeouts"]) == (2, 1)
    assert (m["agent_loop/num_malformed_tool_calls"], m["agent_loop/num_dropped_tool_calls"]) == (1, 1)
    assert (m["agent_loop/tool_latency_s/mean"], m["agent_loop/tool_latency_s/max"]) == (1.0, 1.5)
    assert m["agent_loop/masked_response_token_ratio"] == pytest.approx(2 / 6)
    assert m["agent_loop/tokenization_mismatch_ratio"] == 0.5
    val = compute_agent_loop_metrics(batch, prefix="val-aux/")
    assert val["val-aux/num_turns/mean"] == 4 and "val-aux/timing_s/agent_loop/slowest/tool_calls" in val
    assert compute_agent_loop_metrics(DataProto.from_dict({"attention_mask": attention})) == {}


def _batch(stats, attention):
    width = 4
    return DataProto.from_dict(
        {
            "attention_mask": attention,
            "responses": torch.zeros(len(stats), width, dtype=torch.long),
            "response_mask": attention[:, -width:],
        },
        {
            "__num_turns__": np.array([2] * len(stats), dtype=np.int32),
            "tool_call_counts": np.zeros(len(stats)),
            "agent_loop_stats": stats,
        },
    )


def test_preempted_and_slowest_as_verl_reduces_them(tmp_path):
    """verl 0.9.1's AgentLoopManager._performance_metrics: min/max/mean of num_preempted; the slowest
    trajectory is the argmax of generate + tool + score seconds (the first of a tie)."""
    stats = [
        {"generate_seconds": 1.0, "tool_seconds": 2.0, "num_preempted": 0, "tokenization_mismatch": False},
        {"generate_seconds": 2.5, "tool_seconds": 0.5, "num_preempted": 3, "tokenization_mismatch": False},
        {"generate_seconds": 0.5, "tool_seconds": 0.0, "num_preempted": 1, "tokenization_mismatch": False},
    ]  # rows 0 and 1 tie at 3.0 s: row 0 is the slowest
    attention = torch.tensor(
        [[0, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]]
    )  # prompt 3 | response 4
    m = compute_agent_loop_metrics(_batch(stats, attention))
    t = "timing_s/agent_loop"
    assert (m[f"{t}/num_preempted/min"], m[f"{t}/num_preempted/max"], m[f"{t}/num_preempted/mean"]) == (
        0,
        3,
        4 / 3,
    )
    assert m[f"{t}/slowest/generate_sequences"] == 1.0 and m[f"{t}/slowest/tool_calls"] == 2.0
    assert m[f"{t}/slowest/compute_score"] == 0.0 and m[f"{t}/slowest/num_preempted"] == 0
    assert (m[f"{t}/slowest/prompt_length"], m[f"{t}/slowest/response_length"]) == (2, 2)
    # as the trainer logs them: metrics.jsonl holds them by these names (the file tracker)
    FileLogger(str(tmp_path)).log(m, 1)
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert {k: v for k, v in row.items() if k.startswith(t)} == {
        k: v for k, v in m.items() if k.startswith(t)
    }
    assert len([k for k in row if k.startswith(t)]) == 18  # 4 x min/max/mean + 6 slowest
    stats[1]["tool_seconds"] = 0.6  # now row 1: its lengths
    m = compute_agent_loop_metrics(_batch(stats, attention))
    assert (m[f"{t}/slowest/prompt_length"], m[f"{t}/slowest/response_length"]) == (3, 4)
    assert m[f"{t}/slowest/num_preempted"] == 3


def test_num_preempted_is_counted_as_verl_counts_it():
    """The first generation sets the count (-1 when the engine does not say); later ones add (0 if unsaid)."""

    def result(n):
        return TokenOutput([1], [-0.1], "eos", num_preempted=n)

    assert count_preempted(None, result(None)) == -1 and count_preempted(None, result(2)) == 2
    assert count_preempted(2, result(None)) == 2 and count_preempted(-1, result(1)) == 0
