#!/usr/bin/python3
"""bench/paper_mnist.py -- PyTorch's side of the paper check (Shi et al.
2015, Moving MNIST; bench/README.md, "The paper check"): the
encoder-forecaster (EncoderForecaster, inst/python/torch_convlstm.py) trained
with the paper's set-up, RMSprop (lr 1e-3, decay alpha 0.9) on the
cross-entropy of the 10 predicted 64x64 frames summed per sequence
(BCEWithLogits, sum / batch: the package's reduction = "batchmean"), frames
entering as 4x4 patches. bench/paper_mnist.R runs the same with the package,
from the same initial weights and data; bench/paper_mnist_compare.R puts the
two side by side.

  /usr/bin/python3 bench/paper_mnist.py [--dir build/paper_mnist]
      [--hidden 16,16] [--kernel 5] [--rkernel K] [--patch 4] [--batch 8] [--steps 300]
      [--budget-s 0] [--threads 1] [--seed 1] [--device cpu] [--twin none|ulp|f64]
      [--twin-steps 0] [--lr 1e-3] [--alpha 0.9] [--eps 1e-8]

Reads DIR/train.u8, DIR/test.u8, DIR/data.txt (bench/paper_mnist_data.R).
Writes DIR/init.safetensors (the initial weights, torch's default
initialisation from --seed, peepholes zero as convlstm_forecaster() starts
them; reused, not redrawn, when it exists and fits the model), and
DIR/torch_losses.csv (step, loss, seconds of the step; with --twin also
the loss of a twin trained in lockstep on the same batches: "f64", the same
weights in float64, how far float32 rounding alone moves the curve; "ulp",
float32 with every initial weight moved one ulp up or down at random, how
far a difference of float32's size grows over the steps -- both an
instrument for "within float tolerance", the ulp twin at float32's cost,
the f64 twin about 20 times slower on the CPU; --twin-steps K: only over
the first K steps) and DIR/torch_result.txt. Step s (from 0)
trains on sequences s*B .. s*B + B - 1 of the training set (wrapping
around), in file order. Prints the loss per step and, at the end, the test
cross-entropy per sequence (before and after training), the
constant-prediction baseline and the floor (the targets' own entropy).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "inst", "python"))
from safetensors_check import read_plain, write_plain  # noqa: E402
from torch_convlstm import EncoderForecaster  # noqa: E402

T_IN = T_OUT = 10
# Shi et al. (2015), Table 1: cross-entropy per test sequence (10 frames)
TABLE1 = [("FC-LSTM-2048-2048", 4832.49),
          ("ConvLSTM(5x5)-5x5-256", 3887.94),
          ("ConvLSTM(5x5)-5x5-128-5x5-128", 3733.56),
          ("ConvLSTM(5x5)-5x5-128-5x5-64-5x5-64", 3670.85)]


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=os.path.join("build", "paper_mnist"))
    p.add_argument("--hidden", default="16,16")
    p.add_argument("--kernel", type=int, default=5)
    p.add_argument("--rkernel", type=int, default=0,
                   help="the state-to-state kernel (0: --kernel), e.g. 1 for Table 1's 9x9-1x1 rows")
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--budget-s", type=float, default=0, help="stop after this many seconds (0: none)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3, help="RMSprop's (the paper's 1e-3)")
    p.add_argument("--alpha", type=float, default=0.9, help="RMSprop's decay (the paper's 0.9)")
    p.add_argument("--eps", type=float, default=1e-8, help="RMSprop's (torch's default 1e-8)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--twin", choices=["none", "ulp", "f64"], default="none",
                   help="train a twin alongside: float64, or float32 one ulp away")
    p.add_argument("--twin-steps", type=int, default=0, help="the twin's steps (0: all)")
    return p.parse_args()


def read_info(d):
    with open(os.path.join(d, "data.txt")) as f:
        return dict(line.split(" ", 1) for line in f.read().splitlines())


def read_u8(path, n, size):
    """[n, 20, 1, size, size] bytes (converted batch by batch, frames)."""
    raw = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8)
    return raw.reshape(n, 20, 1, size, size)


def frames(u8):
    """Bytes -> float32 frames, byte / 255 computed in double and rounded
    once to float32, as R's doubles reach the package."""
    return (u8.double() / 255).float()


