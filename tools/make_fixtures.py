#!/usr/bin/python3
"""make_fixtures.py -- writes the PyTorch reference fixtures that
tests/testthat/test-parity-torch.R compares the package against.

This is a developer tool, not part of the package: it needs PyTorch (on Debian,
python3-torch; run it with /usr/bin/python3) and is only rerun when a config is
added or the format changes. The fixtures it writes are committed.

The reference model is the R torch tutorial's convlstm (Keydana, "Convolutional
LSTM for spatial forecasting", 2020), itself after ndrplz/ConvLSTM_pytorch: per
layer one Conv2d over cat(x_t, h_{t-1}), gates i, f, o, g in that order, zero
initial state, padding k // 2, batch first. It is written here from the
equations, not imported, so the fixtures do not depend on any third-party
ConvLSTM package.

Format (version 1), one folder per config under tests/testthat/fixtures/:
  manifest.txt   first line "convlstm-fixture 1"; then one record per line:
                   config <key> <value> [<value> ...]
                   tensor <name> <file> <ndim> [<d1> ... <dn>]
                   info <key> <value>          (free-form, for people)
  <file>         the tensor's values, little-endian float32, row-major
                 (C order) over dims d1..dn, nothing else.
A reader in base R: readBin(f, "numeric", size = 4, n = prod(d), endian =
"little"), then array(v, rev(d)) and aperm(n:1) to get R's x[d1, ..., dn].

Values are computed in float32, as the package computes them. The same model is
also run in float64 and the largest float32-vs-float64 differences are written
as info records: they show how much of any mismatch float32 alone explains.
"""

import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inst", "python"))
from torch_convlstm import ConvLSTM, dropout_masks  # noqa: E402  (the one reference model, installed with the package)

FORMAT_VERSION = 1
ADAM_STEPS = 3
ADAM_LR = 1e-2
# seeds are skipped until no Adam gradient is within this fraction of its
# tensor's largest (see smallest_gradient)
MIN_GRAD_RATIO = 1e-4


def prediction(out, target):
    layer_outputs, last_states = out
    if target == "last_state":
        return last_states[-1][0]  # the tutorial's model(x)[[2]][[n]][[1]]
    return layer_outputs[-1]


