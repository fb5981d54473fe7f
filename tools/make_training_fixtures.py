#!/usr/bin/python3
"""make_training_fixtures.py -- PyTorch reference runs of whole training steps
with the options of issue #13: gradient clipping by global norm
(clip_grad_norm_), AdamW and Adam's amsgrad, and the losses L1, Huber and
BCE with logits, for tests/testthat/test-train.R; RMSprop (plain, momentum,
centered, weight decay) and the losses' reductions "sum" and "batchmean"
(the sum over everything but the batch, averaged over the batch: Shi et
al.'s cross-entropy per sequence), for tests/testthat/test-optim-loss.R.

A developer tool, not part of the package: it needs PyTorch 1.13 (Debian's
python3-torch; run it with /usr/bin/python3) and is rerun only when a case is
added. Its output is committed, in make_fixtures.py's format (version 1), one
folder per case under tests/testthat/fixtures/training/ (a level below the
parity fixtures, which test-parity-torch.R walks):
  config   the model (input_dim, hidden_dims, kernel_sizes, bias, B, T, H, W,
           target), the optimizer (optimizer, lr, weight_decay, momentum,
           beta2, amsgrad; RMSprop's cases alpha, eps, centered), the loss (loss,
           delta, pos_weight; a reduced case reduction), max_grad_norm (0: none)
           and steps
  tensors  weights/<name> (initial), x, y, losses (each step's, before its
           update), grad_norms (each step's norm before clipping, 0 without
           clipping), grad/<name> (the first step's gradient, before
           clipping), params/<name> (after the last step), and for a
           case with weight=True the per-element loss weight `weight` (y's
           shape, in [0, 2) with about a quarter zeros)
Each step is torch's: zero_grad, forward, the loss (mse_loss, l1_loss,
huber_loss, binary_cross_entropy_with_logits; mean-reduced unless the case
names its reduction: "sum", or "batchmean" = reduction="sum" / B), backward,
clip_grad_norm_, optimizer.step. For bce_logits, y is 0/1. A weighted case's
loss is torch's unreduced loss times the weight, then .mean().
Arguments: [ROOT [CASE...]]: the output folder, and only the cases named.
"""

import os
import sys

import torch
import torch.nn.functional as F

from make_fixtures import Writer, prediction, smallest_gradient, MIN_GRAD_RATIO
from torch_convlstm import ConvLSTM

MODEL = dict(input_dim=2, hidden_dims=[4, 2], kernel_sizes=[3, 3], bias=True,
             B=2, T=3, H=6, W=5, target="last_state")

