"""verl.utils.rollout_trace: `rollout_trace_op`, the decorator verl's agent loops put on `run`.

verl's decorator records the call with the configured trace backend (weave, mlflow) and otherwise
calls straight through; verl_lite has no trace backend, so it calls straight through (what verl does
with `actor_rollout_ref.rollout.trace.backend` unset). Whether the trace keys are accepted is the
config's concern (docs/multi_turn.md), not this decorator's.
"""

import functools
import inspect


def rollout_trace_op(func):
    @functools.wraps(func)
    async def async_wrapper(self, *args, **kwargs):
        return await func(self, *args, **kwargs)

    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        return func(self, *args, **kwargs)

    return async_wrapper if inspect.iscoroutinefunction(func) else wrapper


__all__ = ["rollout_trace_op"]
