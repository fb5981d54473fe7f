#!/usr/bin/python3
"""make_fixtures_bf16.py -- PyTorch fixtures for bfloat16 training on the CPU:
one training step's loss and gradients under torch.autocast("cpu",
dtype=torch.bfloat16), the reference for convlstm's bfloat16 storage, whose
CPU convolutions run bfloat16 dot products (AVX512_BF16) with float32 sums.
tests/c/test_cpu_bf16.c reads them.

A developer tool like make_fixtures.py (same format, same Writer; PyTorch
1.13 CPU): rerun only when a config is added. It writes one folder per config
under tests/testthat/fixtures/bf16/ (a folder without a manifest, so the
plain parity test does not list it).

Autocast on the CPU runs each convolution with its input and the float32
weights cast to bfloat16 (output bfloat16), and the cell's elementwise ops on
those bfloat16 tensors; the parameters and their gradients stay float32.
The loss (MSE on the last state, mean) is computed in float32. Records
beyond make_fixtures.py's:
  config B T H W target
  x, y               the step's inputs (float32; convlstm rounds x to
                     bfloat16 where it stores it, as autocast's cast does)
  loss, grad/<name>  the step under bfloat16 autocast
  loss32, grad32/<name>
                     the same step in float32: how far bfloat16 moves it
                     (the test's tolerance is measured against this)
"""

import os

import torch
import torch.nn.functional as F

from make_fixtures import Writer, config_model, fixture_root, info_seed, make_all, max_rel, \
    prediction, write_inputs
from torch_convlstm import ConvLSTM

# 4 h = 64 and 32 output channels, 5x5 and 3x3 kernels: products long
# enough (C k k of 75 to 1,200) that the bfloat16 kernels' pairs, packing
# and tails all run; a small image keeps the fixture small.
CONFIGS = [
    dict(name="stack_k5_k3", input_dim=3, hidden_dims=[16, 8], kernel_sizes=[5, 3], bias=True,
         B=2, T=4, H=8, W=8, target="last_state"),
]


def step(model, x, y, target, bf16):
    """zero_grad, forward (under bfloat16 autocast when bf16), MSE in
    float32, backward; the loss and each parameter's gradient."""
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(x)
        pred = prediction(out, target)
    loss = F.mse_loss(pred.float(), y)
    loss.backward()
    return loss.item(), {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def make(cfg, root, seed):
    torch.manual_seed(seed)
    model = ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"])
    B, T, H, W = cfg["B"], cfg["T"], cfg["H"], cfg["W"]
    x = torch.rand(B, T, cfg["input_dim"], H, W)
    y = torch.rand(B, cfg["hidden_dims"][-1], H, W)
    w = Writer(os.path.join(root, cfg["name"]))
    config_model(w, cfg)
    for key in ("B", "T", "H", "W", "target"):
        w.config(key, cfg[key])
    info_seed(w, seed)
    write_inputs(w, model, x, y)
    loss, grads = step(model, x, y, cfg["target"], True)
    loss32, grads32 = step(model, x, y, cfg["target"], False)
    w.tensor("loss", torch.tensor([loss]))
    w.tensor("loss32", torch.tensor([loss32]))
    for key in grads:
        w.tensor("grad/" + key, grads[key])
        w.tensor("grad32/" + key, grads32[key])
    gap = max(max_rel(grads[k], grads32[k]) for k in grads)
    w.info("bf16_vs_f32_max_rel_grad", "%.3e" % gap)
    if w.looks_executable:
        return None
    w.close()
    return loss, loss32, gap


def main():
    make_all(CONFIGS, make, fixture_root("bf16"), 20261129, 12,
             lambda res: "loss bf16 %.6f, float32 %.6f; gradients differ by %.2e of their largest"
             % res)


if __name__ == "__main__":
    main()
