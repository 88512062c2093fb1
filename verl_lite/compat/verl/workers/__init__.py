"""verl.workers: only rollout.replica (TokenOutput) is provided."""
