"""verl.utils: reward_score, profiler (simple_timer), rollout_trace (rollout_trace_op) and ray_utils
(get_event_loop) are provided."""
