"""The real Qwen2.5 shapes the planner's tests use (scripts/model_configs/: public config.json files),
and Qwen2.5-7B's parameter layout written out by hand.

7B: hidden 3584, 28 layers, vocab 152064, intermediate 18944, 28 heads of 128, 4 KV heads (kv dim
512), untied LM head, q/k/v biases. The counts below are derived from those numbers here, not by the
code under test; tests/engine/test_model_shape.py checks them against transformers.
"""

import os

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "scripts", "model_configs")
SEVEN_B = os.path.join(CONFIGS, "qwen2.5-7b")
HALF_B = os.path.join(CONFIGS, "qwen2.5-0.5b")

H, KV, INTER, L, V = 3584, 512, 18944, 28, 152064
Q = H * H  # q_proj and o_proj weights
KVW = KV * H  # k_proj and v_proj weights
MLP = INTER * H  # gate, up, down
LAYER = 2 * Q + 2 * KVW + 3 * MLP + (H + 2 * KV) + 2 * H  # + q/k/v biases + two RMSNorms
ROOT = 2 * V * H + H  # embeddings, LM head (untied), final norm
N = L * LAYER + ROOT  # 7,615,616,512
