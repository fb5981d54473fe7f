#!/usr/bin/python3
"""make_fixtures_forecast.py -- PyTorch fixtures for forecasting: a given
initial state, a state carried between training steps, and multi-frame
rollouts. tests/testthat/test-parity-forecast.R reads them.

A developer tool like make_fixtures.py (same format, same Writer; PyTorch
1.13 CPU): rerun only when a config is added. It writes one folder per config
under tests/testthat/fixtures/forecast/ (a folder without a manifest, so the
plain parity test does not list it).

Records beyond make_fixtures.py's:
  state_given:  tensors state_h/<l>, state_c/<l> (the initial state); output/,
                last_h/, last_c/, loss, grad/ of a forward from it; Adam steps
                each from the same initial state.
  carry:        config chunk <k>; adam_losses are train steps on consecutive
                chunks of x and y (time steps k*i .. k*i+k-1), each starting
                from the previous step's last state, detached (the first from
                zeros); adam_params after them.
  rollout:      config horizon <K>; tensors frames (the rollout of x),
                frames_from_state (the rollout of x from state_h/ state_c/).
  teacher:      config horizon <K>; y [B, K, C, H, W] the frames after x;
                each step reads cat(x, y[:, :K-1]) and its loss is the MSE of
                the last layer's last K outputs against y (teacher forcing);
                grad/ of the first step, adam_losses, adam_params/.
  free_run:     config horizon <K>; y_frames [B, K, C, H, W] the frames after
                x; each step reads x, then its own last-layer h as the next
                K - 1 inputs (rollout() under autograd), its loss the MSE of
                the K predicted frames against y; grad/ of the first step,
                grad_detached/ the same with the fed-back frames detached
                (which must differ), adam_losses, adam_params/. With config
                dropout / recurrent_dropout: the masks mask_x/<l>, mask_h/<l>
                (dropout_masks(), None not written) applied at every step,
                the fed-back ones included; grad_nodropout/ (no masks) and
                grad_fed_unmasked/ (layer 0's input mask left off the
                fed-back frames) are what a step missing them would match.
  sampled:      scheduled sampling; config horizon <K>, choices_<i> (K - 1
                flags per Adam step i: 1 feeds that fed-back step the true
                frame y_frames[:, k], 0 the model's own); each step is
                rollout() with those choices, its loss the MSE of the K
                frames against y_frames; grad/ of the first step (choices_0),
                grad_free/ and grad_teacher/ the same with every step the
                model's own or every step the truth (which must differ),
                adam_losses, adam_params/. With dropout, masks as free_run.
A config with peephole (free_peep_*) also writes config peephole
<position|channel> (and frame_size <H> <W> per position); its peephole
weights start at random values, as in make_fixtures_peephole.py (zeros would
hide a dropped term).
"""

import os

import torch
import torch.nn.functional as F

from make_fixtures import ADAM_LR, ADAM_STEPS, Writer, config_model, config_run, fixture_root, \
    info_seed, inputs, make_all, prediction, random_state, smallest_gradient, write_forward, \
    write_inputs, write_masks, write_state, write_steps
from make_fixtures_peephole import random_peepholes
from torch_convlstm import ConvLSTM, dropout_masks, rollout

# A nonzero initial state reaches every weight at every step, so a few of
# the ~1000 gradients always lie near zero: the plain fixtures' bound (1e-4
# of a tensor's largest) is met by no seed. 1e-6 is still ten times float32's
# noise (about 1e-7 of the largest), so Adam cannot step the other way.
MIN_GRAD_RATIO = 1e-6

