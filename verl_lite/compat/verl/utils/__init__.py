"""verl.utils: reward_score, profiler (simple_timer) and rollout_trace (rollout_trace_op) are provided."""
