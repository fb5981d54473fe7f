#!/usr/bin/env python3
"""bench/gpu/bench_gpu.py -- convlstm (build/libconvlstm.so through ctypes)
against the same ConvLSTM in PyTorch, eager and torch.compile, in ONE process
on the same GPU: the benchmark and the GPU checks of issue 4.

It is not a test of the R package (tests/testthat) nor of the kernels one by
one (tests/c/test_backend_ops.c), and it links nothing but the standalone
library built by `make -C src -f Makefile.standalone CUDA=1`.

Modes (several may be given; default: --bench):
  --bench      step time (float32, float16) and peak memory of the three
               configs of issue 4 and of Shi et al.'s encoder-forecaster
               ("paper": Table 1's best Moving MNIST model, against
               torch_convlstm.py's EncoderForecaster with the paper's BCE
               loss), ours vs PyTorch eager and torch.compile;
               float32 at both sides' defaults (TF32 convolutions) and both
               strict (--math), with the achieved TFLOP/s of the
               convolutions and its fraction of the device's peak
  --max-batch  the largest batch that fits: ours from cl_model_plan against
               the free device memory, confirmed by real steps; PyTorch eager
               by doubling and bisection on torch.cuda.OutOfMemoryError
  --checks     parity with PyTorch (losses of 20 Adam steps, gradients);
               the plan against memory measured outside the allocator
               (issue 10): on the GPU the driver's used bytes (total - free,
               through PyTorch and through cl_model_measured_memory) grown
               over creating a model and its first step, on the CPU the
               growth of VmHWM in a fresh process; then, as secondary
               consistency checks, the allocator's own counters (plan ==
               counted peak per category, inference peak independent of T);
               recovery from a real device OOM; the runtime line
  --layout     the ctypes structs against the C compiler's offsetof()
  --ab         each runtime switch of our backend (AB_SWITCHES: cuDNN's
               algorithms by measurement, CUDA graphs, the fused bias,
               channels-last activations, the algorithms stored per
               machine) against the default,
               our step only: two models side by side from the same weights,
               their steps timed in alternating rounds (drift falls on both
               alike); the speed-up (default's time / switched time) and the
               two losses after the same steps, so that a lent GPU decides
               each switch's default from one call
  --cpu-smoke  all of the above at tiny sizes on the CPU (device CPU, PyTorch
               on the CPU, no torch.compile where PyTorch lacks it): checks
               the harness itself on a machine without a GPU

--time-budget S bounds the whole run: a measurement that would not end in
time is recorded as "skipped: time budget" instead (float32 of every config
runs first, then float16, then the largest-batch searches).

Results: OUTDIR/results.json (every record, rewritten after each one, so a
run cut short still leaves what it measured), OUTDIR/results.csv and the
table on stdout. Step times: each side returns the loss to the host every
step (ours: cl_model_train_step's loss; PyTorch: loss.item(), as the R torch
tutorial's loop does); "mean" is the wall time of N back-to-back steps ended
by a full synchronization, divided by N; "median" the median single step.
Our step ("convlstm") also converts and uploads x and y from host memory
(PyTorch's data sit on the GPU already); the pack_ms column is that
conversion alone. "convlstm_data" is the fair comparison: the data uploaded
once (cl_data_create) and each step gathering its rows on the device
(cl_model_train_step_data), as PyTorch's tensors already are there; its
"data x" column is PyTorch's time over that variant's. "convlstm_staged" is
the host path as a fit runs it: each next batch converted (cl_staged_fill,
into page-locked memory) on the main thread while the step runs on a thread
of its own from the batch converted during the step before
(cl_model_train_staged), so that the step only uploads.

Usage (from the repository root):
  python3 bench/gpu/bench_gpu.py OUTDIR [--lib build/libconvlstm.so] [modes]
  /usr/bin/python3 bench/gpu/bench_gpu.py /tmp/smoke --cpu-smoke
"""
import argparse
import contextlib
import ctypes as C
import csv
import gc
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# PyTorch and the one reference model (inst/python/torch_convlstm.py) are
# imported on first need (load_torch), not here: --layout needs neither, so
# CI checks the ctypes mirror below on a machine without torch or a GPU.
torch = None
ConvLSTM = None
EncoderForecaster = None


def load_torch():
    """Imports torch and ConvLSTM into this module; call it before Lib():
    on the GPU machine torch loads PyTorch's own cuDNN and CUDA runtime, and
    our library's dependencies of the same soname then resolve to them."""
    global torch, ConvLSTM, EncoderForecaster
    if torch is None:
        import torch as torch_module
        sys.path.insert(0, os.path.join(ROOT, "inst", "python"))
        from torch_convlstm import ConvLSTM as model, EncoderForecaster as fc_model
        torch, ConvLSTM, EncoderForecaster = torch_module, model, fc_model
    return torch

# ---- the C API (inst/include/convlstm.h), declared field by field ----------------
# `make harness-check` (CI) compares every struct here with the header: the
# fields by name and order, and each size and offset with the C compiler's
# (check_layout). When the header gains or loses a field, add or drop it
# here at the same place; build the structs by keyword (cl_step_options(
# outputs=...)), never by position, so that a new field moves nothing.

CL_MAX_LAYERS = 32
CL_ERRMSG_LEN = 512
CL_MEM_NCAT = 7
CL_DEVICE_CPU, CL_DEVICE_CUDA = 0, 1
CL_F32, CL_F16, CL_BF16 = 0, 1, 2
CL_TARGET_LAST_STATE, CL_TARGET_SEQUENCE = 0, 1
CL_PEEP_CHANNEL = 1
CL_LOSS_BCE_LOGITS = 3
CL_REDUCE_BATCHMEAN = 2
CL_HOST_R_F64, CL_HOST_TORCH_F32 = 0, 1
CL_OPTIM_ADAM, CL_OPTIM_SGD, CL_OPTIM_ADAMW, CL_OPTIM_RMSPROP = 1, 2, 3, 4
CL_OUTPUTS_ALL, CL_OUTPUTS_LAST = 0, 1
CL_E_OOM = 2
CATEGORIES = ["parameters", "gradients", "optimizer", "activations", "states", "workspace",
              "data"]
DTYPES = {"float32": CL_F32, "float16": CL_F16, "bfloat16": CL_BF16}


class cl_config(C.Structure):
    _fields_ = [("input_dim", C.c_int), ("n_layers", C.c_int),
                ("hidden_dims", C.c_int * CL_MAX_LAYERS),
                ("kernel_sizes", C.c_int * CL_MAX_LAYERS),
                ("kernel_widths", C.c_int * CL_MAX_LAYERS),
                ("dilation_h", C.c_int * CL_MAX_LAYERS), ("dilation_w", C.c_int * CL_MAX_LAYERS),
                ("recurrent_kernel_sizes", C.c_int * CL_MAX_LAYERS),
                ("recurrent_kernel_widths", C.c_int * CL_MAX_LAYERS),
                ("bias", C.c_int), ("device", C.c_int), ("dtype", C.c_int),
                ("n_threads", C.c_int), ("memory_limit", C.c_size_t),
                ("peephole", C.c_int), ("peephole_h", C.c_int), ("peephole_w", C.c_int),
                ("dropout", C.c_double * CL_MAX_LAYERS),
                ("recurrent_dropout", C.c_double * CL_MAX_LAYERS), ("dropout_masks", C.c_int),
                ("forecaster", C.c_int), ("patch", C.c_int), ("head", C.c_int)]


class cl_host_array(C.Structure):
    _fields_ = [("data", C.c_void_p), ("format", C.c_int), ("ndim", C.c_int),
                ("dims", C.c_int * 5)]


class cl_optim(C.Structure):
    _fields_ = [("kind", C.c_int), ("lr", C.c_double), ("beta1", C.c_double),
                ("beta2", C.c_double), ("eps", C.c_double), ("momentum", C.c_double),
                ("weight_decay", C.c_double), ("amsgrad", C.c_int), ("alpha", C.c_double),
                ("centered", C.c_int)]


class cl_loss_fn(C.Structure):
    _fields_ = [("kind", C.c_int), ("delta", C.c_double), ("pos_weight", C.c_double),
                ("reduction", C.c_int)]


class cl_step_options(C.Structure):
    _fields_ = [("checkpoint", C.c_int), ("recompute_gates", C.c_int), ("tbptt", C.c_int),
                ("accumulation_steps", C.c_int), ("outputs", C.c_int), ("plan_dtype", C.c_int),
                ("plan_target", C.c_int), ("horizon", C.c_int), ("free_run", C.c_int), ("truth", C.POINTER(C.c_int)),
                ("state_mode", C.c_int), ("state", C.POINTER(cl_host_array)),
                ("max_grad_norm", C.c_double), ("loss", cl_loss_fn),
                ("weight", C.POINTER(cl_host_array)),
                ("mask_x", C.POINTER(C.c_float) * CL_MAX_LAYERS),
                ("mask_h", C.POINTER(C.c_float) * CL_MAX_LAYERS),
                ("draw_masks", C.c_int), ("dropout_seed", C.c_uint64),
                ("comm", C.c_void_p), ("comm_share", C.c_double)]


class cl_loss_scale(C.Structure):
    _fields_ = [("scale", C.c_double), ("growth_interval", C.c_int), ("clean_steps", C.c_int),
                ("skipped_steps", C.c_int64), ("skipped_in_a_row", C.c_int),
                ("init_scale", C.c_double), ("growth_factor", C.c_double),
                ("backoff_factor", C.c_double)]


class cl_mem_stats(C.Structure):
    _fields_ = [("current", C.c_size_t * CL_MEM_NCAT), ("peak", C.c_size_t * CL_MEM_NCAT),
                ("n_alloc", C.c_uint64 * CL_MEM_NCAT), ("n_free", C.c_uint64 * CL_MEM_NCAT),
                ("allocated", C.c_size_t), ("peak_allocated", C.c_size_t),
                ("reserved", C.c_size_t), ("peak_reserved", C.c_size_t), ("limit", C.c_size_t),
                ("device_free", C.c_size_t), ("device_total", C.c_size_t)]


class cl_plan_entry(C.Structure):
    _fields_ = [("name", C.c_char * 48), ("category", C.c_int), ("bytes", C.c_size_t),
                ("offset", C.c_size_t), ("in_arena", C.c_int), ("kind", C.c_int),
                ("layer", C.c_int), ("first_op", C.c_int), ("last_op", C.c_int)]


class cl_plan(C.Structure):
    _fields_ = [("n", C.c_int), ("entries", C.POINTER(cl_plan_entry)),
                ("by_category", C.c_size_t * CL_MEM_NCAT), ("total", C.c_size_t),
                ("arena", C.c_size_t), ("reserved", C.c_size_t), ("runtime", C.c_size_t)]


class cl_measured_mem(C.Structure):
    _fields_ = [("have_process", C.c_int), ("process_rss", C.c_size_t),
                ("process_peak", C.c_size_t), ("have_device", C.c_int),
                ("device_used", C.c_size_t), ("device_used_at_create", C.c_size_t),
                ("runtime", C.c_size_t), ("why", C.c_char * 160)]


class cl_gpu_info(C.Structure):
    _fields_ = [("device", C.c_int), ("n_devices", C.c_int), ("name", C.c_char * 256),
                ("cc_major", C.c_int), ("cc_minor", C.c_int), ("multiprocessors", C.c_int),
                ("mem_free", C.c_size_t), ("mem_total", C.c_size_t),
                ("driver_version", C.c_int), ("runtime_version", C.c_int),
                ("cudnn_version", C.c_size_t), ("cudnn_build_version", C.c_size_t)]


class cl_graph_info(C.Structure):
    _fields_ = [("asked", C.c_int), ("on", C.c_int), ("held", C.c_int),
                ("captured", C.c_longlong), ("replayed", C.c_longlong), ("plain", C.c_longlong),
                ("bytes", C.c_size_t), ("off", C.c_char * 200)]


class cl_conv_call_info(C.Structure):
    _fields_ = [("dir", C.c_int), ("layer", C.c_int), ("half", C.c_int), ("N", C.c_int64),
                ("C", C.c_int), ("H", C.c_int), ("W", C.c_int), ("K", C.c_int),
                ("kh", C.c_int), ("kw", C.c_int), ("dh", C.c_int), ("dw", C.c_int),
                ("groups", C.c_int), ("count", C.c_int64)]


