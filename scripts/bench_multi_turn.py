"""A multi-turn GRPO step against a single-turn one of the same token count, on the same machine in
one run.

    python scripts/bench_multi_turn.py                  # 256x4 random Qwen2, vLLM, 4 turns, 6 steps
    python scripts/bench_multi_turn.py --size 512x4 --turns 8 --steps 8 --rollout hf

Both runs are the CLI (2 CPU workers, GRPO, 8 prompts x n=4 per step, fp32) with
`rollout.ignore_eos=True`, so every response has exactly the tokens its run asks for:
  - single-turn: one generation of R tokens per response (`single_turn_agent`);
  - multi-turn: the `fixed_turns` loop below: `turns` generations of t tokens with a fixed inserted
    text of s tokens between them (a stand-in for a tool result: response_mask 0), t * turns +
    s * (turns - 1) = R. The rows name it by `agent_name`; it runs through the agent loop (batched
    turns: one engine call per turn, the inserted text rendered, log-probs gathered).
Same prompts, same response length, same tokens in every forward; the multi-turn step generates in
`turns` engine calls over growing prompts and trains on fewer policy tokens (the inserted ones are
masked). Printed: per-step means (the first step, warm-up, left out) of timing_s/step, gen,
update_actor, the token counts (which must be equal), and the ratio; with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopOutput

HERE = os.path.dirname(os.path.abspath(__file__))
INSERTED = "\n<tool_response>ok</tool_response>\n"  # s tokens between turns (the tiny tokenizer: 1 per char)


class FixedTurnsLoop(AgentLoopBase):
    """`turns` generations of exactly `tokens` tokens (ignore_eos), INSERTED between them."""

    async def run(self, sampling_params, **kwargs):
        turns, tokens = int(self.loop_kwargs["turns"]), int(self.loop_kwargs["tokens"])
        inserted = self.tokenizer(INSERTED, add_special_tokens=False)["input_ids"]
        prompt, ids, mask, logps = list(kwargs["prompt_ids"]), [], [], []
        for turn in range(turns):
            out = await self.server_manager.generate(
                prompt_ids=prompt + ids, sampling_params={**sampling_params, "max_tokens": tokens}
            )
            ids, mask, logps = ids + out.token_ids, mask + [1] * len(out.token_ids), logps + out.log_probs
            if turn < turns - 1:
                ids, mask, logps = ids + inserted, mask + [0] * len(inserted), logps + [0.0] * len(inserted)
        return AgentLoopOutput(prompt, ids, mask, logps, num_turns=2 * turns)


def build(root: str, size: str, turns: int, response_length: int) -> tuple[str, str, str, str, int]:
    """(model dir, single-turn data, multi-turn data, loops yaml, tokens per turn)."""
    import pandas as pd

    sys.path.insert(0, HERE)
    from bench_rollout import build_model_dir

    from verl_lite.data import arith
    from verl_lite.data.tiny_tokenizer import build_tokenizer

    model = build_model_dir(size, root)
    s = len(build_tokenizer()(INSERTED, add_special_tokens=False)["input_ids"])
    tokens, rest = divmod(response_length - s * (turns - 1), turns)
    if tokens < 1 or rest:
        raise SystemExit(
            f"--response-length {response_length} must be turns * t + {s} * (turns - 1) for some t >= 1"
        )
    rows = arith.to_rows(arith.split_pairs()["train"][:64], "train")
    single, multi = os.path.join(root, "single.parquet"), os.path.join(root, "multi.parquet")
    pd.DataFrame(rows).to_parquet(single)
    pd.DataFrame([{**r, "agent_name": "fixed_turns"} for r in rows]).to_parquet(multi)
    loops = os.path.join(root, "loops.yaml")
    with open(loops, "w") as f:
        f.write(
            f"- name: fixed_turns\n  _target_: bench_multi_turn.FixedTurnsLoop\n  turns: {turns}\n  tokens: {tokens}\n"
        )
    return model, single, multi, loops, tokens


def run(root: str, name: str, model: str, data: str, loops: str, args) -> list[dict]:
    out = os.path.join(root, name)
    arr = "actor_rollout_ref"
    cmd = [
        sys.executable, "-m", "verl_lite.main_ppo", "--config-name", "demo",
        f"hydra.run.dir={out}", f"trainer.default_local_dir={out}",
        f"{arr}.model.path={model}", f"data.train_files={data}", f"data.val_files={data}",
        "data.max_prompt_length=16", f"data.max_response_length={args.response_length}",
        "data.train_batch_size=8", f"{arr}.rollout.n=4", f"{arr}.actor.ppo_mini_batch_size=8",
        f"{arr}.actor.ppo_micro_batch_size_per_gpu=16", f"{arr}.rollout.log_prob_micro_batch_size_per_gpu=16",
        f"{arr}.rollout.name={args.rollout}", f"{arr}.rollout.ignore_eos=True",
        f"{arr}.rollout.agent.agent_loop_config_path={loops}",
        f"trainer.total_training_steps={args.steps}", "trainer.test_freq=-1", "trainer.val_before_train=False",
        "trainer.save_freq=-1", "trainer.logger=[console,file]",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{name} run failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


KEYS = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/update_actor",
    "perf/total_num_tokens",
    "response_length/mean",
)


def summary(rows: list[dict]) -> dict[str, float]:
    steps = [r for r in rows if r.get("step", 0) >= 2]  # step 1 warms up
    return {k: sum(r[k] for r in steps) / len(steps) for k in KEYS} | {
        "num_turns/mean": sum(r.get("num_turns/mean", 2) for r in steps) / len(steps),
        "agent_loop/masked_response_token_ratio": sum(
            r.get("agent_loop/masked_response_token_ratio", 0) for r in steps
        )
        / len(steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="256x4", help="HxL: a random Qwen2 of hidden H, L layers")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=225)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rollout", default="vllm", choices=("vllm", "hf"))
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench_multi_turn_")
    model, single_data, multi_data, loops, tokens = build(root, args.size, args.turns, args.response_length)
    single = summary(run(root, "single", model, single_data, loops, args))
    multi = summary(run(root, "multi", model, multi_data, loops, args))
    print(f"model {args.size}, rollout {args.rollout}, {args.steps} steps (step 1 left out), 8 prompts x 4, "
          f"response {args.response_length} tokens; multi-turn: {args.turns} turns of {tokens}, load {os.getloadavg()}")  # fmt: skip
    print(f"| metric (per step) | single-turn | multi-turn ({args.turns} turns) | multi / single |")
    print("|---|---|---|---|")
    for key in (*KEYS, "num_turns/mean", "agent_loop/masked_response_token_ratio"):
        ratio = multi[key] / single[key] if single[key] else float("nan")
        print(f"| {key} | {single[key]:.4g} | {multi[key]:.4g} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
