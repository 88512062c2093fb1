"""verl.utils: only reward_score is provided."""
