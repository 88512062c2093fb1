"""verl.experimental: only agent_loop is provided."""
