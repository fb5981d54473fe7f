#!/usr/bin/python3
"""make_fixtures_kernels.py -- PyTorch fixtures for cells of two kernels: an
input-to-state kernel and a different state-to-state kernel (Shi et al.
2015's "ConvLSTM(9x9)-1x1"), the cell then two convolutions, conv_x over x_t
with the bias and conv_h over h_{t-1}, each padded "same" for its own
kernel and both dilated by the layer's dilation.
tests/testthat/test-parity-kernels.R and tests/c/test_core_refs.c read them.

A developer tool like make_fixtures.py (same format, same Writer; PyTorch
1.13 CPU): rerun only when a config is added. It writes one folder per config
under tests/testthat/fixtures/kernels/ (a folder without a manifest, so the
plain parity test does not list it).

Records beyond make_fixtures.py's (config recurrent_kernel_sizes and
recurrent_kernel_widths, dropout masks where the config has dropout):
  output/, last_h/, last_c/, loss, grad/   a forward from zeros, its MSE and
                                           every gradient
  wrong/h_undilated/<l>  (configs with dilation) the layer outputs of the same
      weights with conv_h not dilated, as Keras's ConvLSTM2D does: what the
      tests show they tell apart from the documented choice
  adam_losses, adam_params/                Adam steps from the weights, or
  sgd_losses, sgd_params/                  (optimizer sgd) SGD steps with
                                           momentum, config sgd_lr,
                                           sgd_momentum, sgd_steps
"""

import torch
import torch.nn.functional as F

from make_fixtures import MIN_GRAD_RATIO, adam_steps, fixture_root, make_all, prediction, \
    start_fixture, write_forward, write_steps
from make_fixtures_peephole import random_peepholes
from torch_convlstm import ConvLSTM

SGD_LR, SGD_MOMENTUM, SGD_STEPS = 0.05, 0.9, 3


def sgd_steps(model, x, y, target):
    """SGD_STEPS steps of SGD with momentum (linear in the gradient, so
    float32 noise in a tiny gradient moves a weight by as little); the loss
    recorded is the one before the update, as train_step returns it."""
    opt = torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    losses = []
    for _ in range(SGD_STEPS):
        opt.zero_grad()
        l = F.mse_loss(prediction(model(x), target), y)
        l.backward()
        opt.step()
        losses.append(l.item())
    return losses

CONFIGS = [
    # the paper's 9x9 input kernel with a 1x1 state kernel, peepholes per channel
    # (SGD steps: Adam's sign-sensitivity rules out tensors of 81 taps, whose
    # smallest gradients are always within float32 noise of zero)
    dict(name="k9_h1", input_dim=1, hidden_dims=[3, 2], kernel_sizes=[9, 9],
         recurrent_kernel_sizes=[1, 1], peephole="channel", bias=True, B=2, T=3, H=6, W=5,
         target="sequence", weight_decay=0.0, optimizer="sgd"),
    # non-square kernels the other way round, dilated (both halves), no bias
    dict(name="k3x5_h5x3", input_dim=2, hidden_dims=[3], kernel_sizes=[(3, 5)],
         recurrent_kernel_sizes=[(5, 3)], dilations=[(2, 1)], bias=False, B=2, T=3, H=7,
         W=6, target="last_state", weight_decay=0.1),
    # one layer of two kernels under one of one kernel, per-gate dropout
    dict(name="mixed_dropout", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         recurrent_kernel_sizes=[1, 3], bias=True, B=2, T=3, H=5, W=5, target="sequence",
         weight_decay=0.01, dropout=[0.3, 0.2], recurrent_dropout=[0.25, 0.4],
         dropout_masks="per_gate"),
]


def model_of(cfg):
    return ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"],
                    cfg.get("dilations"), peephole=cfg.get("peephole"),
                    frame_size=(cfg["H"], cfg["W"]),
                    recurrent_kernel_sizes=cfg["recurrent_kernel_sizes"])


def undilated_h_outputs(model, x):
    """The layer outputs with every conv_h undilated (padding for dilation 1)."""
    saved = []
    with torch.no_grad():
        for cell in model.cell_list:
            if getattr(cell, "split", False):
                ch = cell.conv_h
                saved.append((ch, ch.dilation, ch.padding))
                ch.dilation = (1, 1)
                ch.padding = ((ch.kernel_size[0] - 1) // 2, (ch.kernel_size[1] - 1) // 2)
        out = model(x)[0]
        for ch, d, p in saved:
            ch.dilation, ch.padding = d, p
    return out


def make(cfg, root, seed):
    torch.manual_seed(seed)
    model = model_of(cfg)
    random_peepholes(model)
    w, x, y, masks = start_fixture(cfg, root, seed, model)

    write_forward(w, model, x, y, cfg["target"], masks)
    if "dilations" in cfg:
        for l, o in enumerate(undilated_h_outputs(model, x)):
            w.tensor("wrong/h_undilated/%d" % l, o)

    opt = cfg.get("optimizer", "adam")
    if opt == "sgd":
        w.config("sgd_lr", SGD_LR)
        w.config("sgd_momentum", SGD_MOMENTUM)
        w.config("sgd_steps", SGD_STEPS)
        losses = sgd_steps(model, x, y, cfg["target"])
        if w.looks_executable:
            return None
    else:
        losses, ratio = adam_steps(model, x, y, cfg["target"], cfg["weight_decay"], masks)
        if ratio < MIN_GRAD_RATIO or w.looks_executable:
            return None
        w.info("adam_min_grad_ratio", "%.3e" % ratio)
    write_steps(w, model, opt, losses)
    w.close()
    return opt + " losses " + " ".join("%.5f" % l for l in losses)


def main():
    make_all(CONFIGS, make, fixture_root("kernels"), 20261126, 14)


if __name__ == "__main__":
    main()
