"""The step's multi-turn metrics, on the driver, from the per-trajectory fields the rollout returned
(runner.py): every rank's trajectories count, not only the first rank's.

    num_turns/{min,max,mean}                 verl's: user + assistant turns + 1 per trajectory
    tool_call_counts/{min,max,mean}          verl's: tool calls run per trajectory
    timing_s/agent_loop/...                  verl's AgentLoopManager._performance_metrics (0.9.1
                                             agent_loop.py), under the timing_s/ its trainer adds:
      generate_sequences/{min,max,mean}      seconds per trajectory generating
      tool_calls/{min,max,mean}              seconds per trajectory in tool turns (a verl-written
                                             loop's metrics["tool_calls"], as verl reads it)
      compute_score/{min,max,mean}           seconds per trajectory scoring inside the loop: 0 here,
                                             as in verl without reward-loop workers (verl_lite scores
                                             in the reward phase, timing_s/reward)
      num_preempted/{min,max,mean}           times the engine preempted the trajectory's requests,
                                             summed over its turns by its loop (base.count_preempted,
                                             in metrics["num_preempted"], as verl's loops do; -1 for a
                                             loop that does not count, as verl's AgentLoopMetrics): 0 on
                                             the hf rollout (one generate call runs every request to
                                             its end); -1, verl's "not available", where the engine
                                             does not say (a vLLM build without num_preempted)
      slowest/{generate_sequences,tool_calls,compute_score,num_preempted,prompt_length,response_length}
                                             the trajectory with the most generate + tool + score
                                             seconds (the first on a tie, np.argmax): the step's
                                             rollout waits for it; lengths are its real tokens
    agent_loop/num_tool_errors, num_tool_timeouts, num_malformed_tool_calls, num_dropped_tool_calls
                                             counts over the batch (dropped: beyond max_parallel_calls)
    agent_loop/tool_latency_s/{mean,max}     per tool call run
    agent_loop/masked_response_token_ratio   share of response tokens the policy did not sample
    agent_loop/tokenization_mismatch_ratio   trajectories the sanity check flagged (sanity.py)
A `prefix` (val-aux/) names a validation batch's.

`failing_tools` reads the same fields for what a counter hides: a tool whose every call of the
step failed (wrong tools_kwargs, a result of the wrong type, arguments its code rejects...). The
trainer says so on the console, once per tool and cause, with the first failure's text.
"""

from __future__ import annotations

import logging

import numpy as np

from verl_lite.protocol import DataProto


def min_max_mean(name: str, values) -> dict[str, float]:
    """`name`/min, /max, /mean of `values` ({} when there are none)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {}
    return {
        f"{name}/min": float(values.min()),
        f"{name}/max": float(values.max()),
        f"{name}/mean": float(values.mean()),
    }


def compute_agent_loop_metrics(batch: DataProto, prefix: str = "") -> dict[str, float]:
    nt = batch.non_tensor_batch
    if "__num_turns__" not in nt:
        return {}
    metrics = min_max_mean(f"{prefix}num_turns", nt["__num_turns__"].astype(np.float64))
    metrics |= min_max_mean(f"{prefix}tool_call_counts", nt["tool_call_counts"].astype(np.float64))
    stats = list(nt["agent_loop_stats"])
    metrics |= _timing(batch, stats, f"{prefix}timing_s/agent_loop")
    a = f"{prefix}agent_loop"
    for key, name in (
        ("tool_errors", "num_tool_errors"),
        ("tool_timeouts", "num_tool_timeouts"),
        ("tool_malformed", "num_malformed_tool_calls"),
        ("tool_dropped", "num_dropped_tool_calls"),
    ):
        metrics[f"{a}/{name}"] = float(sum(s.get(key, 0) for s in stats))
    latencies = [x for s in stats for x in s.get("tool_latencies", [])]
    if latencies:
        metrics[f"{a}/tool_latency_s/mean"] = float(np.mean(latencies))
        metrics[f"{a}/tool_latency_s/max"] = float(np.max(latencies))
    metrics[f"{a}/tokenization_mismatch_ratio"] = float(np.mean([s["tokenization_mismatch"] for s in stats]))
    b = batch.batch
    width = b["responses"].shape[1]
    real = float(b["attention_mask"][:, -width:].sum())
    metrics[f"{a}/masked_response_token_ratio"] = 1.0 - float(b["response_mask"].sum()) / max(real, 1.0)
    return metrics


def _timing(batch: DataProto, stats: list[dict], t: str) -> dict[str, float]:
    """verl's per-trajectory timing metrics and the slowest trajectory's (module docstring)."""
    seconds = {
        "generate_sequences": np.array([s["generate_seconds"] for s in stats], dtype=np.float64),
        "tool_calls": np.array([_tool_seconds(s) for s in stats], dtype=np.float64),
        "compute_score": np.zeros(len(stats)),
    }
    preempted = np.array([s.get("num_preempted", -1) for s in stats], dtype=np.float64)
    metrics = min_max_mean(f"{t}/num_preempted", preempted)
    for name, values in seconds.items():
        metrics |= min_max_mean(f"{t}/{name}", values)
    slowest = int(np.argmax(sum(seconds.values())))
    for name, values in seconds.items():
        metrics[f"{t}/slowest/{name}"] = float(values[slowest])
    metrics[f"{t}/slowest/num_preempted"] = float(preempted[slowest])
    attention = batch.batch["attention_mask"][slowest]  # (P + R,)
    width = batch.batch["responses"].shape[1]
    metrics[f"{t}/slowest/prompt_length"] = float(attention[:-width].sum())
    metrics[f"{t}/slowest/response_length"] = float(attention[-width:].sum())
    return metrics


def _tool_seconds(stats: dict) -> float:
    """A trajectory's seconds in tool turns: verl_lite's loop counts them in tool_seconds; a loop
    written for verl times them into metrics["tool_calls"] (simple_timer, as verl's ToolAgentLoop)."""
    if "tool_seconds" in stats:
        return stats["tool_seconds"]
    return float(stats.get("tool_calls") or 0.0)


log = logging.getLogger("verl_lite")


def failing_tools(batch: DataProto) -> dict[str, tuple[int, str]]:
    """name -> (calls, the first failure's text) for each tool every call of which failed this step."""
    stats = batch.non_tensor_batch.get("agent_loop_stats")
    totals: dict[str, list] = {}
    for s in stats if stats is not None else []:
        for name, (calls, failures, first) in s.get("tool_outcomes", {}).items():
            total = totals.setdefault(name, [0, 0, None])
            total[0], total[1] = total[0] + calls, total[1] + failures
            total[2] = total[2] or first
    return {
        name: (calls, first) for name, (calls, failures, first) in sorted(totals.items()) if calls == failures
    }


class FailingToolReport:
    """Says once per (tool, cause) on the console that a step's every call of a tool failed."""

    def __init__(self):
        self.said: set[tuple[str, str]] = set()

    def __call__(self, batch: DataProto, step: int) -> None:
        for name, (calls, first) in failing_tools(batch).items():
            if (name, first) in self.said:
                continue
            self.said.add((name, first))
            log.warning(
                "tool %s: all %d calls of step %d failed, the first with: %s (the model is told so and "
                "the run goes on; see agent_loop/num_tool_errors)",
                name,
                calls,
                step,
                first[:300],
            )