# every struct mirrored above: --layout compares each with the C compiler
STRUCTS = {st.__name__: st for st in (cl_config, cl_host_array, cl_optim, cl_loss_fn,
                                      cl_step_options, cl_loss_scale, cl_mem_stats,
                                      cl_plan_entry, cl_plan, cl_measured_mem, cl_gpu_info,
                                      cl_graph_info, cl_conv_call_info)}


class ClError(RuntimeError):
    def __init__(self, status, name, message):
        super().__init__("%s: %s" % (name, message))
        self.status = status


class Lib:
    """The library's functions with their C signatures."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        L = self.L = C.CDLL(self.path)
        P = C.POINTER
        sigs = {
            "cl_model_create": (C.c_int, [P(cl_config), P(C.c_void_p), C.c_char_p, C.c_size_t]),
            "cl_model_free": (None, [C.c_void_p]),
            "cl_models_alive": (C.c_int, []),
            "cl_model_error": (C.c_char_p, [C.c_void_p]),
            "cl_model_config": (P(cl_config), [C.c_void_p]),
            "cl_model_backend_name": (C.c_char_p, [C.c_void_p]),
            "cl_device_available": (C.c_int, [C.c_int]),
            "cl_model_n_tensors": (C.c_int, [C.c_void_p]),
            "cl_model_tensor_info": (C.c_int, [C.c_void_p, C.c_int, P(C.c_char_p), P(C.c_int),
                                               C.c_int * 4]),
            "cl_model_n_params": (C.c_size_t, [C.c_void_p]),
            "cl_model_get_param": (C.c_int, [C.c_void_p, C.c_char_p, P(C.c_float), C.c_size_t]),
            "cl_model_set_param": (C.c_int, [C.c_void_p, C.c_char_p, P(C.c_float), C.c_size_t]),
            "cl_model_get_grad": (C.c_int, [C.c_void_p, C.c_char_p, P(C.c_float), C.c_size_t]),
            "cl_model_forward": (C.c_int, [C.c_void_p, P(cl_host_array), C.c_int,
                                           P(cl_step_options)]),
            "cl_model_train_step": (C.c_int, [C.c_void_p, P(cl_host_array), P(cl_host_array),
                                              C.c_int, P(cl_optim), P(cl_step_options),
                                              P(C.c_double)]),
            "cl_model_get_loss_scale": (C.c_int, [C.c_void_p, P(cl_loss_scale)]),
            "cl_model_memory_stats": (C.c_int, [C.c_void_p, P(cl_mem_stats)]),
            "cl_model_measured_memory": (C.c_int, [C.c_void_p, P(cl_measured_mem)]),
            "cl_model_graph_info": (C.c_int, [C.c_void_p, P(cl_graph_info)]),
            "cl_model_reset_peak": (None, [C.c_void_p]),
            "cl_model_empty_cache": (C.c_int, [C.c_void_p]),
            "cl_model_set_memory_limit": (C.c_int, [C.c_void_p, C.c_size_t]),
            "cl_model_plan": (C.c_int, [C.c_void_p, C.c_int, C.c_int, C.c_int, C.c_int, C.c_int,
                                        P(cl_optim), P(cl_step_options), P(cl_plan)]),
            "cl_plan_free": (None, [P(cl_plan)]),
            "cl_model_conv_calls": (C.c_int, [C.c_void_p, C.c_int, C.c_int, C.c_int, C.c_int,
                                              C.c_int, P(cl_step_options), C.c_int,
                                              P(P(cl_conv_call_info)), P(C.c_int)]),
            "cl_model_conv_algo": (C.c_int, [C.c_void_p, P(cl_conv_call_info), C.c_char_p,
                                             C.c_size_t]),
            "cl_status_name": (C.c_char_p, [C.c_int]),
            "cl_mem_category_name": (C.c_char_p, [C.c_int]),
            "cl_pack_host": (None, [P(C.c_float), P(cl_host_array)]),
            "cl_data_create": (C.c_int, [C.c_void_p, P(cl_host_array), P(cl_host_array), C.c_int,
                                         P(C.c_void_p)]),
            "cl_data_free": (None, [C.c_void_p]),
            "cl_data_alive": (C.c_int, []),
            "cl_model_train_step_data": (C.c_int, [C.c_void_p, C.c_void_p, P(C.c_int), C.c_int,
                                                   P(cl_optim), P(cl_step_options),
                                                   P(C.c_double)]),
            "cl_model_bind_thread": (C.c_int, [C.c_void_p]),
            "cl_staged_fill": (C.c_int, [C.c_void_p, P(C.c_void_p), P(cl_host_array),
                                         P(cl_host_array), C.c_char_p, C.c_size_t]),
            "cl_staged_free": (None, [C.c_void_p]),
            "cl_staged_alive": (C.c_int, []),
            "cl_model_train_staged": (C.c_int, [C.c_void_p, P(cl_host_array), P(cl_host_array),
                                                C.c_void_p, C.c_int, P(cl_optim),
                                                P(cl_step_options), P(C.c_double)]),
        }
        for name, (res, args) in sigs.items():
            f = getattr(L, name)
            f.restype, f.argtypes = res, args
        # only in a build with CUDA
        self.cuda_info_fn = getattr(L, "cl_gpu_info_get", None)
        if self.cuda_info_fn is not None:
            self.cuda_info_fn.restype = C.c_int
            self.cuda_info_fn.argtypes = [C.c_int, P(cl_gpu_info), C.c_char_p, C.c_size_t]

    def status_name(self, s):
        return self.L.cl_status_name(s).decode()

    def cuda_info(self):
        if self.cuda_info_fn is None:
            return {"cuda_build": False}
        info, err = cl_gpu_info(), C.create_string_buffer(CL_ERRMSG_LEN)
        s = self.cuda_info_fn(-1, C.byref(info), err, CL_ERRMSG_LEN)
        out = {"cuda_build": True, "status": self.status_name(s), "message": err.value.decode(),
               "driver_version": info.driver_version, "runtime_version": info.runtime_version,
               "cudnn_version": info.cudnn_version,
               "cudnn_build_version": info.cudnn_build_version}
        if s == 0:
            out.update(name=info.name.decode(), cc="%d.%d" % (info.cc_major, info.cc_minor),
                       multiprocessors=info.multiprocessors, mem_total=info.mem_total,
                       mem_free=info.mem_free)
        return out


def host_array(t):
    """A contiguous float32 CPU tensor as a row-major (torch) host array."""
    assert t.dtype == torch.float32 and t.is_contiguous() and t.device.type == "cpu"
    a = cl_host_array()
    a.data, a.format, a.ndim = t.data_ptr(), CL_HOST_TORCH_F32, t.dim()
    for i, d in enumerate(t.shape):
        a.dims[i] = d
    return a


def adam(lr=1e-3):
    return cl_optim(kind=CL_OPTIM_ADAM, lr=lr, beta1=0.9, beta2=0.999, eps=1e-8)


class Ours:
    """One convlstm model: created, trained and freed through the C API."""

    def __init__(self, lib, input_dim, hidden, kernels, device, dtype, memory_limit=0, fc=None):
        self.lib, self.L = lib, lib.L
        # fc: an encoder-forecaster (Shi et al.): dict(patch, K), its two
        # stacks of the same hidden sizes and kernels, channel peepholes (the
        # paper's cell), trained on K frames with BCE on logits per sequence
        self.fc = fc
        self.target = CL_TARGET_SEQUENCE if fc else CL_TARGET_LAST_STATE
        if fc:
            hidden, kernels = list(hidden) * 2, list(kernels) * 2
        cfg = cl_config()
        cfg.input_dim, cfg.n_layers, cfg.bias = input_dim, len(hidden), 1
        if fc:
            cfg.forecaster, cfg.patch, cfg.peephole = 1, fc["patch"], CL_PEEP_CHANNEL
        for i, (h, k) in enumerate(zip(hidden, kernels)):
            # square, undilated: PyTorch's reference model (torch_convlstm.py)
            cfg.hidden_dims[i], cfg.kernel_sizes[i], cfg.kernel_widths[i] = h, k, k
            cfg.dilation_h[i] = cfg.dilation_w[i] = 1
        cfg.device, cfg.dtype, cfg.n_threads, cfg.memory_limit = device, dtype, 0, memory_limit
        self.hidden = list(hidden)
        self.m = C.c_void_p()
        err = C.create_string_buffer(CL_ERRMSG_LEN)
        s = self.L.cl_model_create(C.byref(cfg), C.byref(self.m), err, CL_ERRMSG_LEN)
        if s != 0:
            raise ClError(s, lib.status_name(s), err.value.decode())
        # the config read back through the library: a check of cl_config's layout
        back = self.L.cl_model_config(self.m).contents
        n = len(hidden)
        got = (back.input_dim, back.n_layers, list(back.hidden_dims[:n]),
               list(back.kernel_sizes[:n]), list(back.kernel_widths[:n]),
               list(back.dilation_h[:n]), list(back.dilation_w[:n]), back.bias, back.device,
               back.dtype, back.memory_limit)
        want = (input_dim, n, list(hidden), list(kernels), list(kernels), [1] * n, [1] * n, 1,
                device, dtype, memory_limit)
        if fc and (back.forecaster, back.patch, back.peephole) != (1, fc["patch"], CL_PEEP_CHANNEL):
            got = got + ((back.forecaster, back.patch, back.peephole),)
        if got != want:
            raise RuntimeError("cl_config layout mismatch: wrote %r, read %r" % (want, got))
        self.tensors = []
        for i in range(self.L.cl_model_n_tensors(self.m)):
            name, ndim, dims = C.c_char_p(), C.c_int(), (C.c_int * 4)()
            self.check(self.L.cl_model_tensor_info(self.m, i, C.byref(name), C.byref(ndim), dims))
            self.tensors.append((name.value.decode(), tuple(dims[:ndim.value])))

    @classmethod
    def of(cls, lib, cfg, device, dtype, memory_limit=0):
        """The model of a configuration (CONFIGS): a plain stack, or with
        "patch" and "K" an encoder-forecaster."""
        fc = dict(patch=cfg["patch"], K=cfg["K"]) if is_forecaster(cfg) else None
        return cls(lib, cfg["input_dim"], cfg["hidden"], cfg["kernels"], device, dtype,
                   memory_limit, fc)

    def options(self, opts=None, horizon=False):
        """A step's options: an encoder-forecaster's loss (the paper's: BCE
        on logits, summed over a sequence, averaged over the batch) on top of
        the caller's, and where the call has no y to tell it (horizon: a plan,
        an inference) its K frames."""
        if not self.fc:
            return opts
        o = opts or cl_step_options()
        if horizon:
            o.horizon = self.fc["K"]
        o.loss = cl_loss_fn(kind=CL_LOSS_BCE_LOGITS, pos_weight=1.0, reduction=CL_REDUCE_BATCHMEAN)
        return o

    def check(self, s):
        if s != 0:
            raise ClError(s, self.lib.status_name(s), self.L.cl_model_error(self.m).decode())

    def free(self):
        if self.m:
            self.L.cl_model_free(self.m)
            self.m = C.c_void_p()

    def load_torch(self, model):
        sd = model.state_dict()
        for name, dims in self.tensors:
            t = sd[name].detach().float().cpu().contiguous()
            assert tuple(t.shape) == dims, (name, t.shape, dims)
            self.check(self.L.cl_model_set_param(self.m, name.encode(),
                                                 C.cast(t.data_ptr(), C.POINTER(C.c_float)),
                                                 t.numel()))

    def _get(self, fn, name):
        dims = dict(self.tensors)[name]
        t = torch.empty(dims, dtype=torch.float32)
        self.check(fn(self.m, name.encode(), C.cast(t.data_ptr(), C.POINTER(C.c_float)),
                      t.numel()))
        return t

    def param(self, name):
        return self._get(self.L.cl_model_get_param, name)

    def grad(self, name):
        return self._get(self.L.cl_model_get_grad, name)

    def sync(self):
        # a download: waits for everything queued on the backend's stream
        self.param(self.tensors[-1][0])

    def train_step(self, xa, ya, opt, opts=None):
        loss = C.c_double()
        opts = self.options(opts)
        self.check(self.L.cl_model_train_step(self.m, C.byref(xa), C.byref(ya),
                                              self.target, C.byref(opt),
                                              C.byref(opts) if opts else None, C.byref(loss)))
        return loss.value

    def data_create(self, xa, ya):
        """A data set on the model's device (freed by data_free or with the model)."""
        d = C.c_void_p()
        self.check(self.L.cl_data_create(self.m, C.byref(xa), C.byref(ya), self.target,
                                         C.byref(d)))
        return d

    def data_free(self, d):
        self.L.cl_data_free(d)

    def staged_fill(self, b, xa, ya):
        """Converts xa, ya into the staged batch b (a c_void_p, NULL for a new one)."""
        err = C.create_string_buffer(512)
        s = self.L.cl_staged_fill(self.m, C.byref(b), C.byref(xa), C.byref(ya), err, 512)
        if s != 0:
            raise ClError(s, self.lib.status_name(s), err.value.decode())

    def train_staged(self, xa, ya, b, opt):
        """One step from b, on a thread of its own (bound to the model's device)."""
        loss = C.c_double()
        self.check(self.L.cl_model_bind_thread(self.m))
        self.check(self.L.cl_model_train_staged(self.m, C.byref(xa), C.byref(ya), b, self.target,
                                                C.byref(opt), None, C.byref(loss)))
        return loss.value

    def train_step_data(self, d, rows, opt, opts=None):
        """rows: a ctypes c_int array of 0-based row numbers."""
        loss = C.c_double()
        opts = self.options(opts)
        self.check(self.L.cl_model_train_step_data(self.m, d, rows, len(rows), C.byref(opt),
                                                   C.byref(opts) if opts else None,
                                                   C.byref(loss)))
        return loss.value

    def forward(self, xa, training, opts=None):
        opts = self.options(opts, horizon=True)
        self.check(self.L.cl_model_forward(self.m, C.byref(xa), int(training),
                                           C.byref(opts) if opts else None))

    def stats(self):
        s = cl_mem_stats()
        self.check(self.L.cl_model_memory_stats(self.m, C.byref(s)))
        d = {k: getattr(s, k) for k in ("allocated", "peak_allocated", "reserved",
                                         "peak_reserved", "limit", "device_free",
                                         "device_total")}
        d["current"] = dict(zip(CATEGORIES, s.current))
        d["peak"] = dict(zip(CATEGORIES, s.peak))
        d["n_alloc"] = dict(zip(CATEGORIES, s.n_alloc))
        d["n_free"] = dict(zip(CATEGORIES, s.n_free))
        return d

    def measured(self):
        """What the OS and the driver say (cl_model_measured_memory)."""
        mm = cl_measured_mem()
        self.check(self.L.cl_model_measured_memory(self.m, C.byref(mm)))
        d = {f[0]: getattr(mm, f[0]) for f in cl_measured_mem._fields_}
        d["why"] = mm.why.decode()
        return d

    def reset_peak(self):
        self.L.cl_model_reset_peak(self.m)

    def empty_cache(self):
        self.check(self.L.cl_model_empty_cache(self.m))

    def set_memory_limit(self, b):
        self.check(self.L.cl_model_set_memory_limit(self.m, b))

    def loss_scale(self):
        ls = cl_loss_scale()
        self.check(self.L.cl_model_get_loss_scale(self.m, C.byref(ls)))
        return {"scale": ls.scale, "growth_interval": ls.growth_interval,
                "clean_steps": ls.clean_steps, "skipped_steps": ls.skipped_steps}

    def conv_algos(self, B, T, H, W):
        """Each convolution of a training step of this shape and the algorithm
        the backend ran it with (ask after a step): "layer 1 hidden backward
        filter [16, 64, 16, 16] -> 256 5x5: FFT_TILING"."""
        rows, n = C.POINTER(cl_conv_call_info)(), C.c_int()
        opts = self.options(None, horizon=True)
        self.check(self.L.cl_model_conv_calls(self.m, B, T, H, W, 1,
                                              C.byref(opts) if opts else None, self.target,
                                              C.byref(rows), C.byref(n)))
        out, buf = [], C.create_string_buffer(128)
        dirs = ("forward", "backward data", "backward filter")
        try:
            for i in range(n.value):
                r = rows[i]
                self.check(self.L.cl_model_conv_algo(self.m, C.byref(r), buf, 128))
                out.append("layer %d %s %s [%d, %d, %d, %d] -> %d %dx%d: %s" % (
                    r.layer, {0: "input", 1: "hidden"}.get(r.half, "head"), dirs[r.dir], r.N, r.C, r.H, r.W, r.K,
                    r.kh, r.kw, buf.value.decode() or "?"))
        finally:
            if rows:
                C.CDLL(None).free(C.cast(rows, C.c_void_p))
        return out

    def plan(self, B, T, H, W, training=True, opt=None, opts=None):
        p = cl_plan()
        opts = self.options(opts, horizon=True)
        if training:  # train_step's plan: its target (train_step above)
            opts = opts or cl_step_options()
            opts.plan_target = 1 + self.target
        self.check(self.L.cl_model_plan(self.m, B, T, H, W, int(training),
                                        C.byref(opt) if opt else None,
                                        C.byref(opts) if opts else None, C.byref(p)))
        try:
            entries = [(p.entries[i].name.decode(), CATEGORIES[p.entries[i].category],
                        p.entries[i].bytes) for i in range(p.n)]
            out = {"total": p.total, "by_category": dict(zip(CATEGORIES, p.by_category)),
                   "entries": entries, "arena": p.arena, "reserved": p.reserved,
                   "runtime": p.runtime}
        finally:
            self.L.cl_plan_free(C.byref(p))
        # a check of cl_plan's layout: the three sums agree, and the arena
        # holds at least the step buffers
        if sum(out["by_category"].values()) != out["total"] or \
                sum(e[2] for e in entries) != out["total"] or \
                not out["total"] <= out["reserved"] <= out["total"] + 256 * len(entries):
            raise RuntimeError("cl_plan layout or sums mismatch: %r" % (out["by_category"],))
        return out


