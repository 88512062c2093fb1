"""The console's step line (the headline metrics) and full block (every metric under its full name, in
its group, within the width)."""

from verl_lite.trainer.console_format import fmt_value, format_line, format_step, group_of

METRICS = {
    "actor/pg_loss": 0.5,
    "actor/grad_norm": 1.25,
    "critic/score/mean": 0.25,
    "critic/vf_loss": 0.125,
    "response_length/mean": 3.5,
    "rollout/actor_logprob_abs_diff_max": 8.3e-06,
    "timing_s/step": 0.2164,
    "timing_s/actor/update": 0.12,
    "perf/throughput": 1266.08,
    "perf/max_memory_allocated_gb": 1.5,
    "perf/offload/h2d_gb": 0.0,
    "val-core/verl_lite/arith/reward/mean@1": 0.75,
    "training/global_step": 3,
    "custom/thing": float("nan"),
}


def test_groups_by_verl_prefix():
    expected = {
        "actor/pg_loss": "actor",
        "critic/vf_loss": "critic",
        "critic/score/mean": "critic",
        "response_length/mean": "rollout",
        "global_seqlen/min": "rollout",
        "rollout/actor_logprob_abs_diff_max": "rollout",
        "timing_s/actor/update": "timing",
        "perf/throughput": "perf",
        "perf/update_weights_gb": "perf",
        "perf/max_memory_allocated_gb": "offload/memory",
        "perf/cpu_memory_rss_gb": "offload/memory",
        "perf/offload/h2d_gb": "offload/memory",
        "val-core/x/reward/mean@1": "val",
        "training/epoch": "training",
        "custom/thing": "other",
    }
    assert {k: group_of(k) for k in expected} == expected


def test_block_holds_every_metric_once_in_group_order_within_the_width():
    text = format_step(METRICS, step=3, total_steps=10, width=80)
    lines = text.splitlines()
    assert lines[0] == format_line(METRICS, 3, 10), "the block sits under the step's line"
    assert all(len(line) <= 80 for line in lines[1:]), text
    for key, value in METRICS.items():
        assert text.count(f"{key} {fmt_value(value)}") == 1, key
    labels = [line.split()[0] for line in lines[1:] if line[2] != " "]
    assert labels == [
        "val",
        "actor",
        "critic",
        "rollout",
        "timing",
        "offload/memory",
        "perf",
        "training",
        "other",
    ]
    assert "actor/grad_norm 1.25" in lines[2] and "actor/pg_loss 0.5" in lines[2], "sorted, in columns"


def test_narrow_console_puts_one_metric_per_line():
    text = format_step({"actor/a": 1.0, "actor/b": 2.0}, step=1, total_steps=1, width=10)
    assert text.splitlines()[1:] == ["  actor           actor/a 1", "                  actor/b 2"]


def test_step_line_holds_the_headline_in_order_and_skips_what_the_run_lacks():
    line = format_line(METRICS | {"actor/ppo_kl": 0.002, "perf/cpu_memory_rss_gb": 1.0}, 3, 10)
    assert line == (
        "step 3/10 | score 0.25 | pg_loss 0.5 | kl 0.002 | grad_norm 1.25 | vf_loss 0.125"
        " | resp_len 3.5 | step_s 0.2164 | mem_gb 1.5"
    ), "device peak before host RSS"
    with_kl_loss = format_line({"actor/ppo_kl": 0.002, "actor/kl_loss": 0.03, "critic/kl": 0.1}, 1, 1)
    assert with_kl_loss == "step 1/1 | kl 0.03", "the KL loss is the kl shown when the run has it"
    assert format_line({"perf/cpu_memory_rss_gb": 1.0, "custom/x": 2.0}, 4, 9) == "step 4/9 | mem_gb 1"


def test_values():
    assert [fmt_value(v) for v in (0.123456, 3, 1e-7, float("inf"), True)] == [
        "0.1235",
        "3",
        "1e-07",
        "inf",
        "True",
    ]
