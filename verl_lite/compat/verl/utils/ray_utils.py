"""verl.utils.ray_utils: `get_event_loop`, which verl 0.9.0's tool_parser.py and agent_loop.py import
(a parser or loop copied from verl imports it too). verl's other Ray helpers are not provided."""

import asyncio


def get_event_loop() -> asyncio.AbstractEventLoop:
    """verl's: the current event loop, or a new one set as current when this thread has none."""
    try:
        return asyncio.get_event_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        return loop


__all__ = ["get_event_loop"]