# clip: max_grad_norm as a fraction of the first step's norm (so that the
# first step clips, and later ones may not); 0 for no clipping
CASES = [
    dict(name="clip_adam", optimizer="adam", lr=1e-2, weight_decay=0.0, clip=0.5, steps=3),
    dict(name="clip_sgd_momentum", optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.01,
         clip=0.9, steps=3),
    dict(name="adamw", optimizer="adamw", lr=1e-2, weight_decay=0.1, clip=0, steps=3),
    # beta2 0.5: the second moment falls at some elements within 4 steps,
    # so that amsgrad's running maximum differs from it
    dict(name="adam_amsgrad", optimizer="adam", lr=1e-2, weight_decay=0.01, amsgrad=True,
         beta2=0.5, clip=0, steps=4),
    dict(name="loss_mae", optimizer="sgd", lr=0.1, weight_decay=0.0, loss="mae", clip=0,
         steps=2),
    # delta within the differences' range, so both branches occur
    dict(name="loss_huber", optimizer="sgd", lr=0.1, weight_decay=0.0, loss="huber",
         delta=0.3, clip=0, steps=2),
    dict(name="loss_bce_logits", optimizer="sgd", lr=0.1, weight_decay=0.0, loss="bce_logits",
         pos_weight=2.5, clip=0, steps=2),
    # a per-element weight, zeros masking elements: (w * l).mean()
    dict(name="weighted_mse", optimizer="sgd", lr=0.1, weight_decay=0.0, weight=True, clip=0,
         steps=2),
    dict(name="weighted_huber", optimizer="adam", lr=1e-2, weight_decay=0.0, loss="huber",
         delta=0.3, weight=True, clip=0, steps=2),
    dict(name="weighted_bce_logits", optimizer="sgd", lr=0.1, weight_decay=0.0,
         loss="bce_logits", pos_weight=2.5, weight=True, clip=0, steps=2),
    # torch.optim.RMSprop: its defaults (lr 0.01, alpha 0.99, eps 1e-8), then
    # momentum, centered and weight decay, each alone, then all of them
    dict(name="rmsprop", optimizer="rmsprop", lr=1e-3, weight_decay=0.0, clip=0, steps=4),
    dict(name="rmsprop_momentum", optimizer="rmsprop", lr=1e-3, weight_decay=0.0, momentum=0.9,
         clip=0, steps=4),
    dict(name="rmsprop_centered", optimizer="rmsprop", lr=1e-3, weight_decay=0.0, centered=True,
         clip=0, steps=4),
    dict(name="rmsprop_weight_decay", optimizer="rmsprop", lr=1e-3, weight_decay=0.05,
         alpha=0.9, clip=0, steps=4),
    dict(name="rmsprop_all", optimizer="rmsprop", lr=1e-3, weight_decay=0.01, momentum=0.5,
         alpha=0.8, eps=1e-6, centered=True, clip=0.5, steps=4),
    # the paper's cross-entropy: BCE with logits summed per sequence (batchmean),
    # and torch's plain sum; a weighted one (SGD: RMSprop's first steps are
    # sign-like, and 1000 seeds gave none well-conditioned for these losses)
    dict(name="bce_batchmean", optimizer="sgd", lr=1e-2, weight_decay=0.0,
         loss="bce_logits", reduction="batchmean", clip=0, steps=3),
    dict(name="bce_sum", optimizer="sgd", lr=1e-3, weight_decay=0.0, loss="bce_logits",
         reduction="sum", clip=0, steps=2),
    dict(name="mse_sum_weighted", optimizer="sgd", lr=1e-3, weight_decay=0.0,
         reduction="sum", weight=True, clip=0, steps=2),
]


def make_optimizer(case, params):
    amsgrad = case.get("amsgrad", False)
    betas = (0.9, case.get("beta2", 0.999))
    if case["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=case["lr"], betas=betas,
                                weight_decay=case["weight_decay"], amsgrad=amsgrad)
    if case["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=case["lr"], betas=betas,
                                 weight_decay=case["weight_decay"], amsgrad=amsgrad)
    if case["optimizer"] == "rmsprop":
        return torch.optim.RMSprop(params, lr=case["lr"], alpha=case.get("alpha", 0.99),
                                   eps=case.get("eps", 1e-8), weight_decay=case["weight_decay"],
                                   momentum=case.get("momentum", 0.0),
                                   centered=case.get("centered", False))
    return torch.optim.SGD(params, lr=case["lr"], momentum=case.get("momentum", 0.0),
                           weight_decay=case["weight_decay"])


def loss_of(case, pred, y, weight=None):
    kind = case.get("loss", "mse")
    reduction = case.get("reduction", "mean")
    red = "none"
    if weight is None and reduction != "batchmean":
        red = reduction
    if kind == "mae":
        l = F.l1_loss(pred, y, reduction=red)
    elif kind == "huber":
        l = F.huber_loss(pred, y, delta=case["delta"], reduction=red)
    elif kind == "bce_logits":
        l = F.binary_cross_entropy_with_logits(
            pred, y, pos_weight=torch.tensor(case.get("pos_weight", 1.0)), reduction=red)
    else:
        l = F.mse_loss(pred, y, reduction=red)
    if weight is not None:
        l = weight * l
    if reduction == "batchmean":  # torch's KLDivLoss name: the sum over the batch size
        return l.sum() / pred.shape[0]
    if weight is None:
        return l
    return l.sum() if reduction == "sum" else l.mean()


def first_norm(case, model, x, y, weight):
    model.zero_grad()
    loss_of(case, prediction(model(x), MODEL["target"]), y, weight).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    model.zero_grad()
    return norm