# Small on purpose: every fixture stays a few KB. Together they cover 1 and 3
# layers, kernels 1/3/5, non-square images, batch 1, T = 1, no bias, both
# targets and Adam with weight decay.
CONFIGS = [
    dict(name="one_layer_k3", input_dim=2, hidden_dims=[4], kernel_sizes=[3],
         bias=True, B=2, T=3, H=6, W=6, target="last_state", weight_decay=0.0),
    dict(name="three_layers_k135", input_dim=1, hidden_dims=[4, 3, 2], kernel_sizes=[1, 3, 5],
         bias=True, B=2, T=3, H=6, W=6, target="last_state", weight_decay=0.0),
    dict(name="nonsquare_7x5", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=3, H=7, W=5, target="last_state", weight_decay=0.0),
    dict(name="batch1", input_dim=1, hidden_dims=[3], kernel_sizes=[3],
         bias=True, B=1, T=4, H=5, W=5, target="last_state", weight_decay=0.0),
    dict(name="t1", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=1, H=5, W=6, target="last_state", weight_decay=0.0),
    dict(name="nobias_wd", input_dim=1, hidden_dims=[4, 1], kernel_sizes=[3, 5],
         bias=False, B=2, T=3, H=6, W=6, target="last_state", weight_decay=0.1),
    dict(name="sequence_target", input_dim=1, hidden_dims=[4, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=3, H=5, W=5, target="sequence", weight_decay=0.0),
    # non-square kernels and dilation ("same" padding d (k - 1) / 2), recorded
    # as config kernel_widths / dilation_h / dilation_w
    dict(name="kernel_3x5", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[(3, 5), (5, 1)],
         bias=True, B=2, T=3, H=6, W=7, target="last_state", weight_decay=0.0),
    dict(name="dilated", input_dim=1, hidden_dims=[2, 1], kernel_sizes=[3, (3, 5)],
         dilations=[2, (1, 2)], bias=True, B=2, T=3, H=7, W=6, target="sequence",
         weight_decay=0.0),
]


# Dropout (Keras's dropout / recurrent_dropout, one mask per sequence): the
# masks are drawn here and written as tensors mask_x/<l> and mask_h/<l>
# [B, C, H, W] (absent where the rate is 0); every forward, backward and
# Adam step uses them, as the R test passes the same masks to each call.
# Written under fixtures/dropout/, which test-parity-dropout.R reads.
DROPOUT_CONFIGS = [
    dict(name="both_two_layers", input_dim=2, hidden_dims=[4, 3], kernel_sizes=[3, 3],
         bias=True, B=2, T=4, H=6, W=5, target="sequence", weight_decay=0.01,
         dropout=[0.3, 0.2], recurrent_dropout=[0.25, 0.4]),
    dict(name="mixed_last_state", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=3, T=3, H=5, W=6, target="last_state", weight_decay=0.01,
         dropout=[0.5, 0.0], recurrent_dropout=[0.0, 0.3]),
    # per-gate masks (Keras's default, convlstm()'s too): mask_x/<l> and
    # mask_h/<l> are [B, 4, C, H, W], gate g's copy convolved with its own
    # weight rows (four convolutions, torch_convlstm.py)
    dict(name="gate_two_layers", input_dim=2, hidden_dims=[4, 3], kernel_sizes=[3, 3],
         bias=True, B=2, T=4, H=6, W=5, target="sequence", weight_decay=0.01,
         dropout=[0.3, 0.2], recurrent_dropout=[0.25, 0.4], dropout_masks="per_gate"),
    dict(name="gate_mixed_last", input_dim=2, hidden_dims=[3, 2],
         kernel_sizes=[3, 3], bias=True, B=3, T=3, H=5, W=6,
         target="last_state", weight_decay=0.01, dropout=[0.5, 0.0],
         recurrent_dropout=[0.0, 0.3], dropout_masks="per_gate"),
]


def pairs(values):
    return [(v, v) if isinstance(v, int) else tuple(v) for v in values]


class Writer:
    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(folder):  # a rerun must not leave stale tensors behind
            os.remove(os.path.join(folder, f))
        self.lines = ["convlstm-fixture %d" % FORMAT_VERSION]
        self.paths = []  # written and not yet asked of `file` (looks_executable)
        self.executable = False

    def config(self, key, *values):
        self.lines.append(" ".join(["config", key] + [str(v) for v in values]))

    def info(self, key, value):
        self.lines.append("info %s %s" % (key, value))

    def file_name(self, name):
        """The file a tensor's bytes go to (the manifest maps the name to it)."""
        return name.replace("/", "__") + ".bin"

    def tensor(self, name, t):
        t = t.detach().to(torch.float32).contiguous()
        fname = self.file_name(name)
        # the bytes of a contiguous float32 tensor, forced little-endian, are the format
        path = os.path.join(self.folder, fname)
        with open(path, "wb") as f:
            f.write(t.numpy().astype("<f4").tobytes(order="C"))
        self.paths.append(path)
        dims = list(t.shape)
        self.lines.append(" ".join(["tensor", name, fname, str(len(dims))] + [str(d) for d in dims]))

    @property
    def looks_executable(self):
        # R CMD check warns of an undeclared executable where `file` takes a
        # file for a program (random floats can open like a DOS .COM): ask it,
        # once for the tensors written since the last question (a seed search
        # asks once per attempt, not once per tensor)
        if self.paths and shutil.which("file"):
            kinds = subprocess.run(["file", "-b"] + self.paths, capture_output=True,
                                   text=True).stdout
            self.executable = self.executable or "executable" in kinds
        self.paths = []
        return self.executable

    def close(self):
        with open(os.path.join(self.folder, "manifest.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def max_rel(a, b):
    """Largest |a - b| relative to the largest |b|: the measure the R tests use."""
    scale = b.abs().max().item()
    return (a.double() - b.double()).abs().max().item() / (scale if scale > 0 else 1.0)


def smallest_gradient(model, weight_decay):
    """Smallest nonzero |g| / max |g| over each tensor's effective Adam gradient.

    Adam moves a parameter by about lr * m / sqrt(v), which hardly depends on
    |g| but can flip with the sign of g: where g is as small as float32 noise
    (1e-7 of the largest), two correct implementations may step 2 * lr apart.
    Exact zeros are safe (no update either way).
    """
    worst = float("inf")
    for p in model.parameters():
        g = (p.grad + weight_decay * p).detach().abs()
        nz = g[g > 0]
        if nz.numel() > 0:
            worst = min(worst, (nz.min() / g.max()).item())
    return worst


def inputs(cfg, y_steps=None):
    """x [B, T, input_dim, H, W], then the target y [B, C, H, W] (last_state)
    or [B, T, C, H, W] (sequence; y_steps frames instead of T when given),
    C the last layer's hidden, drawn in that order."""
    B, T, H, W = cfg["B"], cfg["T"], cfg["H"], cfg["W"]
    x = torch.rand(B, T, cfg["input_dim"], H, W)
    c_last = cfg["hidden_dims"][-1]
    steps = y_steps or (None if cfg["target"] == "last_state" else T)
    y = torch.rand(B, steps, c_last, H, W) if steps else torch.rand(B, c_last, H, W)
    return x, y


def random_state(cfg):
    """An initial state per layer, (h, c) of tanh-range values as a real last
    state holds."""
    B, H, W = cfg["B"], cfg["H"], cfg["W"]
    return [(torch.rand(B, h, H, W) * 2 - 1, torch.rand(B, h, H, W) * 2 - 1)
            for h in cfg["hidden_dims"]]


def config_model(w, cfg):
    """The architecture's config records: input_dim, hidden_dims,
    kernel_sizes (kernel_widths, dilation_h, dilation_w when a kernel is not
    square or dilations are given; recurrent_kernel_sizes and _widths when
    given), bias, peephole (frame_size per position)."""
    w.config("input_dim", cfg["input_dim"])
    w.config("hidden_dims", *cfg["hidden_dims"])
    kernels = pairs(cfg["kernel_sizes"])
    w.config("kernel_sizes", *[k[0] for k in kernels])
    if "dilations" in cfg or any(kh != kw for kh, kw in kernels):
        dil = pairs(cfg.get("dilations") or [1] * len(kernels))
        w.config("kernel_widths", *[k[1] for k in kernels])
        w.config("dilation_h", *[d[0] for d in dil])
        w.config("dilation_w", *[d[1] for d in dil])
    if cfg.get("recurrent_kernel_sizes"):
        rks = pairs(cfg["recurrent_kernel_sizes"])
        w.config("recurrent_kernel_sizes", *[k[0] for k in rks])
        w.config("recurrent_kernel_widths", *[k[1] for k in rks])
    w.config("bias", "TRUE" if cfg["bias"] else "FALSE")
    if "peephole" in cfg:
        w.config("peephole", cfg["peephole"])
        if cfg["peephole"] == "position":
            w.config("frame_size", cfg["H"], cfg["W"])


def config_run(w, cfg):
    """The data's and the Adam steps' config records."""
    for k in ("B", "T", "H", "W", "target"):
        w.config(k, cfg[k])
    w.config("adam_lr", ADAM_LR)
    w.config("adam_weight_decay", cfg["weight_decay"])
    w.config("adam_steps", ADAM_STEPS)


def info_seed(w, seed):
    w.info("torch_version", torch.__version__)
    w.info("seed", seed)


def write_inputs(w, model, x, y):
    """The initial weights/<name>, x and y."""
    for k, v in model.state_dict().items():
        w.tensor("weights/" + k, v)
    w.tensor("x", x)
    w.tensor("y", y)


def write_masks(w, masks):
    """Dropout masks mask_x/<l>, mask_h/<l> (None: not written)."""
    for l, (mx, mh) in enumerate(masks or []):
        if mx is not None:
            w.tensor("mask_x/%d" % l, mx)
        if mh is not None:
            w.tensor("mask_h/%d" % l, mh)


def write_state(w, state):
    for l, (h, c) in enumerate(state):
        w.tensor("state_h/%d" % l, h)
        w.tensor("state_c/%d" % l, c)


def write_forward(w, model, x, y, target, masks=None, state=None):
    """A forward from zeros (or the initial state, with dropout masks, if
    given), its MSE against y and one backward, in float32: records
    output/<l>, last_h/<l>, last_c/<l>, loss and grad/<name>."""
    model.zero_grad()
    out = model(x, state=state, masks=masks)
    loss = F.mse_loss(prediction(out, target), y)
    loss.backward()
    for l, o in enumerate(out[0]):
        w.tensor("output/%d" % l, o)
    for l, (h, c) in enumerate(out[1]):
        w.tensor("last_h/%d" % l, h)
        w.tensor("last_c/%d" % l, c)
    w.tensor("loss", loss.reshape(1))
    for k, p in model.named_parameters():
        w.tensor("grad/" + k, p.grad)
    return out, loss


def write_steps(w, model, opt, losses):
    """An optimizer's records after its steps: <opt>_losses (the loss of
    each step, before its update) and <opt>_params/<name>."""
    w.tensor(opt + "_losses", torch.tensor(losses))
    for k, v in model.state_dict().items():
        w.tensor(opt + "_params/" + k, v)


def adam_steps(model, x, y, target, weight_decay, masks=None):
    """ADAM_STEPS steps of zero_grad, forward (with the dropout masks, if
    given), loss, backward, update; the loss recorded is the one before the
    update, as train_step returns it. Returns the losses and the smallest
    gradient ratio seen."""
    opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR, weight_decay=weight_decay)
    losses = []
    ratio = float("inf")
    for _ in range(ADAM_STEPS):
        opt.zero_grad()
        l = F.mse_loss(prediction(model(x, masks=masks), target), y)
        l.backward()
        ratio = min(ratio, smallest_gradient(model, weight_decay))
        opt.step()
        losses.append(l.item())
    return losses, ratio


def fixture_root(*sub):
    """Where a generator writes: its first argument, else sub under
    tests/testthat/fixtures/."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "tests", "testthat", "fixtures", *sub)


def make_all(configs, make, root, base, width, show=str, only=(), prefix=""):
    """Each config (only those named in `only`, when given) from its first
    good seed (base + 1000 i on, i its place in configs, whatever is asked),
    with one thread (reproducible reductions); prints prefix, its name padded
    to width, and show(what make returns)."""
    torch.set_num_threads(1)
    for i, cfg in enumerate(configs):
        if only and cfg["name"] not in only:
            continue
        res = first_good_seed(make, cfg, root, base + 1000 * i)
        print("%s%-*s %s" % (prefix, width, cfg["name"], show(res)))


def first_good_seed(make, cfg, root, base):
    """make(cfg, root, seed) for seeds base, base + 1, ... until one gives a
    usable fixture (make returns not None: well-conditioned steps, files that
    `file` takes for no program); its result."""
    for attempt in range(1000):
        res = make(cfg, root, seed=base + attempt)
        if res is not None:
            return res
    sys.exit("no seed of 1000 gives a usable fixture for " + cfg["name"])


def start_fixture(cfg, root, seed, model):
    """A fixture's start, after its model is drawn: x and y (and dropout
    masks where cfg has dropout) drawn, the folder root/<name> begun with the
    config, the seed, the initial weights, x, y and the masks.
    Returns (writer, x, y, masks or None)."""
    x, y = inputs(cfg)
    masks = None
    if "dropout" in cfg:
        masks = dropout_masks(model, cfg["B"], cfg["H"], cfg["W"], cfg["dropout"],
                              cfg["recurrent_dropout"],
                              per_gate=cfg.get("dropout_masks") == "per_gate")

    w = Writer(os.path.join(root, cfg["name"]))
    config_model(w, cfg)
    if masks is not None:
        w.config("dropout", *cfg["dropout"])
        w.config("recurrent_dropout", *cfg["recurrent_dropout"])
        if "dropout_masks" in cfg:  # absent: shared (the fixtures from before)
            w.config("dropout_masks", cfg["dropout_masks"])
    config_run(w, cfg)
    info_seed(w, seed)
    write_inputs(w, model, x, y)
    write_masks(w, masks)
    return w, x, y, masks


def make(cfg, root, seed):
    torch.manual_seed(seed)
    model = ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"],
                     cfg.get("dilations"))
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    w, x, y, masks = start_fixture(cfg, root, seed, model)

    # forward, loss and one backward, in float32
    out, loss = write_forward(w, model, x, y, cfg["target"], masks)

    # the same in float64: how far float32 itself is from exact
    m64 = ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"],
                   cfg.get("dilations")).double()
    m64.load_state_dict({k: v.double() for k, v in initial.items()})
    m64_masks = None if masks is None else [
        tuple(None if m is None else m.double() for m in pair) for pair in masks]
    out64 = m64(x.double(), masks=m64_masks)
    loss64 = F.mse_loss(prediction(out64, cfg["target"]), y.double())
    loss64.backward()
    out_err = max(max_rel(a, b) for a, b in zip(out[0], out64[0]))
    grad_err = max(max_rel(p.grad, q.grad) for p, q in zip(model.parameters(), m64.parameters()))
    w.info("f32_vs_f64_max_rel_output", "%.3e" % out_err)
    w.info("f32_vs_f64_rel_loss", "%.3e" % abs(loss.item() / loss64.item() - 1))
    w.info("f32_vs_f64_max_rel_grad", "%.3e" % grad_err)

    # Adam (adam_steps), with the same masks at every step
    losses, ratio = adam_steps(model, x, y, cfg["target"], cfg["weight_decay"], masks)
    if ratio < MIN_GRAD_RATIO or w.looks_executable:
        return None
    w.info("adam_min_grad_ratio", "%.3e" % ratio)
    with torch.no_grad():
        after = F.mse_loss(prediction(model(x, masks=masks), cfg["target"]), y)
    w.tensor("adam_losses", torch.tensor(losses))
    w.tensor("adam_loss_after", after.reshape(1))
    for k, v in model.state_dict().items():
        w.tensor("adam_params/" + k, v)
    w.close()
    return out_err, grad_err, losses, after.item()


def summary(res):
    """What main prints of make's result."""
    out_err, grad_err, losses, after = res
    return "f32 vs f64: output %.1e, grad %.1e; adam losses %s -> %.5f" % (
        out_err, grad_err, " ".join("%.5f" % l for l in losses), after)


def main():
    root = fixture_root()
    only = sys.argv[2:]  # config names: write just those (the others stay as committed)
    make_all(CONFIGS, make, root, 20201217, 18, summary, only)
    make_all(DROPOUT_CONFIGS, make, os.path.join(root, "dropout"), 20261123, 18, summary, only,
             "dropout/")


if __name__ == "__main__":
    main()
