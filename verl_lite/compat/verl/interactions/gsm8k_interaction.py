"""verl.interactions.gsm8k_interaction: verl_lite's GSM8K interaction (interactions/gsm8k.py)."""

from verl_lite.interactions.gsm8k import Gsm8kInteraction

__all__ = ["Gsm8kInteraction"]
