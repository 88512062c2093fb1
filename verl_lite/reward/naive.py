"""The naive reward manager: decode each response, score it by rule, reward its last token.

verl's `naive` manager: the score of a response is placed on its last valid token of a
(batch, response_len) tensor, which the advantage estimators sum. A scorer that raises or returns
something that is not a finite number stops the run with the offending sample named: a silently
wrong reward would poison training without a trace.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections import defaultdict
from collections.abc import Callable

import torch

from verl_lite.protocol import DataProto

log = logging.getLogger(__name__)


class NaiveRewardManager:
    def __init__(
        self, tokenizer, compute_score: Callable, reward_fn_key: str = "data_source", num_examine: int = 0
    ):
        self.tokenizer, self.compute_score = tokenizer, compute_score
        self.reward_fn_key, self.num_examine = reward_fn_key, num_examine

    def __call__(self, data: DataProto) -> tuple[torch.Tensor, dict[str, list]]:
        responses = data.batch["responses"]  # (bs, T)
        response_mask = data.batch["response_mask"]
        lengths = response_mask.sum(-1).long()
        rewards = torch.zeros_like(responses, dtype=torch.float32)
        extra: dict[str, list] = defaultdict(list)
        shown: dict[str, int] = defaultdict(int)
        for i in range(len(data)):
            n = int(lengths[i])
            text = self.tokenizer.decode(responses[i, :n].tolist(), skip_special_tokens=True)
            source = data.non_tensor_batch[self.reward_fn_key][i]
            truth = data.non_tensor_batch["reward_model"][i].get("ground_truth")
            info = data.non_tensor_batch["extra_info"][i] if "extra_info" in data.non_tensor_batch else None
            score, details = self._score(source, text, truth, info, self._where(data, i, source))
            score = self.shape(score, n, details)
            for key, value in details.items():
                extra[key].append(value)
            if n > 0:
                rewards[i, n - 1] = score
            if shown[source] < self.num_examine:
                shown[source] += 1
                # examples for the run's log file (utils/logs.py); log_val_generations puts samples on the console
                log.debug("[%s] response=%r ground_truth=%r score=%s", source, text, truth, score)
        return rewards, dict(extra)

    def shape(self, score: float, length: int, details: dict) -> float:
        """The reward of a response from its score and valid length; subclasses add terms (dapo)."""
        return score

    @staticmethod
    def _where(data: DataProto, i: int, source) -> str:
        """Where a sample came from: its batch row, its dataset index and its data_source."""
        index = data.non_tensor_batch["index"][i] if "index" in data.non_tensor_batch else None
        return f"batch row {i} (dataset index {index}, data_source={source!r})"

    def _score(self, source, text, truth, info, where: str) -> tuple[float, dict]:
        try:
            result = self.compute_score(source, text, truth, info)
        except Exception as e:
            raise RuntimeError(
                f"reward function failed on {where}, response={text!r}, ground_truth={truth!r}: {e!r}"
            ) from e
        value = result.get("score") if isinstance(result, dict) else result
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError(
                f"reward function returned {result!r} for {where}, response={text!r}; "
                "it must return a finite number or a dict with a numeric 'score'"
            )
        details = {k: v for k, v in result.items() if k != "score"} if isinstance(result, dict) else {}
        return float(value), details