# ---- the same ConvLSTM in PyTorch (inst/python/torch_convlstm.py), trained

class TorchRun:
    """A PyTorch model, Adam and (float16/bfloat16) autocast + GradScaler."""

    def __init__(self, cfg, dtype, device, compiled=False, compile_mode=None, seed=1):
        torch.manual_seed(seed)
        self.model = reference(cfg).to(device)
        self.K = cfg["K"] if is_forecaster(cfg) else 0
        self.device = device
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        if dtype == "float64":  # the parity checks' reference: no rounding to speak of
            self.model = self.model.double()
            self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.f64 = dtype == "float64"
        self.amp = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(dtype)
        self.scaler = None
        if dtype == "float16":
            self.scaler = (torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and
                           hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler())
        self.fwd = self.model
        if compiled:
            kw = {"mode": compile_mode} if compile_mode else {}
            self.fwd = torch.compile(self.model, **kw)

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        ctx = (torch.autocast(device_type=self.device.type, dtype=self.amp) if self.amp
               else contextlib.nullcontext())
        if self.f64:
            x, y = x.double(), y.double()
        wide = (lambda t: t.double()) if self.f64 else (lambda t: t.float())
        with ctx:
            if self.K:  # the paper's loss: BCE on logits per sequence ("batchmean")
                out = self.fwd(x, self.K)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    wide(out), y, reduction="sum") / x.shape[0]
            else:
                h = self.fwd(x, last_only=True)
                loss = torch.nn.functional.mse_loss(wide(h), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        return loss.item()

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()


# ---- configurations -------------------------------------------------------

CONFIGS = {
    # issue 4: tutorial (1x24x24, T=5, hidden c(64, 1), k 3, batch 100),
    # video64 (3x64x64, T=10, hidden 64, batch 16), mnist64 (1x64x64, T=10,
    # hidden c(64, 64), batch 32)
    "tutorial": dict(input_dim=1, H=24, W=24, T=5, hidden=[64, 1], kernels=[3, 3], batch=100),
    "video64": dict(input_dim=3, H=64, W=64, T=10, hidden=[64], kernels=[3], batch=16),
    "mnist64": dict(input_dim=1, H=64, W=64, T=10, hidden=[64, 64], kernels=[3, 3], batch=32),
    # Shi et al. (2015)'s best Moving MNIST model (Table 1): an encoder-
    # forecaster of 5x5 ConvLSTMs 128-64-64 over 4x4 patches of 64x64 frames,
    # 10 frames in, 10 forecast, channel peepholes; batch 16
    "paper": dict(input_dim=1, H=64, W=64, T=10, K=10, patch=4, hidden=[128, 64, 64],
                  kernels=[5, 5, 5], batch=16),
}
TINY = {  # --cpu-smoke: the same shapes of model, small enough for a CPU
    "tutorial": dict(input_dim=1, H=8, W=8, T=3, hidden=[6, 1], kernels=[3, 3], batch=4),
    "video64": dict(input_dim=3, H=10, W=8, T=3, hidden=[5], kernels=[3], batch=3),
    "mnist64": dict(input_dim=1, H=8, W=10, T=3, hidden=[4, 4], kernels=[3, 3], batch=2),
    "paper": dict(input_dim=1, H=8, W=8, T=3, K=2, patch=2, hidden=[3, 2], kernels=[3, 3],
                  batch=2),
}


def is_forecaster(cfg):
    return "K" in cfg


def reference(cfg):
    """PyTorch's model of a configuration (inst/python/torch_convlstm.py)."""
    if is_forecaster(cfg):
        return EncoderForecaster(cfg["input_dim"], cfg["hidden"], cfg["kernels"],
                                 patch=cfg["patch"])
    return ConvLSTM(cfg["input_dim"], cfg["hidden"], cfg["kernels"])


# Float32 convolution arithmetic, set on both sides at once (set_math):
#   "default": each side's default: ours TF32 (CONVLSTM_CUDA_TF32 unset = 1),
#              PyTorch's torch.backends.cudnn.allow_tf32 = True (its default);
#   "strict":  both strict float32 (CONVLSTM_CUDA_TF32=0, allow_tf32 False).
# PyTorch's matmul TF32 stays at its default (off); this model has no matmul.
MATHS = ("default", "strict")


def set_math(a, math):
    os.environ["CONVLSTM_CUDA_TF32"] = "1" if math == "default" else "0"
    torch.backends.cudnn.allow_tf32 = math == "default"
    torch.backends.cuda.matmul.allow_tf32 = False
    a.math = math


# Dense peak TFLOP/s of the devices the GPU programme meets (NVIDIA's data
# sheets, without sparsity), by float32 arithmetic on CUDA cores, TF32
# tensor cores and float16/bfloat16 tensor cores; matched in this order on
# the device's name. An unknown device gets no fraction of peak.
PEAK_TFLOPS = (
    ("H200", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4}),
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "fp16": 756.0}),
    ("H100", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4}),  # SXM5 (80GB HBM3)
    ("A100", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0}),
)


def device_peak(name, dtype, math):
    kind = "fp16" if dtype != "float32" else "tf32" if math == "default" else "fp32"
    for key, peaks in PEAK_TFLOPS:
        if key in (name or ""):
            return kind, peaks[kind]
    return kind, None


def step_flops(cfg, B):
    """Floating-point operations of one training step's convolutions (2 per
    multiply-add), the same count for both sides: forward, backward filter
    and backward data of every layer's convolution over [input, h] at every
    step, less the input gradient of layer 1 (x needs none). The cell's
    elementwise work, the loss and Adam are left out (well under 1%)."""
    if is_forecaster(cfg):
        return forecaster_flops(cfg, B)
    total, first_input = 0, 0
    c_in = cfg["input_dim"]
    for layer, (h, k) in enumerate(zip(cfg["hidden"], cfg["kernels"])):
        per_channel = 2 * B * cfg["T"] * cfg["H"] * cfg["W"] * 4 * h * k * k
        total += per_channel * (c_in + h)
        if layer == 0:
            first_input = per_channel * c_in
        c_in = h
    return 3 * total - first_input


