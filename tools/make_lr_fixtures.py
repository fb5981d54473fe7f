#!/usr/bin/python3
"""make_lr_fixtures.py -- the learning rates PyTorch's schedulers give, step by
step, for tests/testthat/test-schedulers.R (lr_step(), lr_multiplicative(),
lr_cosine_annealing() with and without warm-up, lr_one_cycle(),
lr_reduce_on_plateau()).

A developer tool, not part of the package: it needs PyTorch (Debian's
python3-torch; run it with /usr/bin/python3) and is rerun only when a case is
added. Its output is committed:

  tests/testthat/fixtures/lr_schedules/schedules.csv
    case,step,lr,momentum
  one row per case and step: step 0 is the value right after the scheduler is
  made, step k the value after k calls of scheduler.step(). momentum is Adam's
  beta1 (or SGD's momentum) where the schedule cycles it, else empty. Values
  are written with 17 significant digits (doubles, exactly as torch holds
  them in param_groups).

The R side makes each case with the arguments written beside it below.
"""

import math
import os
import sys

import torch

STEPS = 25
# the metric fed to ReduceLROnPlateau at each step: falls, then stalls, with
# tiny improvements below the relative threshold and one real improvement
PLATEAU_METRIC = [1.0, 0.8, 0.7, 0.7, 0.69995, 0.7, 0.71, 0.7, 0.6, 0.6, 0.6, 0.6,
                  0.6, 0.6, 0.59, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]


def adam(lr):
    return torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=lr)


def sgd(lr, momentum):
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr, momentum=momentum)


def warmup_cosine(opt, warmup, start_factor, T_max, eta_min):
    # lr_cosine_annealing(warmup = , warmup_start_factor = ): linear warm-up,
    # then cosine annealing, as SequentialLR chains them
    s1 = torch.optim.lr_scheduler.LinearLR(opt, start_factor=start_factor, end_factor=1.0,
                                           total_iters=warmup)
    s2 = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T_max, eta_min=eta_min)
    return torch.optim.lr_scheduler.SequentialLR(opt, [s1, s2], milestones=[warmup])


S = torch.optim.lr_scheduler
CASES = [
    # name, optimizer, scheduler, momentum key or None, metric-driven
    ("step", lambda: adam(0.1), lambda o: S.StepLR(o, step_size=3, gamma=0.5), None),
    ("multiplicative", lambda: adam(0.1),
     lambda o: S.MultiplicativeLR(o, lr_lambda=lambda e: 0.9 if e % 2 == 1 else 0.99), None),
    ("cosine", lambda: adam(0.1), lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
     None),
    ("cosine_warmup", lambda: adam(0.1), lambda o: warmup_cosine(o, 4, 0.1, 10, 0.001), None),
    ("one_cycle_adam", lambda: adam(0.1),
     lambda o: S.OneCycleLR(o, max_lr=0.1, epochs=5, steps_per_epoch=5), "beta1"),
    ("one_cycle_sgd_linear_3phase", lambda: sgd(0.1, 0.9),
     lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=STEPS, pct_start=0.25,
                            anneal_strategy="linear", three_phase=True, div_factor=10,
                            final_div_factor=100, base_momentum=0.8, max_momentum=0.9),
     "momentum"),
    ("plateau", lambda: adam(0.1),
     lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=1e-3,
                                   cooldown=1, min_lr=0.01), None),
    ("plateau_max_abs", lambda: adam(0.1),
     lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.1, patience=1, threshold=0.05,
                                   threshold_mode="abs"), None),
]


def momentum_of(group, key):
    if key is None:
        return ""
    v = group["betas"][0] if key == "beta1" else group["momentum"]
    return "%.17g" % v


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "tests", "testthat", "fixtures", "lr_schedules",
                       "schedules.csv")
    if len(sys.argv) > 1:
        out = sys.argv[1]
    rows = ["case,step,lr,momentum"]
    for name, make_opt, make_sched, key in CASES:
        opt = make_opt()
        sched = make_sched(opt)
        g = opt.param_groups[0]
        rows.append("%s,0,%.17g,%s" % (name, g["lr"], momentum_of(g, key)))
        for k in range(1, STEPS + 1):
            opt.step()  # torch warns when a scheduler steps before its optimizer
            if name.startswith("plateau"):
                m = PLATEAU_METRIC[k - 1]
                sched.step(-m if name == "plateau_max_abs" else m)
            else:
                sched.step()
            rows.append("%s,%d,%.17g,%s" % (name, k, g["lr"], momentum_of(g, key)))
    with open(out, "w") as f:
        f.write("\n".join(rows) + "\n")
    print("wrote %d rows (torch %s) to %s" % (len(rows) - 1, torch.__version__, out))


if __name__ == "__main__":
    main()
