"""Allocator tuning. Kernels allocate fresh output arrays on every call; with glibc's defaults every
allocation over 128 KiB is a new mmap whose pages fault in on first touch, which costs more than the
kernel itself (measured: unpacking 100,000 sort keys 0.30 ms -> 0.04 ms). Raising the mmap and trim
thresholds lets freed memory be reused from the heap. Set KPGNB_MALLOPT=0 to leave the allocator alone."""
import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
_done = False


def tune_allocator() -> bool:
    global _done
    if _done or os.environ.get("KPGNB_MALLOPT", "1") == "0" or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = (libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 256 << 20)
              and libc.mallopt(M_TOP_PAD, 64 << 20))
    except (OSError, AttributeError):
        ok = False
    _done = bool(ok)
    return _done
