"""verl.interactions.base: verl_lite's BaseInteraction, verl's contract (interactions/base.py)."""

from verl_lite.interactions.base import BaseInteraction

__all__ = ["BaseInteraction"]
