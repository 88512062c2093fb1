"""Only verl_lite/utils/device.py names the accelerator: CUDA, NCCL, gloo, pinned memory.

Everything else asks that module (has_accelerator, dist_backend, can_pin_memory, fork_rng, ...), so
the same code runs on a CPU-only machine and on GPUs, and a second accelerator would change one
file. Read from the source's tokens: names (`torch.cuda`, `is_cuda_available`, `pin_memory=`) and
identifier-like string literals (`"cuda"`, `f"cuda:{i}"`, `"gloo"`, `"CUDA_VISIBLE_DEVICES"`);
comments, docstrings and messages written as sentences may mention CUDA. The config schema, its
support table and its value domains are exempt: they spell verl's key names and values (`nccl_timeout`,
`cudagraph_capture_sizes`, profiler options), the user's vocabulary, which nothing branches on.
"""

import ast
import io
import os
import re
import tokenize

import verl_lite

PACKAGE = os.path.dirname(os.path.abspath(verl_lite.__file__))
ALLOWED = {os.path.join("utils", "device.py")}
CONFIG_SURFACE = re.compile(r"^config[/\\](schema\w*|support|domains)\.py$")
# the accelerator's words as identifiers spell them (lower, UPPER or Capitalised), each starting a word
# or a CamelCase part: `is_cuda_available`, `CUDA_VISIBLE_DEVICES`, `ProcessGroupNCCL`, `cudagraph`;
# not letters that happen to meet across a CamelCase join (`AsyncClient` holds "ncCl")
ACCELERATOR = re.compile(r"(?<![a-z])(cuda|nccl|gloo)|(?<![A-Z])(CUDA|NCCL|GLOO)|(?<![A-Z])(Cuda|Nccl|Gloo)")


def docstring_starts(tree: ast.AST) -> set[tuple[int, int]]:
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    starts.add((first.lineno, first.col_offset))
    return starts


def offending_tokens(source: str) -> list[tuple[int, str]]:
    """(line, token) of every name or identifier-like string that names the accelerator."""
    docstrings = docstring_starts(ast.parse(source))
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text = tok.string
        if tok.type == tokenize.NAME and (ACCELERATOR.search(text) or text == "pin_memory"):
            found.append((tok.start[0], text))
        elif tok.type == tokenize.STRING and tok.start not in docstrings:
            if ACCELERATOR.search(text) and not re.search(r"\s", text):  # an identifier, not a sentence
                found.append((tok.start[0], text))
        elif tok.type == getattr(tokenize, "FSTRING_MIDDLE", None) and ACCELERATOR.search(text):
            if not re.search(r"\s", text):
                found.append((tok.start[0], text))
    return found


def test_the_rule_catches_what_it_should_and_spares_prose():
    code = '''"""Docstrings may say CUDA."""
import torch
x = torch.cuda.is_available()  # comments may say cuda too
y = t.to("cuda:0")
z = f"cuda:{i}"
w = dev.is_cuda_available()
p = torch.empty(1, pin_memory=True)
q = dev.can_pin_memory()
b = "gloo"
g = dist.ProcessGroupNCCL
c = httpx.AsyncClient(headers=h)
m = "no GPU visible: CUDA missing; check the CUDA driver"
'''
    names = [t for _, t in offending_tokens(code)]
    assert names[:2] == ["cuda", '"cuda:0"']
    assert "is_cuda_available" in names and "pin_memory" in names and '"gloo"' in names
    assert any("cuda:" in n for n in names[2:]), names  # the f-string
    assert "can_pin_memory" not in names and not any("driver" in n for n in names)
    assert "ProcessGroupNCCL" in names and "AsyncClient" not in names


def test_only_utils_device_names_the_accelerator():
    offenders = []
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, PACKAGE)
            if name.endswith(".py") and rel not in ALLOWED and not CONFIG_SURFACE.match(rel):
                with open(path) as f:
                    offenders += [
                        f"verl_lite/{rel}:{line}: {tok}" for line, tok in offending_tokens(f.read())
                    ]
    assert not offenders, "ask verl_lite/utils/device.py instead:\n" + "\n".join(offenders)