CONFIGS = [
    dict(name="state_given", kind="state_given", input_dim=1, hidden_dims=[3, 2],
         kernel_sizes=[3, 3], bias=True, B=2, T=3, H=5, W=4, target="last_state",
         weight_decay=0.0),
    dict(name="given_seq", kind="state_given", input_dim=1, hidden_dims=[3],
         kernel_sizes=[5], bias=False, B=2, T=2, H=5, W=5, target="sequence", weight_decay=0.1),
    dict(name="carry", kind="carry", input_dim=1, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=6, H=5, W=4, target="sequence", weight_decay=0.0, chunk=2),
    dict(name="carry_last", kind="carry", input_dim=2, hidden_dims=[3],
         kernel_sizes=[3], bias=True, B=3, T=6, H=6, W=6, target="last_state", weight_decay=0.0,
         chunk=3),
    dict(name="rollout", kind="rollout", input_dim=2, hidden_dims=[4, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=3, H=6, W=5, target="last_state", weight_decay=0.0, horizon=4),
    dict(name="teacher", kind="teacher", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=3, H=5, W=4, target="sequence", weight_decay=0.0, horizon=3),
    dict(name="free_run", kind="free_run", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=3, H=5, W=4, target="sequence", weight_decay=0.0, horizon=3),
    # three layers: the middle one's d_hidden passes through the rollout ring
    dict(name="free_run_deep", kind="free_run", input_dim=1, hidden_dims=[2, 3, 1],
         kernel_sizes=[3, 1, 3], bias=True, B=3, T=2, H=4, W=5, target="sequence",
         weight_decay=0.1, horizon=4),
    # one layer: the frame fed back is that layer's own h
    dict(name="free_run_one", kind="free_run", input_dim=2, hidden_dims=[2], kernel_sizes=[3],
         bias=False, B=2, T=1, H=5, W=5, target="sequence", weight_decay=0.0, horizon=3),
    # one frame fed back: the ring holds a single step
    dict(name="free_run_k2", kind="free_run", input_dim=1, hidden_dims=[3, 1], kernel_sizes=[3, 3],
         bias=True, B=2, T=3, H=4, W=4, target="sequence", weight_decay=0.0, horizon=2),
    # dropout on every layer's input and h: the fed-back steps (three layers:
    # the ring too) apply the same per-sequence masks (test-dropout.R)
    dict(name="free_drop", kind="free_run", input_dim=2, hidden_dims=[3, 2, 2],
         kernel_sizes=[3, 1, 3], bias=True, B=2, T=2, H=5, W=4, target="sequence",
         weight_decay=0.0, horizon=4, dropout=[0.3, 0.2, 0.25],
         recurrent_dropout=[0.25, 0.4, 0.3]),
    # peepholes: their gradient over the fed-back steps, and c's through them
    dict(name="free_peep_pos", kind="free_run", input_dim=1, hidden_dims=[3, 1],
         kernel_sizes=[3, 3], bias=True, B=2, T=2, H=5, W=4, target="sequence",
         weight_decay=0.0, horizon=3, peephole="position"),
    dict(name="free_peep_ch", kind="free_run", input_dim=2, hidden_dims=[2, 3, 2],
         kernel_sizes=[3, 1, 3], bias=False, B=2, T=2, H=4, W=5, target="sequence",
         weight_decay=0.1, horizon=4, peephole="channel"),
    # scheduled sampling: a different mix of true and own frames each step
    dict(name="sampled", kind="sampled", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, 3],
         bias=True, B=2, T=2, H=5, W=4, target="sequence", weight_decay=0.0, horizon=4,
         choices=[[1, 0, 1], [0, 1, 1], [1, 1, 0]]),
    # three layers (the ring), the first fed-back step its own, then truth
    dict(name="sampled_deep", kind="sampled", input_dim=1, hidden_dims=[2, 3, 1],
         kernel_sizes=[3, 1, 3], bias=True, B=3, T=2, H=4, W=5, target="sequence",
         weight_decay=0.1, horizon=4, choices=[[0, 1, 0], [1, 0, 0], [0, 0, 1]]),
    # dropout: the true frames take layer 0's input mask as the own ones do
    dict(name="sampled_drop", kind="sampled", input_dim=2, hidden_dims=[3, 2],
         kernel_sizes=[3, 3], bias=True, B=2, T=2, H=5, W=4, target="sequence",
         weight_decay=0.0, horizon=3, dropout=[0.3, 0.2], recurrent_dropout=[0.25, 0.4],
         choices=[[1, 0], [0, 1], [1, 0]]),
    # free_drop with per-gate masks ([B, 4, C, H, W]: each gate its own copy
    # of every input and h, the fed-back frames' too)
    dict(name="free_gate", kind="free_run", input_dim=2, hidden_dims=[3, 2, 2],
         kernel_sizes=[3, 1, 3], bias=True, B=2, T=2, H=5, W=4, target="sequence",
         weight_decay=0.0, horizon=4, dropout=[0.3, 0.2, 0.25],
         recurrent_dropout=[0.25, 0.4, 0.3], dropout_masks="per_gate"),
]


