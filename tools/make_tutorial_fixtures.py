#!/usr/bin/python3
"""make_tutorial_fixtures.py -- PyTorch's losses for the shipped tutorial
model (inst/extdata/tutorial.safetensors), so that
tests/testthat/test-tutorial_model.R compares the losses recorded in that
file with an implementation outside the package, not with numbers the
package wrote.

A developer tool like make_fixtures.py (same format, same Writer; PyTorch
1.13 CPU, one thread): it reads the inputs written by
tools/make_tutorial_inputs.R (tests/testthat/fixtures/tutorial/inputs/: the
beams' pixels, the initial weights, the epochs' order of sequences) and the
shipped file's trained weights, and writes into OUT (default
tests/testthat/fixtures/tutorial/torch/):

  losses          [3]: the mean batch loss of the first two epochs of the
                  documented loop (Adam, lr from the inputs, batches of
                  batch_size in the recorded order, loss before each update)
                  from the initial weights; then the trained weights' MSE on
                  the fresh beams (the last layer's last h against the next
                  frame); float32 (one tensor: a lone 4-byte loss can read as
                  a DOS program to `file`, which R CMD check warns of)
  losses_f64      the same in float64
  info            torch version, float32 vs float64 differences

Usage: /usr/bin/python3 tools/make_tutorial_fixtures.py [OUT]
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "inst", "python"))
from make_fixtures import Writer  # noqa: E402
from safetensors_check import read_file  # noqa: E402
from torch_convlstm import ConvLSTM  # noqa: E402

INPUTS = os.path.join(ROOT, "tests", "testthat", "fixtures", "tutorial", "inputs")
SHIPPED = os.path.join(ROOT, "inst", "extdata", "tutorial.safetensors")


def read_inputs(folder):
    """config {key: [values]} and tensors {name: float32 tensor} of a fixture."""
    config, tensors = {}, {}
    with open(os.path.join(folder, "manifest.txt")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "convlstm-fixture 1", lines[0]
    for line in lines[1:]:
        rec = line.split(" ")
        if rec[0] == "config":
            config[rec[1]] = rec[2:]
        elif rec[0] == "tensor":
            dims = [int(d) for d in rec[4:4 + int(rec[3])]]
            with open(os.path.join(folder, rec[2]), "rb") as g:
                raw = bytearray(g.read())
            tensors[rec[1]] = torch.frombuffer(raw, dtype=torch.float32).reshape(dims).clone()
    return config, tensors


def beams(config, tensors, key):
    """x [n, t, c, h, w] and y [n, c, h, w]: zeros with 1 at the listed
    (1-based) pixels."""
    dims = [int(d) for d in config[key + "_dims"]]
    x = torch.zeros(dims)
    y = torch.zeros([dims[0]] + dims[2:])
    for a, name in ((x, "x_ones"), (y, "y_ones")):
        idx = tensors[key + "/" + name].long() - 1
        a[tuple(idx.t())] = 1.0
    return x, y


def model_with(weights, dtype):
    m = ConvLSTM(1, [8, 1], [3, 3]).to(dtype)
    m.load_state_dict({k: v.to(dtype) for k, v in weights.items()})
    return m


def fresh_loss(weights, x, y, dtype):
    with torch.no_grad():
        m = model_with(weights, dtype)
        return F.mse_loss(m(x.to(dtype), last_only=True), y.to(dtype)).item()


def epoch_losses(weights, x, y, order, batch_size, lr, dtype):
    m = model_with(weights, dtype)
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    out = []
    for perm in order.long() - 1:
        losses = []
        for b in perm.split(batch_size):
            opt.zero_grad()
            loss = F.mse_loss(m(x[b].to(dtype), last_only=True), y[b].to(dtype))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        out.append(sum(losses) / len(losses))
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "tests", "testthat", "fixtures", "tutorial", "torch")
    torch.set_num_threads(1)
    config, t = read_inputs(INPUTS)
    trained, _, _ = read_file(SHIPPED)
    trained = {k: v for k, v in trained.items() if k.startswith("cell_list.")}
    init = {k[len("weights/"):]: v for k, v in t.items() if k.startswith("weights/")}
    xf, yf = beams(config, t, "fresh_data")
    xd, yd = beams(config, t, "data")
    batch_size, lr = int(config["batch_size"][0]), float(config["adam_lr"][0])
    w = Writer(out)
    w.config("batch_size", batch_size)
    w.config("adam_lr", config["adam_lr"][0])
    f32 = fresh_loss(trained, xf, yf, torch.float32)
    f64 = fresh_loss(trained, xf, yf, torch.float64)
    e32 = epoch_losses(init, xd, yd, t["order"], batch_size, lr, torch.float32)
    e64 = epoch_losses(init, xd, yd, t["order"], batch_size, lr, torch.float64)
    w.tensor("losses", torch.tensor(e32 + [f32]))
    w.tensor("losses_f64", torch.tensor(e64 + [f64]))
    w.info("torch_version", torch.__version__)
    w.info("made_by", "tools/make_tutorial_fixtures.py from tutorial/inputs and the shipped file")
    w.info("f32_vs_f64_fresh", "%.3g" % (abs(f32 - f64) / f64))
    w.info("f32_vs_f64_epochs", "%.3g" % max(abs(a - b) / b for a, b in zip(e32, e64)))
    w.close()
    if w.looks_executable:
        sys.exit("a tensor file reads as a program to `file` (R CMD check's undeclared "
                 "executable): change the layout of the records")
    print("tutorial: fresh loss %.9g (f64 %.9g); epochs 1-2 %s" % (
        f32, f64, " ".join("%.9g" % v for v in e32)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
