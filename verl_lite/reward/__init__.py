"""Rewards: rule-based scorers chosen by data_source, and the reward manager that applies them."""
