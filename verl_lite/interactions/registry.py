"""Interactions from a verl interaction config YAML (`multi_turn.interaction_config_path`):

    interaction:
      - name: gsm8k                                                  # optional; default: the class
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction   # name without "Interaction",
        config: {}                                                   # lower-cased, as verl derives it

verl's shipped classes resolve by name (VERL_EQUIVALENTS) or are refused naming the class; a user's
class is imported by its dotted path and must follow the contract of interactions/base.py. The
instance gets its config with `name` added, as in verl. Its constructor, as every call into an
interaction, runs under multi_turn.tool_call_timeout and may not end the process (utils/user_code.py).
"""

from __future__ import annotations

from verl_lite.interactions.base import INTERACTION_METHODS, BaseInteraction
from verl_lite.utils.class_path import load_yaml, read_entry, resolve_extension_class
from verl_lite.utils.user_code import UserCodeExit, UserCodeTimeout, call_with_deadline, file_of

TIMEOUT_KEY = "actor_rollout_ref.rollout.multi_turn.tool_call_timeout"

KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
VERL_EQUIVALENTS = {
    "verl.interactions.gsm8k_interaction.Gsm8kInteraction": "verl_lite.interactions.gsm8k:Gsm8kInteraction",
}
ENTRY_KEYS = ("name", "class_name", "config")


def default_name(class_name: str) -> str:
    """verl's default: the class's own name without a trailing "Interaction", lower-cased."""
    simple = class_name.rsplit(".", 1)[-1]
    return (simple[: -len("Interaction")] if simple.endswith("Interaction") else simple).lower()


def build_interactions(path: str, key: str = KEY, timeout_s: float | None = None) -> dict:
    """name -> interaction instance for every entry of the file; ValueError on the first problem.
    Each constructor is waited for at most `timeout_s` seconds (None: no deadline)."""
    content = load_yaml(path, key)
    items = content.get("interaction") if isinstance(content, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError(f"{key}={path!r} must hold a non-empty list `interaction:` (verl's format)")
    interactions = {}
    for i, item in enumerate(items):
        where = f"{path}: interaction[{i}]"
        class_name, config = read_entry(item, where, ENTRY_KEYS)
        name = item.get("name") or default_name(class_name)
        if name in interactions:
            raise ValueError(f"{where}: the name {name!r} is used twice; each interaction needs its own name")
        try:
            cls = resolve_extension_class(class_name, BaseInteraction, INTERACTION_METHODS, VERL_EQUIVALENTS)
            interactions[name] = call_with_deadline(
                lambda cls=cls, config={**config, "name": name}: cls(config=config),
                timeout_s,
                f"{where}: {class_name} ({file_of(cls)}).__init__",
                TIMEOUT_KEY,
            )
        except (UserCodeExit, UserCodeTimeout):
            raise
        except Exception as e:
            raise ValueError(
                f"{where}: {e if isinstance(e, ValueError) else f'{type(e).__name__}: {e}'}"
            ) from e
    return interactions


def check_interaction_config(path: str | None, key: str = KEY, timeout_s: float | None = None) -> list[str]:
    if not path:
        return []
    try:
        build_interactions(path, key, timeout_s)
    except ValueError as e:
        return [str(e)]
    return []
