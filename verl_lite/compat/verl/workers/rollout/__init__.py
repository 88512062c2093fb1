"""verl.workers.rollout: only replica (TokenOutput) is provided."""
