"""verl's spellings of values, turned into the schema's types after composition.

A list-valued key may be given as one name (`trainer.logger=console`, verl's quickstart) or as a
string holding a list (`"[console, wandb]"`, e.g. from a YAML file or quoting); verl accepts both.
A section verl lets be null to turn it off (`algorithm.rollout_correction=null`) becomes its defaults,
which are off, so the code past here never sees a missing section.
"""

from __future__ import annotations

import yaml

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.schema_trainer import RolloutCorrectionConfig

LIST_KEYS = ("trainer.logger", "data.train_files", "data.val_files")


def as_list(value, key: str, problems: list[str]):
    """A list of strings from a list, one string, or a string holding a list; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                problems.append(f"{key}={value!r} is not a list; write it as [a, b]")
                return value
        else:
            return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        problems.append(f"{key}={value!r} must be a name or a list of names")
        return value
    return list(value)


def apply_spellings(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    for key in LIST_KEYS:
        section, name = key.split(".")
        node = getattr(cfg, section)
        setattr(node, name, as_list(getattr(node, name), key, problems))
    if cfg.algorithm.rollout_correction is None:  # verl: a null section is no rollout correction
        cfg.algorithm.rollout_correction = RolloutCorrectionConfig()
    return problems
