"""ConfigError: every problem found in a config, each one line naming the key, the value and the fix."""

from __future__ import annotations


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        if len(problems) == 1:  # one line
            super().__init__(f"invalid input: {problems[0]}")
        else:
            super().__init__("invalid input:\n  - " + "\n  - ".join(problems))
