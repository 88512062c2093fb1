"""FSDPEngine: one FSDP2-sharded model on one rank, with its optimizer, run in named phases.

The engine loads a local HF model, shards it (parallelize.py), and offers three verbs that take
tensors: `forward` over micro-batches without gradients, `train_mini_batch` (accumulate micro-batch
gradients, clip, step), and `iter_full_params` (gather full weights one tensor at a time for the
rollout). Each verb runs inside `phase(name)`, the hook where offload moves and their accounting live.

Exactness across data-parallel ranks: FSDP2 reduce-scatters gradients as a mean over ranks, while
the loss shares a caller passes are already normalised by mini-batch-wide counts (algos/loss_agg.py).
The engine therefore multiplies each share by the data-parallel size before backward, so the reduced
gradient is the gradient of the sum of shares, i.e. of the full-batch loss.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy
from torch.distributed.tensor import DTensor

from verl_lite.config.schema import FSDPConfig, ModelConfig, OptimConfig
from verl_lite.engine.optim import build_lr_scheduler, build_optimizer, num_warmup_steps
from verl_lite.engine.parallelize import apply_fsdp2, parse_dtype
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import load_causal_lm

Micro = dict[str, torch.Tensor]
LossFn = Callable[[object, Micro], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class FSDPEngine:
    def __init__(
        self,
        model_cfg: ModelConfig,
        fsdp_cfg: FSDPConfig,
        mesh: DeviceMesh,
        *,
        role: str,
        optim_cfg: OptimConfig | None = None,
        grad_clip: float | None = None,
    ):
        self.role, self.mesh, self.grad_clip = role, mesh, grad_clip
        self.device = dev.local_device()
        dtype = parse_dtype(fsdp_cfg.model_dtype, f"{role}.fsdp_config.model_dtype")
        self.module = load_causal_lm(model_cfg, dtype)
        if model_cfg.enable_gradient_checkpointing:
            self.module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.wrapped = apply_fsdp2(
            self.module,
            mesh,
            reshard_after_forward=fsdp_cfg.reshard_after_forward,
            min_num_params=fsdp_cfg.wrap_policy.min_num_params,
            mp_policy=MixedPrecisionPolicy(),
            offload_policy=OffloadPolicy(),
        )
        self.module.to(self.device)
        self.optimizer = self.lr_scheduler = None
        if optim_cfg is not None:
            self.optimizer = build_optimizer(
                self.module.parameters(), optim_cfg.lr, optim_cfg.betas, optim_cfg.weight_decay
            )
            total = optim_cfg.total_training_steps
            self.lr_scheduler = build_lr_scheduler(
                self.optimizer,
                warmup_steps=num_warmup_steps(
                    optim_cfg.lr_warmup_steps, optim_cfg.lr_warmup_steps_ratio, total
                ),
                total_steps=total,
                style=optim_cfg.warmup_style,
                min_lr_ratio=optim_cfg.min_lr_ratio,
                num_cycles=optim_cfg.num_cycles,
            )
        self.timings: dict[str, float] = {}
        self.num_skipped_steps = 0

    # --- topology ---------------------------------------------------------------------------------
    @property
    def dp_size(self) -> int:
        return self.mesh.size()

    @property
    def dp_rank(self) -> int:
        return self.mesh.get_local_rank()

    def dp_all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.to(self.device, torch.float64).clone()
        if self.dp_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.mesh.get_group())
        return tensor

    # --- phases -----------------------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str):
        """Run one phase (e.g. 'compute_log_prob', 'update'); its seconds land in `timings`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            dev.synchronize()
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def pop_timings(self) -> dict[str, float]:
        timings, self.timings = self.timings, {}
        return timings

    # --- verbs ------------------------------------------------------------------------------------
    def model_forward(self, micro: Micro):
        return self.module(
            input_ids=micro["input_ids"].to(self.device),
            attention_mask=micro["attention_mask"].to(self.device),
            position_ids=micro["position_ids"].to(self.device),
            use_cache=False,
        )

    @torch.no_grad()
    def forward(self, micro_batches: list[Micro], fn: Callable[[object, Micro], object]) -> list:
        """fn(model_output, micro) for each micro-batch, without gradients."""
        with self.phase("forward"):
            self.module.eval()
            return [fn(self.model_forward(m), m) for m in micro_batches]

    def train_mini_batch(self, micro_batches: list[Micro], loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over a mini-batch given as micro-batches.

        loss_fn returns this micro-batch's *share* of the mini-batch loss and metric shares (values
        already divided by mini-batch-wide counts), so sums over micro-batches and ranks are the
        mini-batch's values whatever the split. Returns those sums plus grad_norm and lr.
        """
        assert self.optimizer is not None, f"{self.role} engine was built without an optimizer"
        with self.phase("update"):
            self.module.train()
            totals: dict[str, torch.Tensor] = {}
            for micro in micro_batches:
                output = self.model_forward(micro)
                loss, shares = loss_fn(output, micro)
                (loss * self.dp_size).backward()
                for k, v in shares.items():
                    totals[k] = totals.get(k, 0.0) + v.detach().double()
            grad_norm = self._clip_and_step()
            metrics = self._reduce_metrics(totals)
        metrics["grad_norm"] = grad_norm
        metrics["lr"] = self.lr_scheduler.get_last_lr()[0]
        return metrics

    def end_training_step(self) -> None:
        """Advance the LR schedule: it counts training steps, as verl's does, not optimizer steps."""
        self.lr_scheduler.step()

    def _clip_and_step(self) -> float:
        params = [p for p in self.module.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=self.grad_clip if self.grad_clip else math.inf)
        norm = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
        if math.isfinite(norm):
            self.optimizer.step()
        else:  # a non-finite norm would poison the weights and Adam's moments: skip, count
            self.num_skipped_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _reduce_metrics(self, totals: dict[str, torch.Tensor]) -> dict[str, float]:
        if not totals:
            return {}
        keys = sorted(totals)
        summed = self.dp_all_reduce_sum(torch.stack([torch.as_tensor(totals[k]) for k in keys]))
        return {k: float(v) for k, v in zip(keys, summed.tolist())}

    def iter_full_params(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) one parameter at a time; every rank must iterate together."""
        with self.phase("gather_weights"):
            for name, param in self.module.named_parameters():
                full = param.full_tensor() if isinstance(param, DTensor) else param
                yield name, full.detach()

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())
