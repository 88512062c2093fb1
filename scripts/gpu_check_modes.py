"""The rows of scripts/gpu_check.py: one Mode per lever or offload mode the device check runs.

A Mode says what to switch on (FSDP, model or actor config fields), what the planner should assume
for it (its offload mode and EngineSetup fields), which models it applies to, an optional device
memory cap (torch.cuda.set_per_process_memory_fraction: a smaller card) and an optional hook on the
built module (e.g. applying adapters). Add a row with register_mode() at module level here, so that
the child process running one row (`gpu_check.py --row MODEL:MODE`) finds it too. Imports nothing
beyond the standard library: gpu_check.py runs on a bare GPU machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mode:
    name: str
    plan_mode: str  # the memory model's offload mode (planner/engine_setup.MODES)
    fsdp: dict = field(default_factory=dict)  # fsdp_config fields
    model: dict = field(default_factory=dict)  # model config fields
    actor: dict = field(default_factory=dict)  # actor config fields
    setup: dict = field(default_factory=dict)  # EngineSetup fields the planner needs for this lever
    models: tuple[str, ...] = ()  # only these models (empty: every model)
    memory_cap_gb: float | None = None  # cap the device at this much (a smaller card)
    prepare: Callable | None = None  # module -> module, before sharding
    requires: tuple[str, ...] = ()  # packages the row imports beyond torch and transformers


MODES: dict[str, Mode] = {}


def register_mode(mode: Mode) -> None:
    """Add a row (after the ones registered so far; rows print in registration order)."""
    if mode.name in MODES:
        raise ValueError(f"gpu_check mode {mode.name!r} registered twice")
    MODES[mode.name] = mode


register_mode(Mode("none", "none"))
register_mode(
    Mode(
        "param_optimizer_offload",
        "param_optimizer_offload",
        {"param_offload": True, "optimizer_offload": True},
    )
)
register_mode(Mode("offload_policy", "offload_policy", {"offload_policy": True}))
# the memory levers (issue 13) that run on one device: fused log-probs and activation offload
LEVER_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")
register_mode(
    Mode(
        "fused_logprobs",
        "none",
        model={"use_fused_kernels": True},
        setup={"fused": True},
        models=LEVER_MODELS,
    )
)
register_mode(
    Mode(
        "activation_offload",
        "none",
        model={"enable_activation_offload": True},
        setup={"activation_offload": True},
        models=LEVER_MODELS,
    )
)

# LoRA (docs/lora.md): rank 8 on every linear of a 7B shape under a 24 GiB cap, in each offload mode;
# the planner says which fit (the ones that do not are not run), and the one it picks must complete.
# On "tiny" (the dry run) the offload_policy row runs too, so the LoRA path through this script is tested.
LORA_KEYS = {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"}
for _label, _mode, _fsdp in (
    ("none", "none", {}),
    ("param_opt", "param_optimizer_offload", {"param_offload": True, "optimizer_offload": True}),
    ("policy", "offload_policy", {"offload_policy": True}),
):
    register_mode(
        Mode(
            f"lora8_{_label}_24gb",
            _mode,
            _fsdp,
            model=LORA_KEYS,
            setup={"lora_rank": LORA_KEYS["lora_rank"]},
            models=("qwen2.5-7b", "tiny") if _mode == "offload_policy" else ("qwen2.5-7b",),
            memory_cap_gb=24.0,
            requires=("peft",),
        )
    )


def row_order(models: list[str]) -> list[tuple[str, Mode]]:
    """(model, mode) in the order the check runs them: for each model (largest first, as given), its
    param+optimizer offload and offload_policy rows first (the seed's memory table: what a 7B on one
    GPU needs), then its other rows in registration order."""
    first = ("param_optimizer_offload", "offload_policy")
    out = []
    for model in models:
        modes = [m for m in MODES.values() if not m.models or model in m.models]
        out += [(model, m) for m in sorted(modes, key=lambda m: m.name not in first)]
    return out


# --- what each item of issue 21 has in the check (the plan `gpu_check.sh --dry` prints, in order) ---
@dataclass(frozen=True)
class Check:
    item: int
    what: str
    part: str  # caps, tests, rows, e2e
    where: str
    seconds: float  # the time it is planned to take on the lent machine


GPU_TESTS = (  # the gpu-marked tests the check runs, with the seconds planned for each file
    ("tests/engine/test_offload_gpu.py", 70.0),
    ("tests/engine/test_activation_offload_gpu.py", 15.0),
    ("tests/engine/test_attention_gpu.py", 60.0),
    ("tests/workers/test_rollout_corr_gpu.py", 20.0),
)
CHECKS = (
    Check(
        1,
        "the reference in bf16",
        "tests",
        "test_offload_gpu.py::test_the_reference_keeps_bf16_weights_on_the_device",
        0,
    ),
    Check(2, "packed attention without an (S, S) mask", "tests", "test_attention_gpu.py", 0),
    Check(3, "torch >= 2.11: the weight gather's collective", "caps", "weight gather collective line", 10.0),
    Check(4, "host memory planned and checked", "rows", "each row's planner host GiB and the host gate", 0),
    Check(
        5,
        "vLLM TP under Ray: custom all-reduce off, TP=2",
        "caps",
        "vLLM TP engine args line; e2e needs vLLM",
        0,
    ),
    Check(
        6,
        "manual offload overlaps its copies",
        "rows",
        "7B param+optimizer offload and offload_policy rows, tok/s vs none",
        0,
    ),
    Check(
        7,
        "weights version; HF decode on the device; one wait per flush",
        "tests",
        "test_rollout_corr_gpu.py, test_activation_offload_gpu.py; the syncs: e2e",
        0,
    ),
    Check(
        8, "rollout correction: a bf16 rollout against the fp32 actor", "tests", "test_rollout_corr_gpu.py", 0
    ),
    Check(9, "the check fits one lent machine", "all", "this plan", 0),
)
