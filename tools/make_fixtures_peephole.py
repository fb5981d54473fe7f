#!/usr/bin/python3
"""make_fixtures_peephole.py -- PyTorch fixtures for peephole connections
(Shi et al. 2015), per position and per channel.
tests/testthat/test-parity-peephole.R reads them.

A developer tool like make_fixtures.py (same format, same Writer; PyTorch
1.13 CPU): rerun only when a config is added. It writes one folder per config
under tests/testthat/fixtures/peephole/ (a folder without a manifest, so the
plain parity test does not list it).

The peephole weights start at random values here (convlstm() starts them at
zero, which would hide a dropped term). Records beyond make_fixtures.py's:
  config peephole <position|channel>, frame_size <H> <W> (per position)
  output/, last_h/, last_c/, loss, grad/   a forward from zeros, its MSE and
                                           every gradient, peepholes included
  wrong/no_peephole/<l>, wrong/o_sees_c_prev/<l>, wrong/if_see_c_t/<l>
      the layer outputs of the same weights with the peephole terms dropped,
      with the o gate reading c_{t-1} instead of c_t, and with i and f
      reading the new c (before their terms) instead of c_{t-1}: what the
      tests show they tell apart
  state_h/, state_c/, from_state/last_h/<l>, from_state/last_c/<l>
      a forward from a random initial state (so step 0's c_{t-1} is not 0)
  adam_losses, adam_params/                Adam steps from the weights
"""

import torch

from make_fixtures import MIN_GRAD_RATIO, adam_steps, fixture_root, make_all, random_state, \
    start_fixture, write_forward, write_state, write_steps
from torch_convlstm import ConvLSTM, ConvLSTMCell

CONFIGS = [
    dict(name="position", peephole="position", input_dim=1, hidden_dims=[3, 2],
         kernel_sizes=[3, 3], bias=True, B=2, T=3, H=5, W=4, target="sequence",
         weight_decay=0.0),
    dict(name="channel", peephole="channel", input_dim=2, hidden_dims=[3],
         kernel_sizes=[3], bias=False, B=2, T=3, H=5, W=5, target="last_state",
         weight_decay=0.1),
]


class WrongCell(ConvLSTMCell):
    """The peephole cell with one mistake, to show the fixtures tell it apart:
    'no_peephole' drops the terms, 'o_sees_c_prev' gives the o gate c_{t-1},
    'if_see_c_t' gives i and f the new c (computed without them) instead."""

    mistake = None

    def forward(self, x, state, masks=None):  # (no dropout here)
        h_prev, c_prev = state
        z = self.conv(torch.cat([x, h_prev], dim=1))
        zi, zf, zo, zg = torch.split(z, self.hidden_dim, dim=1)
        if self.mistake == "no_peephole":
            c = torch.sigmoid(zf) * c_prev + torch.sigmoid(zi) * torch.tanh(zg)
            return torch.sigmoid(zo) * torch.tanh(c), c
        if self.mistake == "if_see_c_t":
            c0 = torch.sigmoid(zf) * c_prev + torch.sigmoid(zi) * torch.tanh(zg)
            zi, zf = zi + self.w_ci * c0, zf + self.w_cf * c0
        else:
            zi, zf = zi + self.w_ci * c_prev, zf + self.w_cf * c_prev
        c = torch.sigmoid(zf) * c_prev + torch.sigmoid(zi) * torch.tanh(zg)
        zo = zo + self.w_co * (c_prev if self.mistake == "o_sees_c_prev" else c)
        return torch.sigmoid(zo) * torch.tanh(c), c


def wrong_outputs(model, x, mistake):
    with torch.no_grad():
        for cell in model.cell_list:
            cell.__class__ = WrongCell
            cell.mistake = mistake
        out = model(x)[0]
        for cell in model.cell_list:
            cell.__class__ = ConvLSTMCell
    return out


def random_peepholes(model):
    """Peephole weights of the size of the conv weights' effect, so that
    they matter (convlstm() starts them at zero, which would hide a term);
    layers without peepholes draw nothing."""
    with torch.no_grad():
        for cell in model.cell_list:
            if cell.peephole is not None:
                for p in (cell.w_ci, cell.w_cf, cell.w_co):
                    p.uniform_(-0.8, 0.8)


def make(cfg, root, seed):
    torch.manual_seed(seed)
    model = ConvLSTM(cfg["input_dim"], cfg["hidden_dims"], cfg["kernel_sizes"], cfg["bias"],
                     peephole=cfg["peephole"], frame_size=(cfg["H"], cfg["W"]))
    random_peepholes(model)
    w, x, y, _ = start_fixture(cfg, root, seed, model)

    write_forward(w, model, x, y, cfg["target"])

    for mistake in ("no_peephole", "o_sees_c_prev", "if_see_c_t"):
        for l, o in enumerate(wrong_outputs(model, x, mistake)):
            w.tensor("wrong/%s/%d" % (mistake, l), o)

    with torch.no_grad():
        state = random_state(cfg)
        write_state(w, state)
        for l, (h, c) in enumerate(model(x, state=state)[1]):
            w.tensor("from_state/last_h/%d" % l, h)
            w.tensor("from_state/last_c/%d" % l, c)

    losses, ratio = adam_steps(model, x, y, cfg["target"], cfg["weight_decay"])
    if ratio < MIN_GRAD_RATIO:
        return None
    w.info("adam_min_grad_ratio", "%.3e" % ratio)
    write_steps(w, model, "adam", losses)
    w.close()
    return "adam losses " + " ".join("%.5f" % l for l in losses)


def main():
    make_all(CONFIGS, make, fixture_root("peephole"), 20261123, 10)


if __name__ == "__main__":
    main()
