"""What the planner is asked, as one object each: the run and its devices (`Request`) and the actor's
candidate (`Choice`). Every memory model takes them (each role's engine, each phase, the rollout
backend's: rollout/memory.py), so a new question adds a field here, not a parameter to every call."""

from __future__ import annotations

from dataclasses import dataclass

from verl_lite.config.common import trainer_mode
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.model_shape import ModelShape

GB = 1024**3
MB = 1024**2
HEADROOM = 0.9  # a plan fits when its peak is at most this share of the device (trainer/health.py)
LEVERS = ("fused", "activation_offload")  # what the planner may switch on for the actor


@dataclass(frozen=True)
class Request:
    """A run (its normalised config; `shape`: the actor's model) on `world` devices of `device_gb`,
    on nodes of `host_gb` of host memory (None: reported, not checked). `accelerator`: plan for GPUs
    (pinned host copies, vLLM's sleep mode); None: unless trainer.device=cpu. `levers`: those the
    recommendation may switch on (None: those the config accepts, recommend.proposable_levers)."""

    cfg: PPOTrainerConfig
    shape: ModelShape
    world: int
    device_gb: float
    host_gb: float | None = None
    accelerator: bool | None = None
    levers: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.accelerator is None:
            object.__setattr__(self, "accelerator", self.cfg.trainer.device != "cpu")

    @property
    def in_flight_batches(self) -> int:
        """Batches of prompts one generate call may hold: 1, or under verl 0.9's async modes the step's
        own and the warm-up batches (their rounds generate every unfinished response at once)."""
        mode = trainer_mode(self.cfg)
        if mode == "sync":
            return 1
        return 1 + getattr(self.cfg.trainer.v1, mode).num_warmup_batches

    @property
    def device_bytes(self) -> int:
        return int(self.device_gb * GB)


@dataclass(frozen=True)
class Choice:
    """The actor's offload mode (engine_setup.MODES), micro-batch (0: dynamic batching) and the levers
    (LEVERS) switched on beside those configured."""

    mode: str = "none"
    micro: int = 1
    levers: tuple[str, ...] = ()
