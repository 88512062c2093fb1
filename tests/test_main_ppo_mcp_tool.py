"""An MCP tool through the real CLI, unchanged from verl's MCP tool config: the tool demo
(conf/tool_demo.yaml) with its calculator served by a stdio MCP server (tests/helpers/mcp_server.py)
instead of the native tool, two GRPO steps on two CPU workers. The server logs each call, so the
test sees the model's calls reach it through MCP, from one server process per worker."""

import math

import pytest

from tests.helpers.mcp_server import calls, write_configs
from tests.test_main_ppo import read_metrics, run_cli
from tests.test_main_ppo_tool_demo import SMALL

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
pytestmark = pytest.mark.slow


def test_an_mcp_tool_trains_two_steps_through_verls_mcp_config(tmp_path, tool_demo_assets):
    config, log = write_configs(tmp_path, selected=["calc"])  # verl's class, servers JSON and `mcp:` block
    proc = run_cli(
        tmp_path,
        *[o for o in SMALL if not o.startswith(("trainer.test_freq", "data.val_max_samples"))],
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",  # the checks read the training steps; validation cost 16 s
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={config}",
        config_name="tool_demo",
        join=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows][-2:] == [1, 2]
    for row in rows[-2:]:
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        assert row["tool_call_counts/mean"] > 0 and row["agent_loop/num_tool_timeouts"] == 0, row
        assert row["agent_loop/num_tool_errors"] <= row["agent_loop/num_malformed_tool_calls"], row
    served = calls(log)
    made = [r for r in served if r.get("tool")]
    assert made and {r["tool"] for r in made} == {"calc"}, served[:5]
    assert any(r["arguments"]["expression"].count("*") == 1 for r in made), made[:5]  # the demo's question
    # the calls came from the workers' sessions, each a server process started once per worker
    # (the other starts are the tool listings: the start-up check, and each worker's build)
    session_pids = {r["pid"] for r in made}
    assert len(session_pids) == 2, session_pids  # two workers (213 calls by 2 processes, 6 starts, here)
    assert "Traceback" not in proc.stderr and "Task was destroyed" not in proc.stderr