def detach(state):
    return [(h.detach(), c.detach()) for h, c in state]


def header(w, cfg, seed):
    config_model(w, cfg)
    config_run(w, cfg)
    for k in ("chunk", "horizon"):
        if k in cfg:
            w.config(k, cfg[k])
    for i, flags in enumerate(cfg.get("choices", [])):
        w.config("choices_%d" % i, *flags)
    for k in ("dropout", "recurrent_dropout"):
        if k in cfg:
            w.config(k, *cfg[k])
    if "dropout_masks" in cfg:  # absent: shared (the fixtures from before)
        w.config("dropout_masks", cfg["dropout_masks"])
    info_seed(w, seed)


def state_given(cfg, model, w, x, y):
    state = random_state(cfg)
    write_state(w, state)
    write_forward(w, model, x, y, cfg["target"], state=state)
    return lambda step: (x, y, state)


def carry(cfg, model, w, x, y):
    k = cfg["chunk"]
    carried = {"state": None}

    def chunk(step):
        t0 = (step * k) % cfg["T"]
        xs = x[:, t0:t0 + k]
        ys = y[:, t0:t0 + k] if cfg["target"] == "sequence" else y[:, step]
        return xs, ys, carried["state"]

    def keep(out):
        carried["state"] = detach(out[1])
    return chunk, keep


def adam_record(w, model, weight_decay, step_loss, what, first_grads=False):
    """ADAM_STEPS Adam steps, each on step_loss(step) (the loss before the
    update, as train_step returns it), then the records every kind shares:
    adam_min_grad_ratio, adam_losses, adam_params/ (and grad/ of the first
    step with first_grads). None when a step's gradients are too small to
    compare or a file would look executable (make_fixtures.py: the caller
    tries the next seed)."""
    opt = torch.optim.Adam(model.parameters(), lr=ADAM_LR, weight_decay=weight_decay)
    losses, ratio = [], float("inf")
    for step in range(ADAM_STEPS):
        opt.zero_grad()
        loss = step_loss(step)
        loss.backward()
        if first_grads and step == 0:
            for k, p in model.named_parameters():
                w.tensor("grad/" + k, p.grad)
        ratio = min(ratio, smallest_gradient(model, weight_decay))
        opt.step()
        losses.append(loss.item())
    if ratio < MIN_GRAD_RATIO:
        return None
    w.info("adam_min_grad_ratio", "%.3e" % ratio)
    write_steps(w, model, "adam", losses)
    if w.looks_executable:  # R CMD check's undeclared-executable warning
        return None
    w.close()
    return what + " ".join("%.5f" % l for l in losses)


def teacher_loss(model, x, y):
    K = y.shape[1]
    out = model(torch.cat([x, y[:, :K - 1]], dim=1))[0][-1]
    return F.mse_loss(out[:, -K:], y)


def horizon_targets(cfg, model, w):
    """The horizon's true frames y_frames and, where cfg has dropout, the
    masks every step applies (mask_x/<l>, mask_h/<l>), drawn and written."""
    y = torch.rand(cfg["B"], cfg["horizon"], cfg["input_dim"], cfg["H"], cfg["W"])
    w.tensor("y_frames", y)
    masks = None
    if "dropout" in cfg:
        masks = dropout_masks(model, cfg["B"], cfg["H"], cfg["W"], cfg["dropout"],
                              cfg["recurrent_dropout"],
                              per_gate=cfg.get("dropout_masks") == "per_gate")
        write_masks(w, masks)
    return y, masks


def teacher(cfg, model, w, x):
    y, _ = horizon_targets(cfg, model, w)
    return adam_record(w, model, cfg["weight_decay"], lambda step: teacher_loss(model, x, y),
                       "teacher-forced adam losses ", first_grads=True)


