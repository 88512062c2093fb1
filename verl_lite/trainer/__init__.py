"""The driver side: the PPO trainer's step as named phases, metrics and tracking."""