def bce_per_sequence(logits, y):
    """The paper's cross-entropy: summed over a sequence, averaged over the
    sequences (float64 sum)."""
    return F.binary_cross_entropy_with_logits(logits.double(), y.double(),
                                              reduction="sum").item() / logits.shape[0]


def test_ce(model, data, batch, device, dtype):
    total = 0.0
    with torch.no_grad():
        for i in range(0, data.shape[0], batch):
            s = frames(data[i:i + batch]).to(device, dtype)
            total += bce_per_sequence(model(s[:, :T_IN], T_OUT), s[:, T_IN:]) * s.shape[0]
    return total / data.shape[0]


def rkernels(args, hidden):
    return [args.rkernel] * len(hidden) if args.rkernel else None


def initial_weights(args, hidden):
    path = os.path.join(args.dir, "init.safetensors")
    torch.manual_seed(args.seed)
    model = EncoderForecaster(1, hidden, [args.kernel] * len(hidden), patch=args.patch,
                              recurrent_kernel_sizes=rkernels(args, hidden))
    if os.path.exists(path):
        sd, _ = read_plain(path)
        ours = model.state_dict()
        if sorted(sd) == sorted(ours) and all(sd[k].shape == ours[k].shape for k in sd):
            model.load_state_dict(sd)
            return model, "read from " + path
    write_plain(path, model.state_dict())
    return model, "written to " + path


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    hidden = [int(v) for v in args.hidden.split(",")]
    info = read_info(args.dir)
    n_train, n_test, size = int(info["n_train"]), int(info["n_test"]), int(info["size"])
    train = read_u8(os.path.join(args.dir, "train.u8"), n_train, size)
    test = read_u8(os.path.join(args.dir, "test.u8"), n_test, size)
    model, how = initial_weights(args, hidden)
    n_par = sum(p.numel() for p in model.parameters())
    dev = torch.device(args.device)
    twin, twin_dtype = None, torch.float64 if args.twin == "f64" else torch.float32
    if args.twin != "none":
        twin = EncoderForecaster(1, hidden, [args.kernel] * len(hidden), patch=args.patch,
                              recurrent_kernel_sizes=rkernels(args, hidden))
        twin.load_state_dict(model.state_dict())
        if args.twin == "ulp":
            g = torch.Generator().manual_seed(args.seed + 1)
            with torch.no_grad():
                for q in twin.parameters():
                    up = torch.rand(q.shape, generator=g) < 0.5
                    q.copy_(torch.nextafter(q, torch.where(up, torch.tensor(float("inf")),
                                                           torch.tensor(float("-inf")))))
        twin = twin.to(dev, twin_dtype)
    model = model.to(dev)
    print("paper_mnist.py: torch %s, %s, %d threads; hidden %s, kernel %d-%d, patch %d: %d parameters; "
          "weights %s; %d training / %d test sequences, batch %d"
          % (torch.__version__, dev, args.threads, args.hidden, args.kernel,
             args.rkernel or args.kernel, args.patch, n_par,
             how, n_train, n_test, args.batch), flush=True)

    def rmsprop(m):  # the paper's: lr 1e-3, decay rate 0.9; torch's eps 1e-8
        return torch.optim.RMSprop(m.parameters(), lr=args.lr, alpha=args.alpha, eps=args.eps)
    opts = [rmsprop(model)] + ([rmsprop(twin)] if twin is not None else [])
    ce0 = test_ce(model, test, args.batch, dev, torch.float32)
    # written step by step, so that a run cut short (a budget, a lost
    # session) keeps its curve
    csv = open(os.path.join(args.dir, "torch_losses.csv"), "w")
    csv.write("step,loss,seconds" + (",loss_" + args.twin if args.twin != "none" else "") + "\n")
    rows, t_start = [], time.perf_counter()
    for step in range(args.steps):
        idx = [(step * args.batch + k) % n_train for k in range(args.batch)]
        seqs = frames(train[idx]).to(dev)
        t0 = time.perf_counter()
        opts[0].zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(seqs[:, :T_IN], T_OUT), seqs[:, T_IN:],
                                                  reduction="sum") / args.batch
        loss.backward()
        opts[0].step()
        value = loss.item()
        secs = time.perf_counter() - t0
        row = [step + 1, value, secs]
        if twin is not None and args.twin_steps and step == args.twin_steps:
            twin = None
        if twin is not None:
            s64 = seqs.to(twin_dtype)
            opts[1].zero_grad()
            l64 = F.binary_cross_entropy_with_logits(twin(s64[:, :T_IN], T_OUT), s64[:, T_IN:],
                                                     reduction="sum") / args.batch
            l64.backward()
            opts[1].step()
            row.append(l64.item())
        rows.append(row)
        cells = row + ["NA"] * (4 - len(row)) if args.twin != "none" else row
        csv.write(",".join("%d" % v if i == 0 else v if v == "NA" else "%.9g" % v
                           for i, v in enumerate(cells)) + "\n")
        csv.flush()
        print("step %4d  loss %.4f  %.3fs%s" % (step + 1, value, secs,
              "  %s twin %.4f" % (args.twin, row[3]) if twin is not None else ""), flush=True)
        if args.budget_s and time.perf_counter() - t_start > args.budget_s:
            break
    wall = time.perf_counter() - t_start
    ce1 = test_ce(model, test, args.batch, dev, torch.float32)

    y = test[:, T_IN:].double() / 255
    p = (train[:, T_IN:].double().mean() / 255).clamp(1e-6, 1 - 1e-6)
    const = -(y * torch.log(p) + (1 - y) * torch.log1p(-p)).sum().item() / n_test
    floor = -(torch.xlogy(y, y) + torch.xlogy(1 - y, 1 - y)).sum().item() / n_test

    csv.close()
    secs = sorted(r[2] for r in rows)
    result = [
        ("side", "pytorch"), ("torch", torch.__version__), ("device", str(dev)),
        ("threads", args.threads), ("hidden", args.hidden), ("kernel", args.kernel),
        ("rkernel", args.rkernel or args.kernel),
        ("patch", args.patch), ("parameters", n_par), ("batch", args.batch),
        ("lr", args.lr), ("alpha", args.alpha), ("eps", args.eps),
        ("steps", len(rows)), ("seconds_per_step_median", "%.4f" % secs[len(secs) // 2]),
        ("wall_seconds", "%.1f" % wall), ("loss_first", "%.4f" % rows[0][1]),
        ("loss_last", "%.4f" % rows[-1][1]),
        ("test_ce_before", "%.2f" % ce0), ("test_ce_after", "%.2f" % ce1),
        ("test_ce_constant", "%.2f" % const), ("test_ce_floor", "%.2f" % floor),
    ]
    if args.twin != "none":
        rows_t = [r for r in rows if len(r) > 3]
        result.append(("twin_steps", len(rows_t)))
        result.append(("max_abs_loss_vs_%s_twin" % args.twin,
                       "%.4g" % max(abs(r[1] - r[3]) for r in rows_t)))
        result.append(("max_rel_loss_vs_%s_twin" % args.twin,
                       "%.3g" % max(abs(r[1] - r[3]) / abs(r[3]) for r in rows_t)))
    with open(os.path.join(args.dir, "torch_result.txt"), "w") as f:
        f.write("".join("%s %s\n" % kv for kv in result))
    print("\n".join("%s %s" % kv for kv in result))
    print("Table 1 (Shi et al. 2015; full models, 10,000 training sequences, to convergence):")
    for name, v in TABLE1:
        print("  %-40s %8.2f" % (name, v))
    print("This is a reduced CPU run (hidden %s, %d training sequences, %d steps): not the paper's "
          "experiment; its figure is not comparable to Table 1's." % (args.hidden, n_train, len(rows)))


if __name__ == "__main__":
    main()