def make(case, root, seed):
    torch.manual_seed(seed)
    m = MODEL
    model = ConvLSTM(m["input_dim"], m["hidden_dims"], m["kernel_sizes"], m["bias"])
    x = torch.rand(m["B"], m["T"], m["input_dim"], m["H"], m["W"])
    y = torch.rand(m["B"], m["hidden_dims"][-1], m["H"], m["W"])
    if case.get("loss") == "bce_logits":
        y = (y > 0.5).float()
    weight = None
    if case.get("weight"):
        weight = 2 * torch.rand(y.shape) * (torch.rand(y.shape) > 0.25).float()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # a round number, so that R gets exactly the float torch used
    max_norm = 0.0
    if case["clip"]:
        max_norm = float("%.3g" % (case["clip"] * first_norm(case, model, x, y, weight)))

    opt = make_optimizer(case, model.parameters())
    decay = case["weight_decay"] if case["optimizer"] != "adamw" else 0.0
    losses, norms, ratio, grads = [], [], float("inf"), None
    for _ in range(case["steps"]):
        opt.zero_grad()
        loss = loss_of(case, prediction(model(x), m["target"]), y, weight)
        loss.backward()
        if grads is None:
            grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        norm = 0.0
        if max_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()
        if case["optimizer"] != "sgd":
            ratio = min(ratio, smallest_gradient(model, decay))
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
    if ratio < MIN_GRAD_RATIO:
        return None

    w = Writer(os.path.join(root, case["name"]))
    w.config("input_dim", m["input_dim"])
    w.config("hidden_dims", *m["hidden_dims"])
    w.config("kernel_sizes", *m["kernel_sizes"])
    w.config("bias", "TRUE")
    for k in ("B", "T", "H", "W", "target"):
        w.config(k, m[k])
    w.config("optimizer", case["optimizer"])
    w.config("lr", case["lr"])
    w.config("weight_decay", case["weight_decay"])
    w.config("momentum", case.get("momentum", 0.0))
    w.config("beta2", case.get("beta2", 0.999))
    w.config("amsgrad", "TRUE" if case.get("amsgrad", False) else "FALSE")
    w.config("max_grad_norm", repr(max_norm))
    w.config("loss", case.get("loss", "mse"))
    w.config("delta", case.get("delta", 1.0))
    w.config("pos_weight", case.get("pos_weight", 1.0))
    w.config("steps", case["steps"])
    # only where a case sets them, so that the other cases' files stay as they were
    if case["optimizer"] == "rmsprop":
        w.config("alpha", case.get("alpha", 0.99))
        w.config("eps", case.get("eps", 1e-8))
        w.config("centered", "TRUE" if case.get("centered", False) else "FALSE")
    if "reduction" in case:
        w.config("reduction", case["reduction"])
    w.info("torch_version", torch.__version__)
    w.info("seed", seed)
    for k, v in initial.items():
        w.tensor("weights/" + k, v)
    w.tensor("x", x)
    w.tensor("y", y)
    if weight is not None:
        w.tensor("weight", weight)
    w.tensor("losses", torch.tensor(losses))
    w.tensor("grad_norms", torch.tensor(norms))
    for k, v in grads.items():
        w.tensor("grad/" + k, v)
    for k, v in model.state_dict().items():
        w.tensor("params/" + k, v)
    if w.looks_executable:  # R CMD check would take a tensor's bytes for a program
        return None
    w.close()
    return losses, norms, max_norm


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.join(here, "..", "tests", "testthat", "fixtures", "training")
    if len(sys.argv) > 1:
        root = sys.argv[1]
    torch.set_num_threads(1)  # reproducible reductions
    only = sys.argv[2:]
    for i, case in enumerate(CASES):
        if only and case["name"] not in only:
            continue
        for attempt in range(1000):
            res = make(case, root, seed=20261122 + 1000 * i + attempt)
            if res is not None:
                break
        else:
            sys.exit("no seed gives well-conditioned Adam steps (and files no `file` takes "
                     "for a program) for " + case["name"])
        losses, norms, max_norm = res
        print("%-20s max_grad_norm %-8g losses %s norms %s" % (
            case["name"], max_norm, " ".join("%.5f" % l for l in losses),
            " ".join("%.4f" % n for n in norms)))


if __name__ == "__main__":
    main()
