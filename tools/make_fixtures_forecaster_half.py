#!/usr/bin/python3
"""make_fixtures_forecaster_half.py -- PyTorch references for an
encoder-forecaster (convlstm_forecaster(); EncoderForecaster in
inst/python/torch_convlstm.py) trained in mixed precision (issue 34 item 5):

- float32: the step's losses and SGD parameters, the yardstick; also what
  checkpointing, recompute_gates and accumulation must give (they change
  where the step keeps its states, not its arithmetic);
- bfloat16: torch.autocast("cpu", dtype=torch.bfloat16), PyTorch 1.13's CPU
  autocast (its convolutions in bfloat16, weights too; the rest in the
  types its operands have);
- float16, which PyTorch 1.13 does not autocast on the CPU: emulated where
  the package stores float16 (src/cpu/cpu_cell.c, cpu_conv.c,
  core/program.c): the patched frames, each convolution's output z (the
  input half's with its bias, then the hidden half added to it), the
  cell's c and h, the head's output: rounded with .half().float() on the way
  forward; the loss's gradient times the scale as it enters the head
  (cl_head_grad_store) and the gates' pre-activation gradients dz: rounded
  on the way back. Weights, their gradients, the cell's arithmetic and
  the state gradients dh, dc stay float32, as the package's. The dynamic loss
  scale is torch.cuda.amp.GradScaler's rule written out (PyTorch 1.13's
  GradScaler is CUDA only): scale the loss, a step whose gradients hold an
  infinity or NaN is skipped and the scale times 0.5, else the gradients
  times 1/scale (in float32) and the update; after 2000 clean steps times 2.
  One run starts at the default scale (65536), one at 2^40, where the
  scaled gradients overflow float16 and steps are skipped until the scale
  fits.

The package computes the cell from its stored gates where this emulation
recomputes them (autograd keeps float32 activations), and its float32 sums
run in another order: its float16 results are near these, not equal to
them; the R test (test-forecaster-fixtures-half.R) takes its tolerances
from the distance between each half run and the float32 one, recorded
here as info.

Writes tests/testthat/fixtures/forecaster_half/<config>/ (or under its first
argument), the format of make_fixtures.py (make_fixtures_forecaster.py's short
file names). A developer tool: PyTorch 1.13
CPU, /usr/bin/python3, one thread (reproducible for make fixtures-check).
"""

import os

import torch
import torch.nn.functional as F

from make_fixtures import fixture_root, info_seed, make_all, max_rel, write_inputs
# ShortWriter: file names short enough for R CMD check
from make_fixtures_forecaster import ShortWriter, config_shape, draw

STEPS = 3
LR = 0.1
SCALE_INIT, GROWTH, BACKOFF, INTERVAL = 65536.0, 2.0, 0.5, 2000
OVERFLOW_INIT = 2.0 ** 40
OVERFLOW_CALLS = 22  # train_step calls from 2^40: the skipped ones, then clean ones

CONFIGS = [
    dict(name="l2_p2", input_dim=1, hidden_dims=[4, 3], kernel_sizes=[3, 3], patch=2,
         peephole="channel", bias=True, B=2, T_in=3, T_out=2, H=8, W=8),
]


class Store16(torch.autograd.Function):
    """Stored in float16: rounded forward, the gradient passed as it is."""

    @staticmethod
    def forward(ctx, x):
        return x.half().float()

    @staticmethod
    def backward(ctx, g):
        return g


class Grad16(torch.autograd.Function):
    """A gradient stored in float16: the value as it is, its gradient rounded
    (beyond 65504: an infinity, which the scaler finds)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.half().float()


def cell16(cell, x, h, c):
    """One step of a ConvLSTMCell (one kernel: conv over cat(x, h)) with the
    package's float16 storage points."""
    w, b = cell.conv.weight, cell.conv.bias
    pad = cell.conv.padding
    cin = cell.input_dim
    if x is not None:  # the input half, with the bias, stored; the hidden half added, stored
        z = Store16.apply(F.conv2d(x, w[:, :cin], b, padding=pad))
        z = Store16.apply(z + F.conv2d(h, w[:, cin:], None, padding=pad))
    else:
        z = Store16.apply(F.conv2d(h, w, b, padding=pad))
    z = Grad16.apply(z)  # dz, the pre-activation gradients, stored
    zi, zf, zo, zg = torch.split(z, cell.hidden_dim, dim=1)
    zi = zi + cell.w_ci * c
    zf = zf + cell.w_cf * c
    c = torch.sigmoid(zf) * c + torch.sigmoid(zi) * torch.tanh(zg)
    zo = zo + cell.w_co * c
    h = torch.sigmoid(zo) * torch.tanh(c)
    return Store16.apply(h), Store16.apply(c)


def forward16(model, x, horizon):
    """EncoderForecaster.forward with the float16 storage points; the head's
    output stored, its gradient (the loss's, scaled) stored."""
    z = Store16.apply(model.unshuffle(x))
    B, T = z.shape[:2]
    state = []
    for cell in model.encoder.cell_list:
        state.append((z.new_zeros(B, cell.hidden_dim, *z.shape[3:]),) * 2)
    for t in range(T):
        inp = z[:, t]
        for l, cell in enumerate(model.encoder.cell_list):
            state[l] = cell16(cell, inp, *state[l])
            inp = state[l][0]
    frames = []
    for _ in range(horizon):
        inp, hs = None, []
        for l, cell in enumerate(model.forecaster.cell_list):
            state[l] = cell16(cell, inp, *state[l])
            inp = state[l][0]
            hs.append(inp)
        out = Grad16.apply(Store16.apply(model.head(torch.cat(hs, dim=1))))
        frames.append(F.pixel_shuffle(out, model.patch))
    return torch.stack(frames, dim=1)


