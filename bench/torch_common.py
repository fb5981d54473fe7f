"""bench/torch_common.py -- what PyTorch's side of the CPU benches shares: the
one reference ConvLSTM and encoder-forecaster (inst/python/torch_convlstm.py) and the process's
memory as Linux reports it in /proc/self/status. Imported by bench_torch.py
and bench_memory_cpu.py (a script's own folder is on Python's path).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inst", "python"))
from torch_convlstm import ConvLSTM, EncoderForecaster  # noqa: E402

__all__ = ["ConvLSTM", "EncoderForecaster", "status_bytes", "reset_hwm"]


def status_bytes(key):
    """A /proc/self/status field in kB (VmRSS, VmHWM, ...), as bytes; 0 when absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    """Reset VmHWM to the current RSS (writing 5 to clear_refs, Linux >= 4.0);
    False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5\n")
        return True
    except OSError:
        return False
