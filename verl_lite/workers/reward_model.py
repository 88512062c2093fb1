"""The reward-model worker: a scalar reward model on an FSDP2 engine without an optimizer.

The model is a sequence classifier with one output (AutoModelForSequenceClassification,
num_labels=1), loaded with a per-token head (utils/hf_model.py) so the score can be read at any
position: here the last real token of [prompt | response], i.e. the pooled score the classifier
itself would give. That score goes on the response's last valid token of a (bs, R) tensor,
`rm_scores`, the layout rule rewards use; an empty response gets no reward. The reward model reads
the actor's token ids as they are, so it must share the actor's tokenizer (validated at start-up).
"""

from __future__ import annotations

import torch

from verl_lite.algos.masked import last_policy_token
from verl_lite.config.schema import RewardModelConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.protocol import DataProto
from verl_lite.single_controller import Dispatch, Worker, register
from verl_lite.utils import device as dev

RM_INPUTS = ("input_ids", "attention_mask", "position_ids", "response_mask")


def last_token_scores(output, micro) -> torch.Tensor:
    """(bs, R'): the score at each sequence's last real token, placed on its last sampled token."""
    scores = output.logits[..., 0].float()  # (bs, S')
    mask = micro["attention_mask"]
    positions = torch.arange(mask.shape[1], device=scores.device)
    last = (positions * mask).argmax(-1)  # index of the last real token
    seq_score = scores.gather(1, last.unsqueeze(1)).squeeze(1)  # (bs,)
    response_mask = micro["response_mask"]
    lengths = response_mask.sum(-1).long()
    out = torch.zeros(response_mask.shape, dtype=torch.float32, device=scores.device)
    rows = torch.nonzero(lengths > 0).squeeze(1)
    out[rows, last_policy_token(response_mask)[rows]] = seq_score[rows]  # the last sampled token
    return out


def compute_rm_scores(engine: FSDPEngine, tensors: dict, micro_size: int, max_token_len: int | None):
    """(bs, R) rm_scores in the rows' original order."""
    inputs = {k: tensors[k] for k in RM_INPUTS}
    return engine.forward(
        inputs,
        last_token_scores,
        micro_size=micro_size,
        max_token_len=max_token_len,
        phase="compute_rm_score",
    )


class RewardModelWorker(Worker):
    def __init__(self, config: RewardModelConfig, dist_timeout_s: int = 600):
        super().__init__()
        self.config, self.dist_timeout_s = config, dist_timeout_s

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        self.init_distributed(self.dist_timeout_s)
        m = self.config.model
        layout = build_layout(dev.device_type(), m.fsdp_config.fsdp_size)
        self.engine = FSDPEngine(m, m.fsdp_config, layout, role="reward", model_kind="reward")
        return {"num_params": self.engine.num_params()}

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        c = self.config
        max_tokens = c.forward_max_token_len_per_gpu if c.use_dynamic_bsz else None
        scores = compute_rm_scores(self.engine, data.batch, c.micro_batch_size_per_gpu, max_tokens)
        metrics, _ = self.engine.pop_metrics()
        return DataProto.from_dict({"rm_scores": scores}, meta_info={"metrics": metrics})
