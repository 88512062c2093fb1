"""The step's multi-turn metrics from the per-trajectory fields, worked by hand."""

import numpy as np
import pytest
import torch

from verl_lite.agent_loop.metrics import compute_agent_loop_metrics
from verl_lite.protocol import DataProto


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
    assert m["tool_call_counts/mean"] == 1 and m["agent_loop/generate_sequences/max"] == 2.0
    assert m["agent_loop/tool_calls/mean"] == 0.75
    assert (m["agent_loop/num_tool_errors"], m["agent_loop/num_tool_timeouts"]) == (2, 1)
    assert (m["agent_loop/num_malformed_tool_calls"], m["agent_loop/num_dropped_tool_calls"]) == (1, 1)
    assert (m["agent_loop/tool_latency_s/mean"], m["agent_loop/tool_latency_s/max"]) == (1.0, 1.5)
    assert m["agent_loop/masked_response_token_ratio"] == pytest.approx(2 / 6)
    assert m["agent_loop/tokenization_mismatch_ratio"] == 0.5
    assert compute_agent_loop_metrics(batch, prefix="val-aux/")["val-aux/num_turns/mean"] == 4
    assert compute_agent_loop_metrics(DataProto.from_dict({"attention_mask": attention})) == {}