def free_run_loss(model, x, y, detach_frames=False, masks=None):
    frames = rollout(model, x, y.shape[1], detach_frames=detach_frames, masks=masks)
    return F.mse_loss(frames, y)


def fed_unmasked_loss(model, x, y, masks):
    """rollout() with layer 0's input mask on x only, not on the fed-back
    frames: the gradients of a step that forgot it there."""
    fed = [(None, masks[0][1])] + masks[1:]
    _, st = model(x, masks=masks)
    frames = [st[-1][0]]
    for _ in range(y.shape[1] - 1):
        _, st = model(frames[-1].unsqueeze(1), state=st, masks=fed)
        frames.append(st[-1][0])
    return F.mse_loss(torch.stack(frames, dim=1), y)


def write_grads(w, model, prefix, loss):
    model.zero_grad()
    loss.backward()
    for k, p in model.named_parameters():
        w.tensor(prefix + k, p.grad)


def free_run(cfg, model, w, x):
    y, masks = horizon_targets(cfg, model, w)
    if masks is not None:
        write_grads(w, model, "grad_nodropout/", free_run_loss(model, x, y))
        write_grads(w, model, "grad_fed_unmasked/", fed_unmasked_loss(model, x, y, masks))
    write_grads(w, model, "grad_detached/",
                free_run_loss(model, x, y, detach_frames=True, masks=masks))
    return adam_record(w, model, cfg["weight_decay"],
                       lambda step: free_run_loss(model, x, y, masks=masks),
                       "free-running adam losses ", first_grads=True)


def sampled_loss(model, x, y, choices, masks=None):
    frames = rollout(model, x, y.shape[1], masks=masks, truth=y,
                     choices=[bool(c) for c in choices])
    return F.mse_loss(frames, y)


def sampled(cfg, model, w, x):
    K = cfg["horizon"]
    y, masks = horizon_targets(cfg, model, w)
    write_grads(w, model, "grad_free/", sampled_loss(model, x, y, [0] * (K - 1), masks))
    write_grads(w, model, "grad_teacher/", sampled_loss(model, x, y, [1] * (K - 1), masks))
    choices = cfg["choices"]
    return adam_record(w, model, cfg["weight_decay"],
                       lambda step: sampled_loss(model, x, y, choices[step], masks),
                       "scheduled-sampling adam losses ", first_grads=True)


def make(cfg, root, seed):
    torch.manual_seed(seed)
    model = ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"],
                     peephole=cfg.get("peephole"), frame_size=(cfg["H"], cfg["W"]))
    if "peephole" in cfg:
        random_peepholes(model)
    # carrying a last state: one target per chunk
    carry_last = cfg["kind"] == "carry" and cfg["target"] == "last_state"
    x, y = inputs(cfg, ADAM_STEPS if carry_last else None)
    w = Writer(os.path.join(root, cfg["name"]))
    header(w, cfg, seed)
    write_inputs(w, model, x, y)

    if cfg["kind"] == "rollout":
        with torch.no_grad():
            w.tensor("frames", rollout(model, x, cfg["horizon"]))
            state = random_state(cfg)
            write_state(w, state)
            w.tensor("frames_from_state", rollout(model, x, cfg["horizon"], state=state))
        w.close()
        return "rollout of %d frames" % cfg["horizon"]

    if cfg["kind"] == "teacher":
        return teacher(cfg, model, w, x)
    if cfg["kind"] == "free_run":
        return free_run(cfg, model, w, x)
    if cfg["kind"] == "sampled":
        return sampled(cfg, model, w, x)
    keep = None
    if cfg["kind"] == "state_given":
        batch = state_given(cfg, model, w, x, y)
    else:
        batch, keep = carry(cfg, model, w, x, y)

    def step_loss(step):
        xs, ys, state = batch(step)
        out = model(xs, state=state)
        if keep:  # the next chunk starts from this one's last state, detached
            keep(out)
        return F.mse_loss(prediction(out, cfg["target"]), ys)
    return adam_record(w, model, cfg["weight_decay"], step_loss, "adam losses ")


def main():
    make_all(CONFIGS, make, fixture_root("forecast"), 20261122, 22)


if __name__ == "__main__":
    main()
