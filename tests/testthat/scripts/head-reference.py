#!/usr/bin/python3
"""head-reference.py -- PyTorch's numbers for a plain stack with a head
(convlstm(head = "top")), read from the model file convlstm wrote, for
tests/testthat/test-head.R.

  head-reference.py SCRIPT_DIR FILE X.bin Y.bin B T C H W OUT_DIR [K]

Builds the reference ConvLSTM with its head (inst/python/torch_convlstm.py,
through safetensors_check.py's model_from, from SCRIPT_DIR), runs it on X
(float32, row-major [B, T, C, H, W]) and writes to OUT_DIR: frames.bin (the
head's outputs), loss.bin (float64: the mean squared error against Y over
the last K steps, all T without K, as convlstm_train_step(horizon = K) with teacher
forcing), and grad_<name>.bin for every parameter (float32, row-major).
"""

import os
import sys

import torch

sys.path.insert(0, sys.argv[1])
import safetensors_check as sc  # noqa: E402

path, xfile, yfile = sys.argv[2], sys.argv[3], sys.argv[4]
dims = [int(v) for v in sys.argv[5:10]]
out = sys.argv[10]
K = int(sys.argv[11]) if len(sys.argv) > 11 else 0
tensors, meta, _ = sc.read_file(path)
model, _ = sc.model_from(tensors, meta)
x = sc.read_x(xfile, dims)
T = dims[1]
frames = model.frames(x)
y = sc.read_x(yfile, [dims[0], K or T] + dims[2:])
pred = frames[:, T - K:] if K else frames
loss = torch.nn.functional.mse_loss(pred, y)
loss.backward()
frames.detach().contiguous().numpy().astype("<f4").tofile(os.path.join(out, "frames.bin"))
torch.tensor([loss.item()], dtype=torch.float64).numpy().astype("<f8").tofile(
    os.path.join(out, "loss.bin"))
for name, p in model.named_parameters():
    p.grad.contiguous().numpy().astype("<f4").tofile(os.path.join(out, "grad_%s.bin" % name))