def forecaster_flops(cfg, B):
    """step_flops of an encoder-forecaster: the encoder over T steps of the
    patched frames (C p p channels of H/p x W/p), the forecaster over K with
    no input to its first layer, and the head (a 1x1 convolution from all
    forecaster h to C p p channels) at each of the K steps."""
    p = cfg["patch"]
    pixels = B * (cfg["H"] // p) * (cfg["W"] // p)
    c_frame = cfg["input_dim"] * p * p
    total, first_input = 0, 0
    for steps, c0 in ((cfg["T"], c_frame), (cfg["K"], 0)):
        c_in = c0
        for layer, (h, k) in enumerate(zip(cfg["hidden"], cfg["kernels"])):
            per_channel = 2 * steps * pixels * 4 * h * k * k
            total += per_channel * (c_in + h)
            if layer == 0 and c0:
                first_input = per_channel * c_in
            c_in = h
    total += 2 * cfg["K"] * pixels * sum(cfg["hidden"]) * c_frame
    return 3 * total - first_input


TARGETS = {"speedup_eager_f32": 3.0, "speedup_compile_f32": 1.5, "peak_ratio_max": 0.5,
           "f16_over_f32_mnist64": 1.8}


def target_shape(cfg, B):
    """y: the last layer's last h, or an encoder-forecaster's K frames (in
    [0, 1], BCE's targets)."""
    if is_forecaster(cfg):
        return (B, cfg["K"], cfg["input_dim"], cfg["H"], cfg["W"])
    return (B, cfg["hidden"][-1], cfg["H"], cfg["W"])


def make_data(cfg, B, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, cfg["T"], cfg["input_dim"], cfg["H"], cfg["W"], generator=g)
    y = torch.rand(*target_shape(cfg, B), generator=g)
    return x, y


# ---- output ----------------------------------------------------------------

class Results:
    def __init__(self, outdir, meta):
        self.outdir = outdir
        os.makedirs(outdir, exist_ok=True)
        self.doc = {"meta": meta, "records": [], "checks": [], "targets": TARGETS}
        self.save()

    def add(self, rec):
        self.doc["records"].append(rec)
        self.save()

    def check(self, name, ok, **info):
        rec = dict(name=name, ok=bool(ok), **info)
        self.doc["checks"].append(rec)
        print("%s  %s  %s" % ("ok  " if ok else "FAIL", name,
                              " ".join("%s=%s" % (k, fmt(v)) for k, v in info.items())),
              flush=True)
        self.save()
        return ok

    def save(self):
        tmp = os.path.join(self.outdir, "results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
        os.replace(tmp, os.path.join(self.outdir, "results.json"))
        cols = ["mode", "config", "dtype", "impl", "batch", "mean_ms", "median_ms", "min_ms",
                "steps", "pack_ms", "upload_ms", "peak_allocated", "peak_reserved", "max_batch",
                "max_batch_planned", "compile_s", "loss", "error"]
        with open(os.path.join(self.outdir, "results.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for r in self.doc["records"]:
                w.writerow(r)


def fmt(v):
    if isinstance(v, float):
        return "%.4g" % v
    return str(v)


def mib(b):
    return "-" if b is None else "%.1f" % (b / 2**20)


# ---- timing ----------------------------------------------------------------

def bench_record(a, name, cfg, dtype, impl):
    """A bench record: the math in force and the step's FLOPs with the
    device's peak for this dtype and math (tflops() adds the rates)."""
    kind, peak = device_peak(a.device_name, dtype, a.math)
    return dict(mode="bench", config=name, dtype=dtype, impl=impl, batch=cfg["batch"],
                math=a.math if dtype == "float32" else "half", flops=step_flops(cfg, cfg["batch"]),
                peak_kind=kind, peak_tflops=peak)


def tflops(rec):
    """Achieved TFLOP/s of a timed record (its mean step), and the fraction
    of the device's peak; None where not timed or the peak is unknown."""
    if "mean_ms" not in rec:
        return None, None
    t = rec["flops"] / (rec["mean_ms"] * 1e-3) / 1e12
    return t, (t / rec["peak_tflops"] if rec.get("peak_tflops") else None)


def time_steps(step, sync, warmup, steps):
    """Per-step times (s) and the synced mean over `steps` back-to-back."""
    loss = None
    for _ in range(warmup):
        loss = step()
    sync()
    times = []
    t0 = time.perf_counter()
    for _ in range(steps):
        s0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - s0)
    sync()
    total = time.perf_counter() - t0
    return {"mean_ms": 1e3 * total / steps, "median_ms": 1e3 * statistics.median(times),
            "min_ms": 1e3 * min(times), "steps": steps, "loss": loss}


def pack_ms(lib, x, y, reps=5):
    """What our step spends converting x and y to the core's layout (host only)."""
    dst = torch.empty(x.numel() + y.numel(), dtype=torch.float32)
    xa, ya = host_array(x), host_array(y)
    p = C.cast(dst.data_ptr(), C.POINTER(C.c_float))
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        lib.L.cl_pack_host(p, C.byref(xa))
        lib.L.cl_pack_host(p, C.byref(ya))
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def torch_empty(dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


@contextlib.contextmanager
def backend_env(name, value):
    """An environment knob for the models created inside (our backend reads
    its knobs when a model is created)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def cuda_graphs(on):
    return backend_env("CONVLSTM_CUDA_GRAPHS", "1" if on else "0")


def graph_info(lib, m):
    gi = cl_graph_info()
    lib.L.cl_model_graph_info(m.m, C.byref(gi))
    return dict(on=bool(gi.on), captured=gi.captured, replayed=gi.replayed, plain=gi.plain,
                held=gi.held, bytes=gi.bytes, off=gi.off.decode())


def staged_steps(m, xa, ya, opt):
    """A step function of the fit's host path: step i on a thread of its own
    from staged batch i % 2 while this thread converts the next into the
    other (ctypes lets go of the GIL during each call); the two batches."""
    bufs = [C.c_void_p(), C.c_void_p()]
    m.staged_fill(bufs[0], xa, ya)
    state = {"k": 0}

    def step():
        k, out = state["k"], {}

        def run():
            try:
                out["loss"] = m.train_staged(xa, ya, bufs[k], opt)
            except Exception as e:  # noqa: BLE001 -- raised on this thread below
                out["error"] = e
        t = threading.Thread(target=run)
        t.start()
        m.staged_fill(bufs[1 - k], xa, ya)
        t.join()
        state["k"] = 1 - k
        if "error" in out:
            raise out["error"]
        return out["loss"]
    return step, bufs


def bench_ours(a, lib, res, name, cfg, dtype, x, y, data_on_device=False, graphs=False,
               staged=False):
    """Our step: x and y converted and uploaded at every step, or (data_on_device)
    uploaded once as a data set whose rows each step gathers on the device, or
    (staged) converted during the step before (staged_steps); with graphs, each
    step one CUDA graph (CONVLSTM_CUDA_GRAPHS=1), whose counts and
    instantiation bytes the record keeps ("graphs")."""
    impl = ("convlstm_data" if data_on_device else "convlstm_staged" if staged else "convlstm") + \
        ("_graphs" if graphs else "")
    rec = bench_record(a, name, cfg, dtype, impl)
    m, bufs = None, None
    try:
        with cuda_graphs(graphs):
            m = Ours.of(lib, cfg, a.cl_device,
                     DTYPES[dtype])
        m.load_torch(reference(cfg))
        opt = adam()
        if data_on_device:
            t0 = time.perf_counter()
            d = m.data_create(host_array(x), host_array(y))
            m.sync()
            rec["upload_ms"] = 1e3 * (time.perf_counter() - t0)
            rows = (C.c_int * cfg["batch"])(*range(cfg["batch"]))
            step = lambda: m.train_step_data(d, rows, opt)  # noqa: E731
        elif staged:
            xa, ya = host_array(x), host_array(y)
            step, bufs = staged_steps(m, xa, ya, opt)
        else:
            xa, ya = host_array(x), host_array(y)
            step = lambda: m.train_step(xa, ya, opt)  # noqa: E731
        rec.update(time_steps(step, m.sync, a.warmup, a.steps))
        st = m.stats()
        # a data set is the whole (one-batch) training set: counted, as
        # PyTorch's max_memory_allocated counts its x and y on the device
        rec.update(peak_allocated=st["peak_allocated"], peak_reserved=st["peak_reserved"],
                   peak_by_category=st["peak"], device_total=st["device_total"])
        if not data_on_device:
            rec["pack_ms"] = pack_ms(lib, x, y)
        if dtype == "float16":
            rec["loss_scale"] = m.loss_scale()
        if graphs:
            rec["graphs"] = graph_info(lib, m)
    except Exception as e:  # noqa: BLE001 -- a failed measurement is a result too
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        if staged and bufs:
            for b in bufs:
                lib.L.cl_staged_free(b)
        if m:
            m.free()  # frees a data set too
    res.add(rec)
    return rec


def bench_torch(a, res, name, cfg, dtype, x, y, compiled):
    impl = "torch_compile" if compiled else "torch_eager"
    rec = bench_record(a, name, cfg, dtype, impl)
    if compiled and not hasattr(torch, "compile"):
        rec["error"] = "skipped: torch %s has no torch.compile" % torch.__version__
        res.add(rec)
        return rec
    if dtype != "float32" and a.torch_dev.type == "cpu":
        rec["error"] = "skipped: autocast %s on the CPU is not what is compared" % dtype
        res.add(rec)
        return rec
    run = None
    try:
        torch_empty(a.torch_dev)
        xd, yd = x.to(a.torch_dev), y.to(a.torch_dev)
        run = TorchRun(cfg, dtype, a.torch_dev, compiled, a.compile_mode)
        t0 = time.perf_counter()
        run.step(xd, yd)  # the compile happens here
        run.sync()
        rec["compile_s"] = time.perf_counter() - t0 if compiled else None
        rec.update(time_steps(lambda: run.step(xd, yd), run.sync, a.warmup, a.steps))
        if a.torch_dev.type == "cuda":
            rec.update(peak_allocated=torch.cuda.max_memory_allocated(),
                       peak_reserved=torch.cuda.max_memory_reserved())
    except Exception as e:  # noqa: BLE001
        rec["error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    finally:
        run = xd = yd = None
        torch_empty(a.torch_dev)
        if compiled and hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
    res.add(rec)
    return rec


def time_left(a):
    return a.deadline - time.monotonic()


def skipped(res, mode, name, dtype, impl, why):
    r = dict(mode=mode, config=name, dtype=dtype, impl=impl, error="skipped: " + why)
    res.add(r)
    return r


def bench_rounds(a):
    """(dtype, math) in the order measured: float32 of every config first
    (the targets are float32's), at each math of --math; the half types
    once (TF32 concerns float32 convolutions only)."""
    out = []
    for dtype in a.dtypes:
        for math in (a.maths if dtype == "float32" else a.maths[:1]):
            out.append((dtype, math))
    return out


def run_bench(a, lib, res):
    for dtype, math in bench_rounds(a):
        set_math(a, math)
        for name in a.configs:
            cfg = a.cfg[name]
            x, y = make_data(cfg, cfg["batch"])
            print("-- bench %s %s (%s) batch %d (%.0fs left)" % (
                name, dtype, math if dtype == "float32" else "half", cfg["batch"],
                time_left(a)), flush=True)
            if time_left(a) < 30:
                for impl in ("convlstm", "convlstm_staged", "convlstm_data", "convlstm_graphs",
                             "convlstm_data_graphs", "torch_eager", "torch_compile"):
                    skipped(res, "bench", name, dtype, impl, "time budget").update(math=math)
                continue
            # each of ours without and with one CUDA graph per step (off by
            # default until this run shows them equal: test_cuda_graphs)
            for r in (bench_ours(a, lib, res, name, cfg, dtype, x, y),
                      bench_ours(a, lib, res, name, cfg, dtype, x, y, staged=True),
                      bench_ours(a, lib, res, name, cfg, dtype, x, y, data_on_device=True),
                      bench_ours(a, lib, res, name, cfg, dtype, x, y, graphs=True),
                      bench_ours(a, lib, res, name, cfg, dtype, x, y, data_on_device=True,
                                 graphs=True),
                      bench_torch(a, res, name, cfg, dtype, x, y, False),
                      None if a.no_compile else
                      skipped(res, "bench", name, dtype, "torch_compile",
                              "time budget (a compile takes up to a minute)")
                      if time_left(a) < 90 else
                      bench_torch(a, res, name, cfg, dtype, x, y, True)):
                if r:
                    t, frac = tflops(r)
                    g = r.get("graphs")
                    print("   %-20s %s%s" % (r["impl"], r.get("error") or
                                             "mean %.3f ms, median %.3f ms, peak %s MiB, "
                                             "%.2f TFLOP/s%s" %
                                             (r["mean_ms"], r["median_ms"],
                                              mib(r.get("peak_allocated")), t,
                                              "" if frac is None else " (%.1f%% of %s peak)" %
                                              (100 * frac, r["peak_kind"])),
                                             "" if not g else
                                             "; graphs %d captured, %d replayed, %d plain, "
                                             "%s MiB%s" % (g["captured"], g["replayed"],
                                                           g["plain"], mib(g["bytes"]),
                                                           ", OFF: " + g["off"] if g["off"]
                                                           else "")), flush=True)


# ---- the largest batch -------------------------------------------------------

def largest(fits, start, deadline, cap=1 << 22):
    """Largest n >= 1 with fits(n), doubling from start then bisecting, until
    the deadline; returns (n, exact) where exact is False if time ran out."""
    lo, hi = 0, None
    n = max(1, start)
    while hi is None:
        if time.monotonic() > deadline:
            return lo, False
        if fits(n):
            lo = n
            if n >= cap:
                return lo, True
            n = min(2 * n, cap)
        else:
            hi = n
    while hi - lo > 1:
        if time.monotonic() > deadline:
            return lo, False
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, True


def max_batch_ours(a, lib, res, name, cfg, dtype):
    rec = dict(mode="max_batch", config=name, dtype=dtype, impl="convlstm")
    m = None
    try:
        torch_empty(a.torch_dev)
        m = Ours.of(lib, cfg, a.cl_device,
                 DTYPES[dtype], memory_limit=a.memory_limit)
        opt = adam()
        st = m.stats()
        free = st["device_free"] - a.margin_mb * 2**20
        base = st["reserved"]
        T, H, W = cfg["T"], cfg["H"], cfg["W"]

        def plan_fits(B):  # what the device must hand over: reserved bytes
            return m.plan(B, T, H, W, True, opt)["reserved"] - base <= free

        planned, exact = largest(plan_fits, cfg["batch"], time.monotonic() + 30)
        rec.update(max_batch_planned=planned, planned_exact=exact, device_free=free,
                   plan_reserved=m.plan(planned, T, H, W, True, opt)["reserved"] if planned
                   else 0)
        # confirmed by real steps (two: Adam's state exists from the first on),
        # backing off 2% at a time if the plan was too optimistic
        x, y = make_data(cfg, max(planned, 1), seed=1)
        B, tries, confirmed = planned, 0, None
        while B >= 1 and tries < 10:
            tries += 1
            try:
                xa, ya = host_array(x[:B].contiguous()), host_array(y[:B].contiguous())
                for _ in range(2):
                    m.train_step(xa, ya, opt)
                m.sync()
                confirmed = B
                break
            except ClError as e:
                # an OOM means the plan was optimistic (a finding too); any
                # other failure (a size cuDNN refuses) halves the batch
                rec.setdefault("confirm_errors", []).append("B=%d: %s" % (B, e))
                m.empty_cache()
                B = int(B * 0.98) if e.status == CL_E_OOM else B // 2
        rec["max_batch"] = confirmed
        st = m.stats()
        rec.update(peak_allocated=st["peak_allocated"], peak_reserved=st["peak_reserved"])
    except Exception as e:  # noqa: BLE001
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        if m:
            m.free()
    res.add(rec)
    return rec


def max_batch_torch(a, res, name, cfg, dtype):
    rec = dict(mode="max_batch", config=name, dtype=dtype, impl="torch_eager")
    if a.torch_dev.type != "cuda":
        rec["error"] = "skipped: needs a GPU (an OOM is caught, not provoked, on the CPU)"
        res.add(rec)
        return rec
    run = TorchRun(cfg, dtype, a.torch_dev)
    shape = (cfg["T"], cfg["input_dim"], cfg["H"], cfg["W"])
    notes = rec["notes"] = []

    def fits(B):
        ok = False
        try:
            x = torch.rand((B,) + shape, device=a.torch_dev)
            y = torch.rand(*target_shape(cfg, B), device=a.torch_dev)
            run.step(x, y)
            run.step(x, y)
            run.sync()
            ok = True
        except torch.cuda.OutOfMemoryError:
            pass
        except RuntimeError as e:  # cuDNN or cuBLAS refusing a size counts as not fitting
            notes.append("B=%d: %s" % (B, str(e)[:200]))
        x = y = None
        run.opt.zero_grad(set_to_none=True)
        torch_empty(a.torch_dev)
        return ok

    try:
        B, exact = largest(fits, cfg["batch"],
                           min(time.monotonic() + a.max_batch_seconds, a.deadline - 15))
        rec.update(max_batch=B, exact=exact)
    except Exception as e:  # noqa: BLE001
        rec["error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    finally:
        run = None
        torch_empty(a.torch_dev)
    res.add(rec)
    return rec


# ---- A/B: each backend switch against the default -------------------------------

# name -> (environment variable read when a model is created, its default,
# the switched value, whether a switched step must give the default's loss
# bit for bit). A switch that lands is one row here; gpu_session.sh's ab
# stage times every row.
# CONVLSTM_CUDNN_ALGO_CACHE's file: one per machine, kept between sessions
# on it (a first run times and stores; a later one reuses, no timing).
ALGO_CACHE = os.path.join(tempfile.gettempdir(), "convlstm-cudnn-algos.txt")
AB_SWITCHES = {
    "cudnn_benchmark": ("CONVLSTM_CUDNN_BENCHMARK", "0", "1", False),
    "cuda_graphs": ("CONVLSTM_CUDA_GRAPHS", "0", "1", True),
    # the bias added in the cell's kernels (no add_bias / bias_grad passes):
    # other sums' order, so not bit for bit
    "cuda_fused_bias": ("CONVLSTM_CUDA_FUSED_BIAS", "0", "1", False),
    # activations channels last (NHWC) for cuDNN's tensor cores: other
    # kernels, so not bit for bit
    "cuda_channels_last": ("CONVLSTM_CUDA_CHANNELS_LAST", "0", "1", False),
    # timed choices stored per machine ("": none, the default)
    "cudnn_algo_cache": ("CONVLSTM_CUDNN_ALGO_CACHE", "", ALGO_CACHE, False),
}


def algo_cache_records(path):
    """Records in a stored algorithm file (its first line is the header);
    None when there is none."""
    try:
        with open(path) as f:
            return max(0, sum(1 for _ in f) - 1)
    except OSError:
        return None
AB_ROUNDS = 5


def ab_model(a, lib, cfg, dtype, ref, env):
    """Our model with the knobs in env (a list of (variable, value)), loaded
    with the reference's weights, and its Adam state."""
    with contextlib.ExitStack() as stack:
        for name, value in env:
            stack.enter_context(backend_env(name, value))
        m = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    m.load_torch(ref)
    return m, adam()


def ab_pair(a, lib, res, name, cfg, dtype, switch):
    var, off, on, exact = AB_SWITCHES[switch]
    rec = dict(mode="ab", switch=switch, config=name, dtype=dtype, impl="convlstm",
               batch=cfg["batch"], math=a.math if dtype == "float32" else "half")
    models = []
    try:
        x, y = make_data(cfg, cfg["batch"])
        xa, ya = host_array(x), host_array(y)
        ref = reference(cfg)
        for value in (off, on):
            models.append(ab_model(a, lib, cfg, dtype, ref, [(var, value)]))
        steps = [lambda m=m, o=o: m.train_step(xa, ya, o) for m, o in models]
        k = max(1, a.steps // AB_ROUNDS)
        means = ([], [])
        losses = [None, None]
        for i, (m, _) in enumerate(models):  # the same warm-up: same weights after it
            for _ in range(a.warmup):
                losses[i] = steps[i]()
            m.sync()
        for _ in range(AB_ROUNDS):
            for i, (m, _) in enumerate(models):
                t = time_steps(steps[i], m.sync, 0, k)
                means[i].append(t["mean_ms"])
                losses[i] = t["loss"]
        base, switched = statistics.median(means[0]), statistics.median(means[1])
        if var == "CONVLSTM_CUDNN_ALGO_CACHE":
            rec.update(algo_cache=on, algo_cache_records=algo_cache_records(on))
        rec.update(base_ms=base, switch_ms=switched, speedup=base / switched,
                   rounds=AB_ROUNDS, steps_per_round=k, loss_base=losses[0],
                   loss_switch=losses[1], same_loss=losses[0] == losses[1])
        if exact:
            res.check("ab %s %s %s: the switched step's losses equal the default's bit for bit" % (
                switch, name, dtype), losses[0] == losses[1], base=losses[0], switched=losses[1])
    except Exception as e:  # noqa: BLE001 -- a failed measurement is a result too
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        for m, _ in models:
            m.free()
    res.add(rec)
    return rec


def run_ab(a, lib, res):
    for dtype, math in bench_rounds(a):
        set_math(a, math)
        for name in a.configs:
            for switch in AB_SWITCHES:
                if time_left(a) < 20:
                    skipped(res, "ab", name, dtype, "convlstm", "time budget").update(
                        switch=switch, math=math)
                    continue
                r = ab_pair(a, lib, res, name, a.cfg[name], dtype, switch)
                print("   ab %-18s %-9s %-8s %s" % (
                    switch, name, dtype, r.get("error") or
                    "default %.3f ms, switched %.3f ms: %.2fx; losses %s" % (
                        r["base_ms"], r["switch_ms"], r["speedup"],
                        "equal" if r["same_loss"] else "%.7g vs %.7g" % (
                            r["loss_base"], r["loss_switch"]))), flush=True)


def run_max_batch(a, lib, res):
    set_math(a, a.maths[0])
    for dtype in a.dtypes:
        for name in a.configs:
            cfg = a.cfg[name]
            print("-- max batch %s %s (%.0fs left)" % (name, dtype, time_left(a)), flush=True)
            if time_left(a) < 40:
                o = skipped(res, "max_batch", name, dtype, "convlstm", "time budget")
                t = skipped(res, "max_batch", name, dtype, "torch_eager", "time budget")
            else:
                o = max_batch_ours(a, lib, res, name, cfg, dtype)
                t = max_batch_torch(a, res, name, cfg, dtype)
            print("   convlstm planned %s, confirmed %s %s| torch eager %s %s" % (
                o.get("max_batch_planned"), o.get("max_batch"), o.get("error", ""),
                t.get("max_batch"), t.get("error", "")), flush=True)


# ---- checks ------------------------------------------------------------------

def rel_err(got, ref):
    """Normwise: max |got - ref| / max |ref|."""
    d = (got.double() - ref.double()).abs().max().item()
    s = ref.double().abs().max().item()
    return d / s if s > 0 else d


def worst(pairs):
    """The tensor whose normwise error is largest: (error, name)."""
    return max((rel_err(g, r), n) for n, g, r in pairs)


def check_parity(a, lib, res, name, cfg, dtype, n_steps):
    """Our losses of n Adam steps, the gradients of the first and the
    parameters after the last, against PyTorch's eager model on the same
    device from the same weights, and both against PyTorch's float64 run
    (the instrument that tells rounding from error): ours passes where it is
    within the tolerance of PyTorch's, or no further from float64 than 4x
    PyTorch's own distance in our dtype. A deep model (the paper's: 3 layers
    of 5x5 over 20 frames) differs from PyTorch by more than 1e-4 in float32
    through rounding alone, and Adam's first steps move each weight by about
    lr whatever its gradient's size, so a weight whose gradient is rounding
    noise moves either way; 4x leaves room for another cuDNN algorithm (FFT
    against implicit GEMM) than PyTorch's."""
    tol = 1e-4 if dtype == "float32" else 2e-2
    if a.torch_dev.type == "cpu" and dtype != "float32":
        return
    set_math(a, "strict")  # float32's tolerance; both sides' TF32 differ more
    x, y = make_data(cfg, cfg["batch"], seed=2)
    run = TorchRun(cfg, dtype, a.torch_dev, seed=3)
    ref = TorchRun(cfg, "float64", a.torch_dev, seed=3)
    m = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])

    algos = []

    def judge(what, ours, theirs, extra, bound=tol, diagnose=None):
        ok = ours[0] <= bound or ours[0] <= 4 * theirs[0]
        if not ok and algos:
            extra = dict(extra, algorithms=algos)
        if not ok and diagnose:
            extra = dict(extra, **diagnose())
        res.check("parity %s %s: %s" % (name, dtype, what), ok, max_rel=ours[0],
                  tensor=ours[1], torch_vs_f64=theirs[0], torch_tensor=theirs[1], tol=bound,
                  **extra)

    def without_transforms(xa, ya, rg, names):
        """Where float32's first gradients miss, the same step again with
        cuDNN's FFT and non-fused Winograd algorithms passed over
        (CONVLSTM_CUDNN_NO_FFT=1): whether the algorithm is the cause. The
        CPU backend ignores the variable: the CPU smoke runs it to check
        that it gives the first step's gradients again."""
        if dtype != "float32":
            return {}
        os.environ["CONVLSTM_CUDNN_NO_FFT"] = "1"
        try:
            m2 = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
        finally:
            del os.environ["CONVLSTM_CUDNN_NO_FFT"]
        try:
            m2.load_torch(TorchRun(cfg, dtype, a.torch_dev, seed=3).model)
            m2.train_step(xa, ya, adam())
            got = worst((n, m2.grad(n), rg[n]) for n in names)
            return {"no_fft_max_rel": got[0], "no_fft_tensor": got[1],
                    "no_fft_algorithms": m2.conv_algos(cfg["batch"], cfg["T"], cfg["H"],
                                                       cfg["W"])}
        except Exception as e:  # a diagnostic: its failure is reported, not raised
            return {"no_fft_error": str(e)}
        finally:
            m2.free()

    try:
        m.load_torch(run.model)
        xa, ya, opt = host_array(x), host_array(y), adam()
        xd, yd = x.to(a.torch_dev), y.to(a.torch_dev)
        ours, theirs, truth = [], [], []
        for i in range(n_steps):
            ours.append(m.train_step(xa, ya, opt))
            theirs.append(run.step(xd, yd))
            truth.append(ref.step(xd, yd))
            if i == 0:
                algos[:] = m.conv_algos(cfg["batch"], cfg["T"], cfg["H"], cfg["W"])
                res.check("parity %s %s: every convolution of the step names its algorithm" %
                          (name, dtype), algos and not any(a.endswith(": ?") for a in algos),
                          calls=len(algos), first=algos[0] if algos else None)
                tg = {n: p.grad.detach().float().cpu()
                      for n, p in run.model.named_parameters() if p.grad is not None}
                rg = {n: p.grad.detach().cpu() for n, p in ref.model.named_parameters()}
                if all(torch.isfinite(t).all() for t in tg.values()):
                    direct = worst((n, m.grad(n), t) for n, t in tg.items())
                    first = worst((n, m.grad(n), rg[n]) for n in tg)
                    judge("gradients of step 1 vs PyTorch (float64)", first,
                          worst((n, t, rg[n]) for n, t in tg.items()),
                          dict(vs_torch=direct[0]),
                          diagnose=lambda: without_transforms(xa, ya, rg, list(tg)))
                    if a.cpu_smoke and dtype == "float32":
                        again = without_transforms(xa, ya, rg, list(tg))
                        res.check("parity %s %s: the diagnostic step gives step 1's gradients "
                                  "again" % (name, dtype),
                                  again.get("no_fft_max_rel") == first[0], first=first[0],
                                  **again)
                else:  # GradScaler skipped the step: its gradients are not comparable
                    res.check("parity %s %s: gradients of step 1 (PyTorch's scaler "
                              "overflowed, not compared)" % (name, dtype), True)

        def loss_err(got):
            return max((abs(o - t) / max(abs(t), 1e-12), k)
                       for k, (o, t) in enumerate(zip(got, truth)))
        direct = max(abs(o - t) / max(abs(t), 1e-12) for o, t in zip(ours, theirs))
        judge("losses of %d Adam steps vs PyTorch (float64)" % n_steps, loss_err(ours),
              loss_err(theirs), dict(vs_torch=direct, first=ours[0], last=ours[-1],
                                     torch_last=theirs[-1], f64_last=truth[-1]))
        sd, rd = run.model.state_dict(), ref.model.state_dict()
        direct = worst((n, m.param(n), sd[n].float().cpu()) for n, _ in m.tensors)
        judge("parameters after %d steps vs PyTorch (float64)" % n_steps,
              worst((n, m.param(n), rd[n].cpu()) for n, _ in m.tensors),
              worst((n, sd[n].cpu(), rd[n].cpu()) for n, _ in m.tensors),
              dict(vs_torch=direct[0], vs_torch_tensor=direct[1]), bound=10 * tol)
    finally:
        m.free()
        run = ref = None
        torch_empty(a.torch_dev)
        set_math(a, "strict")


def check_data_equals_host(a, lib, res, name, cfg, dtype, n_steps):
    """Steps on rows of a data set against the same rows as host arrays, from
    the same weights: bit for bit on the CPU (the same kernels read the same
    values); within float rounding on the GPU (cuDNN may pick its algorithm
    per call, and its non-deterministic algorithms sum in another order at
    each call: a third model takes the first step from host arrays again,
    and the data set's gradients may differ from the host's as much as
    twice that)."""
    B = cfg["batch"]
    x, y = make_data(cfg, 2 * B, seed=4)
    g = torch.Generator().manual_seed(5)
    batches = [torch.randint(0, 2 * B, (B,), generator=g) for _ in range(n_steps)]
    ref = reference(cfg)
    host = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    dev = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    again = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    try:
        host.load_torch(ref)
        dev.load_torch(ref)
        again.load_torch(ref)
        d = dev.data_create(host_array(x), host_array(y))
        opt = adam()
        lh, ld = [], []
        for k, idx in enumerate(batches):
            xb, yb = x[idx].contiguous(), y[idx].contiguous()
            lh.append(host.train_step(host_array(xb), host_array(yb), opt))
            ld.append(dev.train_step_data(d, (C.c_int * B)(*idx.tolist()), opt))
            if k == 0:
                gr = worst((n, dev.grad(n), host.grad(n)) for n, _ in dev.tensors)
                again.train_step(host_array(xb), host_array(yb), opt)
                noise = worst((n, again.grad(n), host.grad(n)) for n, _ in dev.tensors)
                again.free()
                again = None
        exact = a.cl_device == CL_DEVICE_CPU
        diff = max(abs(p - q) / max(abs(q), 1e-12) for p, q in zip(ld, lh))
        pr = worst((n, dev.param(n), host.param(n)) for n, _ in dev.tensors)
        tol = 0.0 if exact else (1e-5 if dtype == "float32" else 1e-2)
        # On the CPU every bit; on the GPU the first step's gradients and the
        # losses within rounding. The weights after Adam's steps are reported,
        # not judged there: a weight whose gradient is rounding noise moves by
        # about lr either way (the H200 read 0.16 of a tensor's largest after 3
        # steps of the paper's model, the losses within 1e-6).
        ok = (diff <= tol and (gr[0] <= max(10 * tol, 2 * noise[0])) and
              (not exact or pr[0] == 0))
        extra = {} if ok else {"algorithms": dev.conv_algos(B, cfg["T"], cfg["H"], cfg["W"])}
        res.check("data set %s %s: %d steps on gathered rows vs host arrays" %
                  (name, dtype, n_steps), ok, max_rel_loss=diff, max_rel_grad=gr[0],
                  grad_tensor=gr[1], host_again_grad=noise[0], host_again_tensor=noise[1],
                  max_rel_param=pr[0], param_tensor=pr[1], tol=tol, **extra)
        dev.data_free(d)
        st = dev.stats()
        dev.empty_cache()
        res.check("data set %s %s: freed, its bytes returned" % (name, dtype),
                  dev.stats()["current"]["data"] == 0 and lib.L.cl_data_alive() == 0,
                  data_before_free=st["current"]["data"])
    finally:
        host.free()
        dev.free()
        if again is not None:
            again.free()


# ---- the plan against memory measured outside the allocator (issue 10)
#
# The allocator's own counters (memory_stats) are the plan's bookkeeping:
# that they equal the plan shows only that the executor allocates what the
# plan lists. The measured figure comes from an independent instrument: on
# the GPU the driver (cudaMemGetInfo, total - free, asked through PyTorch),
# on the CPU the operating system (VmHWM in /proc/self/status).

MiB = 2**20
# cudaMalloc hands out device memory in 2 MiB pages: an allocation of 2 MiB
# or more is rounded up to whole pages, smaller ones share a 2 MiB page the
# driver maps for them. So a model's buffers, measured as the change of
# total - free, lie between its reserved bytes less one page (small buffers
# landing in a page the driver still held) and its reserved bytes plus one
# page per live allocation plus one.
CUDA_PAGE = 2 * MiB
# The CPU bound of tests/testthat/test-memory-measured.R: 4 KiB pages per
# buffer, buffers under 64 KiB in heap pages already resident, and the
# interpreter's own few objects in the window.
HWM_REL, HWM_ABS = 0.01, 2 * MiB
# a second step of a planned shape allocates nothing (16 pages of slack for
# the interpreter's objects and late-faulted code pages, as there)
HWM_SECOND_STEP = 64 * 1024
# the CPU probe's plan is made at least this large, so that the 2 MiB of
# slack is a small part of it and a wrong plan cannot hide in it
HWM_MIN_PLAN = 24 * MiB


def cuda_used():
    """Bytes used on the device, total - free, as the driver says
    (torch.cuda.mem_get_info is cudaMemGetInfo): every process's, and there
    is no other on the lent machine."""
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def check_measured_gpu(a, lib, res, name, cfg, dtype):
    """The plan's reserved bytes against the driver's used bytes, grown over
    creating a model and its first training step."""
    x, y = make_data(cfg, cfg["batch"])
    opt = adam()
    T, H, W, B = cfg["T"], cfg["H"], cfg["W"], cfg["batch"]
    # warm-up at the same shape: the kernels and cuDNN engines this step
    # loads (lazily, at first launch) are the process's runtime, not the model's
    w = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    try:
        w.train_step(host_array(x), host_array(y), opt)
        w.sync()
    finally:
        w.free()
    xa, ya = host_array(x), host_array(y)
    torch_empty(a.torch_dev)  # PyTorch's cache holds nothing now, and takes nothing below
    used0 = cuda_used()
    m = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    try:
        m.train_step(xa, ya, opt)
        m.sync()
        used1 = cuda_used()
        mm = m.measured()
        m.train_step(xa, ya, opt)
        m.sync()
        used2 = cuda_used()
        plan = m.plan(B, T, H, W, True, opt)
        st = m.stats()
        live = sum(st["n_alloc"].values()) - sum(st["n_free"].values())
        growth = used1 - used0
        # what the model's own buffers took, from our library's reading of
        # the same driver: from inside cl_model_create, after the backend's
        # stream and cuDNN handle, before the parameters
        lib_growth = mm["device_used"] - mm["device_used_at_create"] if mm["have_device"] \
            else None
        # the rest of the growth: this model's stream and cuDNN handle, a
        # runtime cost per model, bounded by the process's runtime line (the
        # first backend's context, stream and handle)
        setup = growth - lib_growth if lib_growth is not None else None
        lo = plan["reserved"] - CUDA_PAGE
        hi = plan["reserved"] + CUDA_PAGE * (live + 1)
        # the bound of the whole growth: the pages of the model's buffers,
        # plus its own stream and cuDNN handle, which cost no more than the
        # runtime line (the first backend's set-up, which made the same two)
        # and one page
        setup_max = plan["runtime"] + CUDA_PAGE
        res.check("memory %s %s: driver (PyTorch's cudaMemGetInfo) growth over create + first "
                  "step = plan reserved within 2 MiB pages + backend set-up" % (name, dtype),
                  lo <= growth <= hi + setup_max, driver_growth=growth,
                  plan_reserved=plan["reserved"], live_allocations=live,
                  runtime=plan["runtime"], bound="[%d, %d]" % (lo, hi + setup_max))
        res.check("memory %s %s: driver (cl_model_measured_memory) growth over the model's "
                  "buffers = plan reserved within 2 MiB pages; set-up <= runtime + 2 MiB" %
                  (name, dtype),
                  lib_growth is not None and lo <= lib_growth <= hi and
                  0 <= setup <= setup_max, model_buffers=lib_growth,
                  plan_reserved=plan["reserved"], backend_setup=setup, runtime=plan["runtime"],
                  bound="[%d, %d], set-up <= %d" % (lo, hi, setup_max), why=mm["why"] or "")
        res.check("memory %s %s: driver-measured growth at a second step is 0" % (name, dtype),
                  used2 == used1, growth=used2 - used1)
    finally:
        m.free()


def hwm_window(fn):
    """How far the resident high-water mark rises over fn() above the
    resident memory at its start (VmHWM reset through /proc/self/clear_refs)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = proc_status()["VmRSS"]
    fn()
    return proc_status()["VmHWM"] - rss0


def proc_status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def arena_untouched(arena):
    """Pages of the step arena the step never wrote (reserved, not resident):
    the arena is one anonymous mapping of its own (cpu_alloc maps blocks of
    1 MiB and more with a 64-byte header), found in /proc/self/smaps by its
    size; None when it is not found alone."""
    if arena + 64 < MiB:
        return None
    kb = (arena + 64 + 4095) // 4096 * 4
    with open("/proc/self/smaps") as f:
        sm = f.read().split("\n")
    at = [i for i, line in enumerate(sm) if re.match(r"^Size: +%d kB$" % kb, line)]
    if len(at) != 1:
        return None
    rss = next(int(line.split()[1]) for line in sm[at[0] + 1:at[0] + 5]
               if line.startswith("Rss:"))
    return (kb - rss) * 1024


def hwm_probe(argjson):
    """--hwm-probe: one model in this fresh process (started by check_measured_cpu
    with glibc serving blocks of 64 KiB and more as mappings of their own, so
    that freed heap cannot hide the model's buffers), measured by VmHWM; the
    method of tests/testthat/scripts/hwm-probe.R. Prints one JSON line."""
    p = json.loads(argjson)
    lib = Lib(p["lib"])
    cfg, B, dt = p["cfg"], p["B"], DTYPES[p["dtype"]]
    opt = adam()
    x, y = make_data(cfg, B)
    xa, ya = host_array(x), host_array(y)
    # warm-up: the process's first model pays the process's costs (the
    # thread pool, the GEMM's buffers); tiny, one channel and 1x1 kernels, so
    # that the pages it frees cannot hide the measured model's small buffers
    small = dict(cfg, hidden=[1] * len(cfg["hidden"]), kernels=[1] * len(cfg["hidden"]),
                 T=2, H=min(4, cfg["H"]), W=min(4, cfg["W"]))
    wx, wy = make_data(small, 1)
    w = Ours.of(lib, small, CL_DEVICE_CPU, dt)
    w.train_step(host_array(wx), host_array(wy), opt)
    w.free()
    del w, wx, wy
    hwm_window(lambda: None)  # the interpreter's first collection's bookkeeping
    box = {}

    def create():
        box["m"] = Ours.of(lib, cfg, CL_DEVICE_CPU, dt)

    grow_create = hwm_window(create)
    m = box["m"]
    grow_first = hwm_window(lambda: m.train_step(xa, ya, opt))
    plan = m.plan(B, cfg["T"], cfg["H"], cfg["W"], True, opt)
    untouched = arena_untouched(plan["arena"])
    grow_second = hwm_window(lambda: m.train_step(xa, ya, opt))
    print(json.dumps(dict(grow_create=grow_create, grow_first=grow_first,
                          grow_second=grow_second, untouched=untouched, total=plan["total"],
                          reserved=plan["reserved"], arena=plan["arena"])))
    m.free()
    return 0


def check_measured_cpu(a, lib, res, name, cfg, dtype):
    """The plan's total against the growth of the process's resident
    high-water mark over creating a model and its first step, in a fresh
    process (--hwm-probe), at a batch whose plan is at least HWM_MIN_PLAN."""
    if not os.path.exists("/proc/self/clear_refs"):
        res.check("memory %s %s: no /proc/self/clear_refs, VmHWM not measured" %
                  (name, dtype), True)
        return
    m = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    try:
        B = cfg["batch"]
        while m.plan(B, cfg["T"], cfg["H"], cfg["W"], True, adam())["total"] < HWM_MIN_PLAN \
                and B < 1 << 16:
            B *= 2
    finally:
        m.free()
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1")
    arg = json.dumps(dict(lib=lib.path, cfg=cfg, B=B, dtype=dtype))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--hwm-probe", arg],
                       env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("--hwm-probe failed (%d): %s" % (r.returncode, r.stderr[-500:]))
    v = json.loads(r.stdout.strip().split("\n")[-1])
    measured = v["grow_create"] + v["grow_first"]
    untouched = v["untouched"] or 0  # reserved pages the step never wrote cost nothing
    planned = v["total"]
    gap = measured + untouched - planned
    bound = HWM_REL * planned + HWM_ABS
    res.check("memory %s %s: VmHWM growth over create + first step = plan total, within "
              "1%% + 2 MiB" % (name, dtype), abs(gap) <= bound, batch=B,
              vmhwm_growth=measured, untouched_arena=untouched, plan_total=planned, gap=gap,
              bound=int(bound))
    res.check("memory %s %s: VmHWM growth at a second step <= 64 KiB" % (name, dtype),
              v["grow_second"] <= HWM_SECOND_STEP, growth=v["grow_second"])


def check_plan_equals_peak(a, lib, res, name, cfg, dtype):
    """The plan against the driver (GPU) or the OS (CPU) first; then the
    allocator's own counters, as a secondary consistency check."""
    if a.cl_device == CL_DEVICE_CUDA:
        check_measured_gpu(a, lib, res, name, cfg, dtype)
    else:
        check_measured_cpu(a, lib, res, name, cfg, dtype)
    m = Ours.of(lib, cfg, a.cl_device, DTYPES[dtype])
    try:
        x, y = make_data(cfg, cfg["batch"])
        opt = adam()
        plan = m.plan(cfg["batch"], cfg["T"], cfg["H"], cfg["W"], True, opt)
        for _ in range(2):
            m.train_step(host_array(x), host_array(y), opt)
        peak = m.stats()["peak"]
        diff = {c: peak[c] - plan["by_category"][c] for c in CATEGORIES
                if peak[c] != plan["by_category"][c]}
        res.check("memory %s %s (allocator counters, consistency): plan == counted peak per "
                  "category" % (name, dtype),
                  not diff, plan_total=plan["total"], diff=diff or "none")
        st = m.stats()
        res.check("memory %s %s (allocator counters, consistency): plan == counted reserved "
                  "(model buffers + step arena)" % (name, dtype),
                  st["peak_reserved"] == plan["reserved"],
                  plan_reserved=plan["reserved"], peak_reserved=st["peak_reserved"])
        before = sum(m.stats()["n_alloc"].values())
        m.train_step(host_array(x), host_array(y), opt)
        made = sum(m.stats()["n_alloc"].values()) - before
        res.check("memory %s %s (allocator counters, consistency): no allocation inside a "
                  "step of a planned shape" % (name, dtype), made == 0, allocations=made)
        # inference with last states only: the peak must not grow with T
        m.empty_cache()
        peaks = []
        for T in (cfg["T"], 4 * cfg["T"]):
            xi, _ = make_data(dict(cfg, T=T), cfg["batch"])
            m.empty_cache()
            m.reset_peak()
            m.forward(host_array(xi), False, cl_step_options(outputs=CL_OUTPUTS_LAST))
            peaks.append(m.stats()["peak_allocated"])
        res.check("memory %s %s (allocator counters, consistency): inference peak "
                  "independent of T" % (name, dtype),
                  peaks[0] == peaks[1], T=(cfg["T"], 4 * cfg["T"]), peaks=peaks)
    finally:
        m.free()


def check_oom_recovery(a, lib, res, name, cfg):
    """A real device OOM (or, on the CPU, the memory limit's): a clear error
    with the numbers, and the model trains afterwards."""
    limit = 0 if a.cl_device == CL_DEVICE_CUDA else 64 * 2**20
    m = Ours.of(lib, cfg, a.cl_device, CL_F32,
             memory_limit=limit)
    try:
        opt = adam()
        st = m.stats()
        cap = st["device_total"] if limit == 0 else limit
        # the plan itself says which batch is over the device: plan(2) - plan(1)
        # is not the cost of one image (the convolution workspaces do not grow
        # with the batch), and on an H100 it gave a batch that fitted
        B = cfg["batch"]
        while m.plan(B, cfg["T"], cfg["H"], cfg["W"], True, opt)["total"] <= 1.25 * cap:
            B *= 2
        x, y = make_data(cfg, B, seed=4)
        err = None
        try:
            m.train_step(host_array(x), host_array(y), opt)
        except ClError as e:
            err = e
        ok1 = err is not None and err.status == CL_E_OOM and "tried to allocate" in str(err)
        res.check("oom %s: a batch of %d is refused with CL_E_OOM and the numbers" % (name, B),
                  ok1, message=str(err) if err else "no error")
        x, y = make_data(cfg, cfg["batch"], seed=5)
        loss = m.train_step(host_array(x), host_array(y), opt)
        st2 = m.stats()
        res.check("oom %s: the model trains after the OOM" % name, math.isfinite(loss),
                  loss=loss, allocated=st2["allocated"])
    finally:
        m.free()


def run_checks(a, lib, res):
    steps = 3 if a.cpu_smoke else 20
    set_math(a, "strict")  # the parity tolerances are strict float32's
    for name in a.configs:
        cfg = a.cfg[name]
        for dtype in a.check_dtypes:
            print("-- checks %s %s" % (name, dtype), flush=True)
            for fn in (lambda: check_parity(a, lib, res, name, cfg, dtype, steps),
                       lambda: check_data_equals_host(a, lib, res, name, cfg, dtype, 3),
                       lambda: check_plan_equals_peak(a, lib, res, name, cfg, dtype)):
                try:
                    fn()
                except Exception as e:  # noqa: BLE001
                    res.check("checks %s %s raised" % (name, dtype), False,
                              error="%s: %s" % (type(e).__name__, e))
    try:
        check_oom_recovery(a, lib, res, a.configs[-1], a.cfg[a.configs[-1]])
    except Exception as e:  # noqa: BLE001
        res.check("oom check raised", False, error="%s: %s" % (type(e).__name__, e))


# ---- struct layouts ----------------------------------------------------------

def header_fields(hdr):
    """{struct name: [field names in order]} from the header's typedef'd
    struct definitions (comments stripped; `int a, b;` and arrays handled)."""
    hdr = re.sub(r"/\*.*?\*/", "", hdr, flags=re.S)
    out = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} \1;", hdr, flags=re.S):
        names = []
        for decl in m.group(2).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            head, _, rest = decl.partition(",")
            parts = [head] + (rest.split(",") if rest else [])
            for d in parts:
                d = re.sub(r"\[.*?\]", "", d).strip()
                names.append(re.findall(r"\w+", d)[-1])
        out[m.group(1)] = names
    return out


def check_layout(res):
    """sizeof and offsetof of every struct, from the C compiler, against ctypes."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        res.check("layout: no C compiler, not checked", True)
        return
    with open(os.path.join(ROOT, "inst", "include", "convlstm.h")) as f:
        hdr = f.read()
    listed = re.findall(r"X\((\w+)\)", hdr[hdr.find("#define CL_API_STRUCTS"):])
    missing = [n for n in listed if n not in STRUCTS]
    res.check("layout: every struct of CL_API_STRUCTS is mirrored here", not missing,
              listed=len(listed), missing=missing or "none")
    # the fields by name, in order: a field added where padding was (an int
    # after an int before a double) moves no size and no offset
    fields = header_fields(hdr)
    differ = {n: {"C": fields.get(n), "ctypes": [f[0] for f in st._fields_]}
              for n, st in STRUCTS.items() if fields.get(n) != [f[0] for f in st._fields_]}
    res.check("layout: the fields of %d structs, by name and order, as the header declares" %
              len(STRUCTS), not differ, differ=differ or "none")
    lines = []
    for sname, st in STRUCTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (sname, sname))
        for f in st._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (sname, f[0], sname,
                                                                           f[0]))
    src = ("#include <stdio.h>\n#include <stddef.h>\n#include \"convlstm.h\"\n"
           "int main(void) {\n%s\nreturn 0;\n}\n"
           % "\n".join(lines))
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "l.c"), "w") as f:
            f.write(src)
        exe = os.path.join(d, "l")
        r = subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "inst", "include"),
                            os.path.join(d, "l.c"), "-o", exe], capture_output=True, text=True)
        if r.returncode != 0:
            res.check("layout: compile", False, error=r.stderr[-500:])
            return
        out = subprocess.run([exe], capture_output=True, text=True).stdout.split("\n")
    bad = []
    n = 0
    for line in out:
        if not line:
            continue
        sname, field, val = line.split()
        st = STRUCTS[sname]
        got = C.sizeof(st) if field == "sizeof" else getattr(st, field).offset
        n += 1
        if got != int(val):
            bad.append("%s.%s: C %s, ctypes %d" % (sname, field, val, got))
    res.check("layout: %d sizes and offsets of %d structs match the C compiler's" %
              (n, len(STRUCTS)), not bad, mismatches=bad or "none")


# ---- the runtime line ----------------------------------------------------------

def primary_context_active(ordinal):
    """True/False: the driver's word (cuDevicePrimaryCtxGetState) on whether
    the device's primary context exists now; None when it cannot be asked."""
    try:
        cu = C.CDLL("libcuda.so.1")
        dev, flags, active = C.c_int(), C.c_uint(), C.c_int()
        if cu.cuInit(0) != 0 or cu.cuDeviceGet(C.byref(dev), ordinal) != 0 or \
                cu.cuDevicePrimaryCtxGetState(dev, C.byref(flags), C.byref(active)) != 0:
            return None
        return bool(active.value)
    except OSError:
        return None


def runtime_line(a, lib):
    """The backend's runtime bytes (cl_plan.runtime, memory_estimate()'s
    `runtime` line): what the process holds on the device outside every
    model (CUDA context, cuDNN handle, stream, loaded kernels), measured by
    the library once, at its first backend's creation; 0 on the CPU.
    Whether the device's primary context existed already (PyTorch's, made
    before) is recorded, as the driver says: the context is shared, and one
    made before is not in the figure."""
    out = {"context_before": primary_context_active(torch.cuda.current_device())
           if a.torch_dev.type == "cuda" else None}
    m = Ours(lib, 1, [1], [1], a.cl_device, CL_F32)
    try:
        out["runtime"] = m.plan(1, 1, 4, 4, True, adam())["runtime"]
        mm = m.measured()
        out.update(measured_runtime=mm["runtime"], have_device=mm["have_device"],
                   why=mm["why"], backend=m.L.cl_model_backend_name(m.m).decode())
    finally:
        m.free()
    return out


# ---- the table ---------------------------------------------------------------

def summarize(res):
    recs = [r for r in res.doc["records"] if r["mode"] == "bench" and "mean_ms" in r]
    by = {(r["config"], r["dtype"], r.get("math", ""), r["impl"]): r for r in recs}
    rows = []
    # "ours x faster": their mean step time / ours; "ours/their peak": our
    # peak_allocated / theirs (max_memory_allocated), at the same batch;
    # "data x": their time / ours with the data on the device (convlstm_data)
    # "math": float32's convolutions at both sides' defaults (ours and
    # PyTorch's TF32) or both strict; "TFLOP/s" the convolutions' useful
    # work (step_flops) over the mean step, "%peak" of the device's dense
    # peak for that arithmetic (fp32, tf32 or fp16 tensor cores)
    print("\n%-9s %-8s %-7s %-14s %9s %9s %8s %11s %9s %9s %7s %8s %6s  %s" % (
        "config", "dtype", "math", "impl", "mean ms", "median", "pack ms", "peak MiB", "ours x",
        "ours/peak", "data x", "TFLOP/s", "%peak", "target"))
    for (cfgn, dt, mth, impl), r in sorted(by.items()):
        ours = by.get((cfgn, dt, mth, "convlstm"))
        ours_data = by.get((cfgn, dt, mth, "convlstm_data"))
        speed = ratio = speed_data = None
        target = ""
        if ours_data and impl.startswith("torch"):
            speed_data = r["mean_ms"] / ours_data["mean_ms"]
        if ours and impl.startswith("torch"):
            speed = r["mean_ms"] / ours["mean_ms"]
            if r.get("peak_allocated") and ours.get("peak_allocated"):
                ratio = ours["peak_allocated"] / r["peak_allocated"]
            if dt == "float32" and mth == "default":  # the targets: both sides' defaults
                t = TARGETS["speedup_eager_f32" if impl == "torch_eager" else
                            "speedup_compile_f32"]
                target = ">=%.1fx %s; peak <=%.1f %s" % (
                    t, "ok" if speed >= t else "MISS", TARGETS["peak_ratio_max"],
                    "-" if ratio is None else "ok" if ratio <= TARGETS["peak_ratio_max"]
                    else "MISS")
        if impl == "convlstm" and dt == "float16" and cfgn == "mnist64":
            f32 = by.get((cfgn, "float32", "default", "convlstm"))
            if f32:
                s = f32["mean_ms"] / r["mean_ms"]
                t = TARGETS["f16_over_f32_mnist64"]
                target = "f16 %.2fx our f32 (>=%.1fx %s)" % (s, t, "ok" if s >= t else "MISS")
        tf, frac = tflops(r)
        row = dict(config=cfgn, dtype=dt, math=mth, impl=impl, mean_ms=r["mean_ms"],
                   median_ms=r["median_ms"], peak_allocated=r.get("peak_allocated"),
                   ours_faster=speed, ours_peak_ratio=ratio, ours_data_faster=speed_data,
                   tflops=tf, peak_fraction=frac, peak_kind=r.get("peak_kind"), target=target)
        rows.append(row)
        print("%-9s %-8s %-7s %-14s %9.3f %9.3f %8s %11s %9s %9s %7s %8s %6s  %s" % (
            cfgn, dt, mth, impl, r["mean_ms"], r["median_ms"],
            "%.2f" % r["pack_ms"] if r.get("pack_ms") is not None else "",
            mib(r.get("peak_allocated")), "" if speed is None else "%.2f" % speed,
            "" if ratio is None else "%.2f" % ratio,
            "" if speed_data is None else "%.2f" % speed_data,
            "" if tf is None else "%.3g" % tf, "" if frac is None else "%.1f" % (100 * frac),
            target))
    errs = [r for r in res.doc["records"] if r.get("error")]
    for r in errs:
        print("note: %s %s %s %s: %s" % (r["mode"], r["config"], r["dtype"], r["impl"],
                                         r["error"][:300]))
    mb = [r for r in res.doc["records"] if r["mode"] == "max_batch"]
    if mb:
        print("\nlargest batch that fits:")
        for r in mb:
            print("  %-9s %-8s %-12s %s%s" % (
                r["config"], r["dtype"], r["impl"], r.get("max_batch"),
                " (planned %s)" % r["max_batch_planned"] if "max_batch_planned" in r else ""))
    ab = [r for r in res.doc["records"] if r["mode"] == "ab" and "speedup" in r]
    if ab:
        print("\nA/B, each switch against the default (speed-up: default's time / switched; "
              "median of %d alternating rounds):" % AB_ROUNDS)
        for r in ab:
            print("  %-18s %-9s %-8s %-7s %9.3f ms %9.3f ms %6.2fx  losses %s" % (
                r["switch"], r["config"], r["dtype"], r["math"], r["base_ms"], r["switch_ms"],
                r["speedup"], "equal" if r["same_loss"] else "differ"))
    rt = res.doc.get("runtime")
    if rt:
        print("\nruntime (%s backend, outside every model: CUDA context, cuDNN handle, "
              "stream, kernels; 0 on the CPU): %d bytes = %s MiB%s" % (
                  rt["backend"], rt["runtime"], mib(rt["runtime"]),
                  {True: " (the CUDA context existed before, PyTorch's: not in this figure)",
                   False: " (the CUDA context included: none existed before)",
                   None: ""}[rt["context_before"]]))
    fails = [c for c in res.doc["checks"] if not c["ok"]]
    print("\nchecks: %d, failed %d" % (len(res.doc["checks"]), len(fails)))
    res.doc["summary"] = rows
    res.save()
    return fails


# ---- main ----------------------------------------------------------------------

def layout_only(a):
    """--layout alone: the ctypes mirror against the C compiler, with no
    torch, no GPU and no library loaded (CI: make harness-check)."""
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
            "python": sys.version.split()[0], "mode": "layout"}
    res = Results(a.outdir, meta)
    check_layout(res)
    bad = [c["name"] for c in res.doc["checks"] if not c["ok"]]
    print("layout: %d checks, %d failed; results: %s" % (
        len(res.doc["checks"]), len(bad), os.path.join(a.outdir, "results.json")))
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libconvlstm.so"))
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--max-batch", action="store_true")
    ap.add_argument("--checks", action="store_true")
    ap.add_argument("--layout", action="store_true")
    ap.add_argument("--ab", action="store_true",
                    help="each backend switch (AB_SWITCHES) timed against the default")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="every mode at tiny sizes on the CPU (no GPU needed)")
    ap.add_argument("--configs", default="tutorial,video64,mnist64,paper")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--check-dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune")
    ap.add_argument("--math", default="default,strict",
                    help="float32 convolution arithmetic to bench, in order: 'default' (both "
                         "sides' defaults: TF32 convolutions) and/or 'strict' (both float32)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="time cuDNN algorithms on both sides (torch.backends.cudnn.benchmark, "
                         "CONVLSTM_CUDNN_BENCHMARK=1)")
    ap.add_argument("--margin-mb", type=int, default=512,
                    help="device memory left free when planning our largest batch")
    ap.add_argument("--max-batch-seconds", type=float, default=45.0,
                    help="time for each PyTorch largest-batch search")
    ap.add_argument("--time-budget", type=float, default=1e9,
                    help="seconds for the whole run: no measurement starts that would not "
                         "end in time (it is recorded as skipped)")
    a = ap.parse_args(argv)
    if not (a.bench or a.max_batch or a.checks or a.layout or a.ab):
        a.bench = True
    if a.cpu_smoke:
        a.bench = a.max_batch = a.checks = a.layout = a.ab = True
        a.steps, a.warmup = min(a.steps, 3), 1
    a.configs = [c for c in a.configs.split(",") if c]
    a.dtypes = [d for d in a.dtypes.split(",") if d]
    a.check_dtypes = [d for d in a.check_dtypes.split(",") if d]
    a.maths = [m for m in a.math.split(",") if m]
    if not a.maths or any(m not in MATHS for m in a.maths):
        ap.error("--math: a comma list of %s, not %r" % (", ".join(MATHS), a.math))
    a.cfg = TINY if a.cpu_smoke else CONFIGS
    a.deadline = time.monotonic() + a.time_budget
    if a.layout and not (a.bench or a.max_batch or a.checks or a.ab):
        return layout_only(a)
    load_torch()

    # knobs read by our backend when a model is created
    os.environ["CONVLSTM_CUDNN_BENCHMARK"] = "1" if a.cudnn_benchmark else "0"
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    set_math(a, a.maths[0])

    lib = Lib(a.lib)
    # --layout alone needs only a C compiler: it runs anywhere
    gpu = not a.cpu_smoke and (a.bench or a.max_batch or a.checks or a.ab)
    if gpu and not (torch.cuda.is_available() and lib.L.cl_device_available(CL_DEVICE_CUDA)):
        print("no usable GPU for both sides: torch.cuda %s, convlstm cuda %s %s" % (
            torch.cuda.is_available(), lib.L.cl_device_available(CL_DEVICE_CUDA),
            lib.cuda_info()), file=sys.stderr)
        return 2
    a.cl_device = CL_DEVICE_CUDA if gpu else CL_DEVICE_CPU
    a.torch_dev = torch.device("cuda" if gpu else "cpu")
    a.memory_limit = 0 if gpu else 24 * 2**20  # the CPU: plan against a limit instead
    a.device_name = torch.cuda.get_device_name() if gpu else None
    if not gpu:
        a.margin_mb = 0
    if not gpu:
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
            "python": sys.version.split()[0], "torch": torch.__version__,
            "torch_cudnn": torch.backends.cudnn.version() if gpu else None,
            "device": torch.cuda.get_device_name() if gpu else platform.processor() or "cpu",
            "lib": lib.path, "convlstm_cuda": lib.cuda_info(), "args": {
                k: v for k, v in vars(a).items() if k not in ("cfg", "torch_dev")},
            "configs": {n: a.cfg[n] for n in a.configs}, "maths": a.maths,
            "cudnn_benchmark": a.cudnn_benchmark,
            "git": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()}
    print("convlstm GPU bench: %s | torch %s | %s" % (meta["device"], torch.__version__,
                                                     meta["convlstm_cuda"]), flush=True)
    res = Results(a.outdir, meta)
    if a.checks or a.bench or a.max_batch or a.ab:
        res.doc["runtime"] = runtime_line(a, lib)
    if a.layout:
        check_layout(res)
    if a.cpu_smoke:  # the search itself, on a predicate with a known answer
        n, exact = largest(lambda b: b <= 1234, 100, time.monotonic() + 5)
        res.check("largest(): doubling + bisection finds 1234", n == 1234 and exact, got=n)
    if a.checks:
        run_checks(a, lib, res)
    if a.bench:
        run_bench(a, lib, res)
    if a.max_batch:
        run_max_batch(a, lib, res)
    if a.ab:
        run_ab(a, lib, res)
    fails = summarize(res)
    alive = lib.L.cl_models_alive()
    if alive:
        res.check("every model freed", False, alive=alive)
        fails.append(alive)
    data_alive = lib.L.cl_data_alive()
    if data_alive:
        res.check("every data set freed", False, alive=data_alive)
        fails.append(data_alive)
    print("results: %s" % os.path.join(a.outdir, "results.json"))
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--hwm-probe":  # check_measured_cpu's child
        load_torch()
        sys.exit(hwm_probe(sys.argv[2]))
    sys.exit(main())
