"""TRL's side of scripts/bench_vs_trl.py: one GRPOTrainer run, started by that script with the
python of its TRL virtual env (TRL is never a dependency of the project).

    <trl venv>/bin/python scripts/bench_trl_side.py <spec.json>

The spec (written by bench_vs_trl.py) names the model folder, the training parquet, the geometry
(prompts P, samples G, response length), steps, lr and seed, and the output folder. The run is
the same work verl_lite does: GRPO with group-std advantages, token-mean loss ("dapo": normalised
by the batch's tokens), clip 0.2, no KL, one optimizer step per step (P x G completions, no
accumulation, one iteration), fp32, one thread, sampling at temperature 1 with nothing truncated,
the same rule reward (verl_lite's scorer, imported from the repo).

Written to <out>: trl_steps.json (per step: wall seconds from the trainer's step begin to its
end, the seconds in `generate`, the seconds in TRL's generate-and-score, the mean completion
length TRL logged) and the final model in
model/ (for the accuracy evaluation, which the orchestrator runs the same way for both sides).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def load_dataset(path: str):
    import pandas as pd
    from datasets import Dataset

    frame = pd.read_parquet(path)
    rows = [
        {
            "prompt": [{"role": m["role"], "content": m["content"]} for m in row.prompt],
            "ground_truth": str(row.reward_model["ground_truth"]),
            "data_source": row.data_source,
        }
        for row in frame.itertuples()
    ]
    return Dataset.from_list(rows)


def build_reward(repo: str):
    sys.path.insert(0, repo)
    from verl_lite.reward.scorers import default_compute_score

    def arith_reward(prompts, completions, ground_truth, data_source, **_):
        return [
            float(default_compute_score(source, completion[0]["content"], truth))
            for completion, truth, source in zip(completions, ground_truth, data_source)
        ]

    return arith_reward


def grpo_config(spec: dict):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=os.path.join(spec["out"], "trainer"),
        per_device_train_batch_size=spec["prompts"] * spec["samples"],
        num_generations=spec["samples"],
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=spec["response_length"],
        learning_rate=spec["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=spec["weight_decay"],
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_steps=spec["steps"],
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=spec["seed"],
        data_seed=spec["seed"],
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


class PhaseTimer:
    """Per training step: wall seconds, and the seconds spent in the wrapped calls."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = {}
        self.start = 0.0

    def wrap(self, fn, name: str):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - start

        return timed

    def callback(self):
        from transformers import TrainerCallback

        timer = self

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                timer.current, timer.start = {}, time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                end = time.perf_counter()  # consecutive ends: the cycle, logging between steps included
                timer.steps.append({"step_s": end - timer.start, "end_s": end, **timer.current})

        return StepTimer()


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    import torch

    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    timer = PhaseTimer()
    model.generate = timer.wrap(model.generate, "generate_s")
    GRPOTrainer._generate_and_score_completions = timer.wrap(
        GRPOTrainer._generate_and_score_completions, "generate_and_score_s"
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[build_reward(spec["repo"])],
        args=grpo_config(spec),
        train_dataset=load_dataset(spec["train_file"]),
        processing_class=tokenizer,
        callbacks=[timer.callback()],
    )
    trainer.train()
    lengths = [
        e["completions/mean_length"] for e in trainer.state.log_history if "completions/mean_length" in e
    ]
    if len(lengths) != len(timer.steps):
        raise RuntimeError(f"{len(lengths)} logged completion lengths for {len(timer.steps)} steps")
    for step, length in zip(timer.steps, lengths):
        step["completion_mean_length"] = length
    trainer.save_model(os.path.join(spec["out"], "model"))
    with open(os.path.join(spec["out"], "trl_steps.json"), "w") as f:
        json.dump(timer.steps, f)


if __name__ == "__main__":
    main(sys.argv[1])