def sgd(model):
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad


def run_plain(model, x, y, steps, autocast=False):
    """float32 (or bfloat16 autocast) SGD steps: losses, the first step's gradients."""
    losses, grads = [], None
    for _ in range(steps):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(x, y.shape[1])
        loss = F.mse_loss(out.float(), y)
        loss.backward()
        losses.append(loss.item())
        if grads is None:
            grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        sgd(model)
    return losses, grads


def run_half(model, x, y, calls, scale):
    """float16 train_step calls with the dynamic loss scale: the loss of each
    call, the scale after it, whether it stepped, the first clean step's
    (unscaled) gradients."""
    losses, scales, stepped, grads, clean = [], [], [], None, 0
    for _ in range(calls):
        model.zero_grad()
        loss = F.mse_loss(forward16(model, x, y.shape[1]), y)
        (loss * scale).backward()
        losses.append(loss.item())
        finite = all(torch.isfinite(p.grad).all() for p in model.parameters())
        if finite:
            inv = torch.tensor(1.0 / scale, dtype=torch.float32)
            for p in model.parameters():
                p.grad *= inv
            if grads is None:
                grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
            sgd(model)
            clean += 1
            if clean == INTERVAL:
                scale, clean = scale * GROWTH, 0
        else:
            scale, clean = scale * BACKOFF, 0
        scales.append(scale)
        stepped.append(1.0 if finite else 0.0)
    return losses, scales, stepped, grads


def params(w, prefix, model):
    for k, v in model.state_dict().items():
        w.tensor(prefix + k, v)


def make(cfg, root, seed):
    model, x, y, initial = draw(cfg, seed)
    w = ShortWriter(os.path.join(root, cfg["name"]))
    config_shape(w, cfg)
    w.config("loss", "mse")
    w.config("sgd_lr", LR)
    w.config("steps", STEPS)
    w.config("scale_init", "%.0f" % SCALE_INIT)
    w.config("overflow_init", "%.0f" % OVERFLOW_INIT)
    w.config("overflow_calls", OVERFLOW_CALLS)
    info_seed(w, seed)
    write_inputs(w, model, x, y)  # the model as drawn: its initial weights

    runs = {}
    losses, grads = run_plain(model, x, y, STEPS)
    runs["f32"] = (losses, grads, {k: v.clone() for k, v in model.state_dict().items()})
    model.load_state_dict(initial)
    losses, grads = run_plain(model, x, y, STEPS, autocast=True)
    runs["bf16"] = (losses, grads, {k: v.clone() for k, v in model.state_dict().items()})
    model.load_state_dict(initial)
    losses, scales, stepped, grads = run_half(model, x, y, STEPS, SCALE_INIT)
    assert all(stepped), "float16 at the default scale skipped a step"
    runs["f16"] = (losses, grads, {k: v.clone() for k, v in model.state_dict().items()})
    w.tensor("f16_scales", torch.tensor(scales))
    for name, (losses, grads, state) in runs.items():
        w.tensor(name + "_losses", torch.tensor(losses))
        for k, g in grads.items():
            w.tensor(name + "_grad/" + k, g)
        for k, v in state.items():
            w.tensor(name + "_params/" + k, v)
    for name in ("bf16", "f16"):  # how far each half run is from float32
        w.info(name + "_vs_f32_loss", "%.3e" % max_rel(torch.tensor(runs[name][0]),
                                                       torch.tensor(runs["f32"][0])))
        w.info(name + "_vs_f32_grad", "%.3e" % max(max_rel(runs[name][1][k], runs["f32"][1][k])
                                                   for k in initial))

    # float16 from a scale that overflows: skipped steps, then clean ones
    model.load_state_dict(initial)
    losses, scales, stepped, _ = run_half(model, x, y, OVERFLOW_CALLS, OVERFLOW_INIT)
    w.tensor("overflow_losses", torch.tensor(losses))
    w.tensor("overflow_scales", torch.tensor(scales))
    w.tensor("overflow_stepped", torch.tensor(stepped))
    params(w, "overflow_params/", model)
    w.info("overflow_skipped", "%d" % int(len(stepped) - sum(stepped)))
    if w.looks_executable:
        return None
    w.close()
    return "bf16 vs f32 grad %s, f16 vs f32 grad %s, %d of %d calls skipped from 2^40" % (
        [l for l in w.lines if "bf16_vs_f32_grad" in l][0].split()[-1],
        [l for l in w.lines if "f16_vs_f32_grad" in l and "bf16" not in l][0].split()[-1],
        len(stepped) - sum(stepped), len(stepped))


def main():
    # the first seed whose files `file` takes for no program (make: None otherwise)
    make_all(CONFIGS, make, fixture_root("forecaster_half"), 20261129, 8)


if __name__ == "__main__":
    main()
