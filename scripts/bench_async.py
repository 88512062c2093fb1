"""Asynchronous rollout measured on CPU, side by side in one run (issue #36 part 3).

    python scripts/bench_async.py --case straggler        # from the repository root

`--case straggler`: do trajectories wait for each other's tools? The repo's ToolAgentLoop runs 32
trajectories of 3 tool turns and an answer each through the AgentLoopRunner; in turn k (k = 1..3)
trajectory k-1's tool (tests/tools/user_tools.py's SleepTool, a blocking `def` run in its own
thread) sleeps 1.5 s, every other call 0 s. The engine is the agent-loop tests' scripted one
(tests/agent_loop/scripted.py: it returns each trajectory's scripted turns at once), so the time
measured is scheduling and the loops' own work (parsing, rendering), no model compute; the
tokenization sanity check is off (the scripted calls render differently from the template's, and
diffing 32 conversations after the rollout is not scheduling). Three runs, each `--repeats` times (the median):
  - barrier:    the per-turn barrier (hold_s=inf: an engine call once every live trajectory is
                parked), what main did before #36: every turn waits for its slow tool, ~3 x 1.5 s;
  - continuous: the scheduler's default (agent_loop/scheduler.py): a trajectory away past the hold
                no longer holds the others;
  - slowest alone: the slowest trajectory (one 1.5 s tool) run by itself: the floor.
The last line reads `straggler: R x the slowest trajectory`, R = continuous / slowest alone.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the tests' scripted engine and tool classes

N, TURNS, SLOW_S = 32, 3, 1.5
P, R = 24, 400
ANSWER = "#### 7<|im_end|>"


def call(seconds: float) -> str:
    return f'<tool_call>{{"name": "sleep", "arguments": {{"seconds": "{seconds:g}"}}}}</tool_call><|im_end|>'


def straggler_scripts(trajectories: list[int]) -> list[list[str]]:
    """Trajectory t's turns: 3 calls of the sleep tool (SLOW_S in turn t + 1, else 0), then an answer."""
    return [[call(SLOW_S if k == t else 0) for k in range(TURNS)] + [ANSWER] for t in trajectories]


def run_straggler(trajectories: list[int], hold_s: float | None, tool_config: str) -> tuple[float, int]:
    """(wall seconds of the rollout, engine calls)."""
    from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, tool_tokenizer
    from tests.helpers.configs import tiny_rollout
    from verl_lite.agent_loop.runner import AgentLoopRunner
    from verl_lite.rollout.base import SamplingParams

    tok = tool_tokenizer()
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.multi_turn.tool_config_path = tool_config
    cfg.multi_turn.max_assistant_turns = TURNS + 1
    # the scripted calls render differently from the chat template's (no newlines around them): the
    # strict check's diff of 32 conversations costs seconds after the rollout, and is no scheduling
    cfg.multi_turn.tokenization_sanity_check_mode = "disable"
    engine = ScriptedRollout(tok, straggler_scripts(trajectories))
    runner = AgentLoopRunner(engine, tok, cfg, hold_s=hold_s)
    question = [{"role": "user", "content": "3+4="}]
    batch = prompt_batch(
        tok, [question] * len(trajectories), P, agent_name=["tool_agent"] * len(trajectories)
    )
    start = time.perf_counter()
    out = runner.run(batch, SamplingParams(n=1, response_length=R))
    seconds = time.perf_counter() - start
    turns = out.non_tensor_batch["__num_turns__"].tolist()
    assert turns == [2 * TURNS + 2] * len(trajectories), (
        f"every trajectory calls its tool {TURNS} times: {turns}"
    )
    return seconds, len(engine.calls)


def straggler(repeats: int) -> None:
    from tests.helpers.agent import tool_entry, user_tool, write_yaml

    tool_config = write_yaml(
        Path(tempfile.mkdtemp(prefix="bench_async_")) / "tools.yaml",
        {"tools": [tool_entry(user_tool("SleepTool"), "sleep", {"seconds": "s"})]},
    )
    runs = {
        "barrier (hold_s=inf, before #36)": (list(range(N)), math.inf),
        "continuous (default)": (list(range(N)), None),
        "slowest trajectory alone": ([TURNS - 1], None),
    }
    results = {}
    for name, (trajectories, hold) in runs.items():
        times, calls = [], 0
        for _ in range(repeats):
            seconds, calls = run_straggler(trajectories, hold, tool_config)
            times.append(seconds)
        results[name] = (statistics.median(times), calls, times)
    alone = results["slowest trajectory alone"][0]
    print(
        f"straggler: {N} trajectories x {TURNS} tool turns, in turn k trajectory k-1's tool sleeps {SLOW_S:g} s "
        f"(others 0 s); ToolAgentLoop, scripted engine; median of {repeats}; load {os.getloadavg()}"
    )
    print("| run | seconds (median) | engine calls | x the slowest trajectory | all runs (s) |")
    print("|---|---|---|---|---|")
    for name, (median, calls, times) in results.items():
        print(
            f"| {name} | {median:.3f} | {calls} | {median / alone:.2f} | {', '.join(f'{t:.3f}' for t in times)} |"
        )
    print(f"straggler: {results['continuous (default)'][0] / alone:.2f} x the slowest trajectory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case",
        required=True,
        choices=("straggler",),
        help="straggler (the other cases of #36 part 3: not yet)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.case == "straggler":
        straggler(args.repeats)


if __name__ == "__main__":
    main()
