"""FSDPEngine: one FSDP2-sharded model on one rank, with its optimizer, run in named phases.

The engine loads a local HF model, shards it (parallelize.py), and offers verbs that take tensors:
`forward` over micro-batches without gradients, `train_mini_batch` (accumulate micro-batch
gradients, clip, step), and `iter_full_params` (gather full weights one tensor at a time for the
rollout). Each verb runs inside `phase(name)`, where the offload mode (offload.py) moves params in
and out and every move is counted.

Exactness across data-parallel ranks: FSDP2 reduce-scatters gradients as a mean over ranks, while
the loss shares a caller passes are already normalised by mini-batch-wide counts (algos/loss_agg.py).
The engine therefore multiplies each share by the data-parallel size before backward, so the reduced
gradient is the gradient of the sum of shares, i.e. of the full-batch loss. With
`reduce_scatter_every_micro_batch=False` gradients accumulate unsharded and are reduced once, on the
last micro-batch (`set_requires_gradient_sync`); the sum is the same.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from verl_lite.config.schema import FSDPConfig, ModelConfig, OptimConfig
from verl_lite.engine import micro_batch
from verl_lite.engine.lora import apply_lora
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.offload import TransferLog, build_offload
from verl_lite.engine.optim import build_lr_scheduler, build_optimizer, num_warmup_steps
from verl_lite.engine.packing import packed_forward
from verl_lite.engine.parallelize import apply_fsdp2, build_mp_policy, parse_dtype
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import MODEL_LOADERS

# FSDP2 warns when a wrapped model returns a view (the token-classification heads of the critic and
# reward model do): in-place ops on it would skip the pre-backward hook. Callers here only read
# model outputs out of place (slices, .float(), gathers), so the warning is noise on every update.
warnings.filterwarnings(
    "ignore", message=r"FSDP2-wrapped module .* returned a view tensor", category=UserWarning
)

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
        module: torch.nn.Module | None = None,
        model_kind: str = "causal_lm",
    ):
        """`module`: an already built model to shard instead of loading `model_cfg.path` (the
        benchmark's randomly initialised real shapes, which are never written to disk).
        `model_kind`: causal_lm (actor, ref), value (critic) or reward (reward model); see
        utils/hf_model.py. `model_cfg.use_remove_padding` packs every forward (engine/packing.py)."""
        self.role, self.mesh, self.grad_clip = role, mesh, grad_clip
        self.use_remove_padding = model_cfg.use_remove_padding
        self.device = dev.local_device()
        self.reduce_every_micro = fsdp_cfg.reduce_scatter_every_micro_batch
        self.transfers = TransferLog()
        self.offload = build_offload(fsdp_cfg, self.device, self.transfers)
        self.module = (
            module
            if module is not None
            else MODEL_LOADERS[model_kind](
                model_cfg, parse_dtype(fsdp_cfg.model_dtype, f"{role}.fsdp_config.model_dtype")
            )
        )
        if model_cfg.enable_gradient_checkpointing:
            self.module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.lora_config = None  # LoRA (engine/lora.py): adapters on the frozen model, in the same FSDP units
        lora = LoraSpec.of(model_cfg, model_kind)
        if lora is not None:
            self.module = apply_lora(self.module, lora)
            self.lora_config = self.module.peft_config["default"]
        # what never changes: not trained, not in checkpoints' model/, not re-sent to the rollout
        # (tied weights under every name they have, e.g. lm_head.weight beside embed_tokens.weight)
        self.frozen_names = frozenset(
            n for n, p in self.module.named_parameters(remove_duplicate=False) if not p.requires_grad
        )
        mp = fsdp_cfg.mixed_precision
        self.wrapped = apply_fsdp2(
            self.module,
            mesh,
            reshard_after_forward=fsdp_cfg.reshard_after_forward,
            min_num_params=fsdp_cfg.wrap_policy.min_num_params,
            mp_policy=build_mp_policy(mp.param_dtype, mp.reduce_dtype, f"{role}.fsdp_config.mixed_precision"),
            offload_policy=self.offload.fsdp_policy(),
            forward_prefetch=fsdp_cfg.forward_prefetch,
        )
        self.offload.place(self.module)
        buffer_dtype = parse_dtype(mp.buffer_dtype, f"{role}.fsdp_config.mixed_precision.buffer_dtype")
        for sub in self.module.modules():
            for name, buf in sub._buffers.items():
                if buf is not None and buf.is_floating_point():
                    sub._buffers[name] = buf.to(buffer_dtype)
        self.optimizer = self.lr_scheduler = None
        if optim_cfg is not None:
            self.optimizer = build_optimizer(
                [p for p in self.module.parameters() if p.requires_grad],
                optim_cfg.lr,
                optim_cfg.betas,
                optim_cfg.weight_decay,
            )
            total = optim_cfg.total_training_steps
            self.lr_scheduler = build_lr_scheduler(
                self.optimizer,
                warmup_steps=num_warmup_steps(
                    optim_cfg.lr_warmup_steps, optim_cfg.lr_warmup_steps_ratio, total
                ),
                total_steps=total,
                style=optim_cfg.lr_scheduler_type,
                min_lr_ratio=optim_cfg.min_lr_ratio,
                num_cycles=optim_cfg.num_cycles,
            )
        self.offload.attach(self.module, self.optimizer, self.wrapped)
        self.timings: dict[str, float] = {}
        self.num_skipped_steps = 0
        self._phase: str | None = None

    # --- topology ---------------------------------------------------------------------------------
    @property
    def dp_size(self) -> int:
        return self.mesh.size()

    @property
    def dp_rank(self) -> int:
        return self.mesh.get_local_rank()

    def _all_reduce(self, tensor: torch.Tensor, op) -> torch.Tensor:
        """A small host tensor reduced over ranks (gloo carries host tensors on every machine)."""
        tensor = tensor.detach().to("cpu", torch.float64).clone()
        if self.dp_size > 1:
            dist.all_reduce(tensor, op=op, group=self.mesh.get_group())
        return tensor

    def dp_all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(tensor, dist.ReduceOp.SUM)

    def micro_batches(
        self, attention_mask: torch.Tensor, micro_size: int, max_token_len: int | None
    ) -> list[list[int]]:
        """Row groups for one batch on this rank: `micro_size` rows each, or, with a token budget,
        as many balanced groups as the most demanding rank needs (all ranks run the same count)."""
        if max_token_len is None:
            return micro_batch.fixed_groups(attention_mask.shape[0], micro_size)
        counts = micro_batch.token_counts(attention_mask)
        need = micro_batch.count_token_groups(counts, max_token_len)
        num_groups = int(self._all_reduce(torch.tensor([need]), dist.ReduceOp.MAX).item())
        return micro_batch.balanced_groups(counts, num_groups)

    # --- phases -----------------------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str):
        """Run one phase (e.g. 'compute_log_prob', 'update'): the offload mode brings the params in
        and takes them out; seconds land in `timings`. A nested phase joins the outer one."""
        if self._phase is not None:
            yield
            return
        self._phase = name
        start = time.perf_counter()
        self.offload.enter_phase(name)
        try:
            yield
        finally:
            self.offload.exit_phase(name)
            dev.synchronize()
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start
            self._phase = None

    def pop_metrics(self) -> tuple[dict[str, float], dict]:
        """(seconds per phase and skipped steps, offload moves per phase) since the last call."""
        out = {f"timing_s/{self.role}/{k}": v for k, v in self.timings.items()}
        if self.optimizer is not None:
            out[f"{self.role}/nonfinite_grad_skips"] = self.num_skipped_steps
        self.timings, self.num_skipped_steps = {}, 0
        return out, self.transfers.pop()

    # --- verbs ------------------------------------------------------------------------------------
    def model_forward(self, micro: Micro):
        self.offload.on_forward(training=torch.is_grad_enabled())
        if self.use_remove_padding:
            return packed_forward(
                self.module,
                micro["input_ids"].to(self.device),
                micro["attention_mask"].to(self.device),
                micro["position_ids"].to(self.device),
            )
        return self.module(
            input_ids=micro["input_ids"].to(self.device),
            attention_mask=micro["attention_mask"].to(self.device),
            position_ids=micro["position_ids"].to(self.device),
            use_cache=False,
        )

    @torch.no_grad()
    def forward(
        self, micro_batches: list[Micro], fn: Callable[[object, Micro], object], phase: str = "forward"
    ) -> list:
        """fn(model_output, micro) for each micro-batch, without gradients."""
        with self.phase(phase):
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
            last = len(micro_batches) - 1
            for i, micro in enumerate(micro_batches):
                sync = self.reduce_every_micro or i == last
                self.module.set_requires_gradient_sync(sync)
                loss, shares = loss_fn(self.model_forward(micro), micro)
                (loss * self.dp_size).backward()
                if sync:
                    self.offload.on_grad_reduce()
                for k, v in shares.items():
                    totals[k] = totals.get(k, 0.0) + v.detach().double().cpu()
            grad_norm = self._clip_and_step()
            metrics = self._reduce_metrics(totals)
        metrics["grad_norm"] = grad_norm
        metrics["lr"] = self.lr_scheduler.get_last_lr()[0]
        return metrics

    def _clip_and_step(self) -> float:
        params = [p for p in self.module.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=self.grad_clip if self.grad_clip else math.inf)
        norm = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
        if math.isfinite(norm):
            self.offload.step(self._phase or "update")
        else:  # a non-finite norm would poison the weights and Adam's moments: skip, count
            self.num_skipped_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def end_training_step(self) -> None:
        """Advance the LR schedule: it counts training steps, as verl's does, not optimizer steps."""
        self.lr_scheduler.step()

    def _reduce_metrics(self, totals: dict[str, torch.Tensor]) -> dict[str, float]:
        if not totals:
            return {}
        keys = sorted(totals)
        summed = self.dp_all_reduce_sum(torch.stack([torch.as_tensor(totals[k]) for k in keys]))
        return {k: float(v) for k, v in zip(keys, summed.tolist())}

    @contextmanager
    def adapters_disabled(self):
        """The frozen base model: LoRA's reference policy, without a second copy of the weights."""
        if self.lora_config is None:
            raise RuntimeError(f"{self.role} engine has no LoRA adapters to disable")
        with self.module.disable_adapter():
            yield

    def iter_full_params(
        self, select: Callable[[str], bool] | None = None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) one parameter at a time, those whose name `select` accepts (all by
        default); every rank must iterate together."""
        with self.phase("gather_weights"):
            for name, param in self.module.named_parameters():
                if select is not None and not select(name):
                    continue
                if isinstance(param, DTensor):
                    local = param.to_local()
                    if (
                        local.device != self.device
                    ):  # host-resident shard (offload_policy): gather on the device
                        param = DTensor.from_local(
                            local.to(self.device),
                            param.device_mesh,
                            param.placements,
                            run_check=False,
                            shape=param.shape,
                            stride=param.stride(),
                        )
                    yield name, param.full_tensor().detach()
                else:
                    yield name, param.detach().to(self.device)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def num_trainable_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)
