"""verl_lite: a small PPO/GRPO trainer with FSDP2 workers, a Ray driver and exact CPU offload."""

__version__ = "0.1.0"

# the collector paused while a driver or a worker imports torch, transformers and Ray (utils/import_gc.py)
from verl_lite.utils.import_gc import pause_for_imports as _pause_for_imports  # noqa: E402

_pause_for_imports()

# verl's import paths for a user's file written for verl, where verl is not installed (compat/)
from verl_lite.utils.verl_paths import install as _install_verl_paths  # noqa: E402

_install_verl_paths()
