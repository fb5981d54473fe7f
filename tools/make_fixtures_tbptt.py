#!/usr/bin/python3
"""make_fixtures_tbptt.py -- PyTorch fixtures for truncated BPTT (train_step's
tbptt = k): the loss and every gradient of one step run window by window with
the state detached between windows, and of a second step that starts from the
first one's last state, detached (state = "carry").
tests/c/test_core_tbptt.c reads them.

A developer tool like make_fixtures.py (same format, same Writer; PyTorch
1.13 CPU): rerun only when a config is added. It writes one folder per config
under tests/testthat/fixtures/tbptt/ (a folder without a manifest, so the
plain parity test does not list it).

PyTorch's truncated BPTT, written here from its definition: the sequence is
cut into windows of k steps (the last one shorter when k does not divide T);
each window runs forward from the state the window before left, .detach()ed,
and its share of the loss is backpropagated at once, the gradients summing
over the windows. The loss is the mean over the whole target (target
"sequence": each window's squared errors divided by all of the target's
elements; "last_state": only the last window has a loss). Records beyond
make_fixtures.py's:
  config tbptt <k>
  loss, grad/<name>      step 1: x, y from the zero state
  x2, y2, loss2, grad2/<name>
                         step 2: x2, y2 from step 1's last state (detached),
                         parameters unchanged (the C test steps with lr 0)
  carry_h/<l>, carry_c/<l>
                         the state step 1 hands on (its last window's end)
"""

import os

import torch

from make_fixtures import Writer, config_model, fixture_root, info_seed, make_all, prediction, \
    write_inputs
from torch_convlstm import ConvLSTM

CONFIGS = [
    # windows 2, 2, 1: a last window shorter than k
    dict(name="sequence_k2", input_dim=2, hidden_dims=[3, 2], kernel_sizes=[3, (3, 5)],
         bias=True, B=2, T=5, H=5, W=6, target="sequence", tbptt=2),
    # windows 3, 3: only the last one sees the loss; the first one's end is
    # the second one's (detached) start, which the gradients depend on
    dict(name="last_state_k3", input_dim=1, hidden_dims=[4, 2], kernel_sizes=[3, 1],
         bias=True, B=3, T=6, H=4, W=5, target="last_state", tbptt=3),
]


def detached(state):
    return [(h.detach(), c.detach()) for h, c in state]


def tbptt_step(model, x, y, target, k, state):
    """zero_grad, then the windows of k steps of x from state (None: zeros),
    each one's share of the MSE backpropagated; returns the loss and the last
    state, detached."""
    model.zero_grad()
    T = x.shape[1]
    total = y.numel()
    loss = 0.0
    for t0 in range(0, T, k):
        out = model(x[:, t0:t0 + k], state=state)
        if target == "sequence":
            part = ((prediction(out, target) - y[:, t0:t0 + k]) ** 2).sum() / total
        elif t0 + k >= T:
            part = ((prediction(out, target) - y) ** 2).sum() / total
        else:
            part = None
        if part is not None:
            part.backward()
            loss += part.item()
        state = detached(out[1])
    return loss, state


def make(cfg, root, seed):
    torch.manual_seed(seed)
    model = ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"])
    B, T, H, W = cfg["B"], cfg["T"], cfg["H"], cfg["W"]
    C = cfg["hidden_dims"][-1]
    x = torch.rand(B, T, cfg["input_dim"], H, W)
    x2 = torch.rand(B, T, cfg["input_dim"], H, W)
    shape_y = (B, T, C, H, W) if cfg["target"] == "sequence" else (B, C, H, W)
    y = torch.rand(*shape_y)
    y2 = torch.rand(*shape_y)

    w = Writer(os.path.join(root, cfg["name"]))
    config_model(w, cfg)
    for key in ("B", "T", "H", "W", "target", "tbptt"):
        w.config(key, cfg[key])
    info_seed(w, seed)
    write_inputs(w, model, x, y)
    w.tensor("x2", x2)
    w.tensor("y2", y2)

    loss, state = tbptt_step(model, x, y, cfg["target"], cfg["tbptt"], None)
    w.tensor("loss", torch.tensor([loss]))
    for key, p in model.named_parameters():
        w.tensor("grad/" + key, p.grad)
    for l, (h, c) in enumerate(state):
        w.tensor("carry_h/%d" % l, h)
        w.tensor("carry_c/%d" % l, c)
    loss2, _ = tbptt_step(model, x2, y2, cfg["target"], cfg["tbptt"], state)
    w.tensor("loss2", torch.tensor([loss2]))
    for key, p in model.named_parameters():
        w.tensor("grad2/" + key, p.grad)

    # what truncation changes: the full-BPTT gradient of the same step, so
    # the fixture shows that the windows matter (the test needs them apart)
    model.zero_grad()
    full = ((prediction(model(x), cfg["target"]) - y) ** 2).mean()
    full.backward()
    gap = max(((p.grad - q).abs().max() / q.abs().max()).item()
              for p, q in zip(model.parameters(), grads_of(w, model)))
    w.info("full_vs_tbptt_max_rel_grad", "%.3e" % gap)
    if w.looks_executable:
        return None
    w.close()
    return loss, loss2, gap


def grads_of(w, model):
    """The tbptt gradients of step 1, read back from what w wrote."""
    out = []
    for key, p in model.named_parameters():
        path = os.path.join(w.folder, ("grad/" + key).replace("/", "__") + ".bin")
        with open(path, "rb") as f:
            out.append(torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(p.shape))
    return out


def main():
    make_all(CONFIGS, make, fixture_root("tbptt"), 20261126, 14,
             lambda res: "loss %.6f, carried step's loss %.6f; full BPTT differs by %.2e" % res)


if __name__ == "__main__":
    main()
