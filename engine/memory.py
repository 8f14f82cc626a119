"""Allocator tuning. Kernels allocate fresh output arrays on every call; with glibc's defaults every
allocation over 128 KiB is a new mmap whose pages fault in on first touch, which costs more than the
kernel itself (measured: unpacking 100,000 sort keys 0.30 ms -> 0.04 ms). Raising the mmap and trim
thresholds lets freed memory be reused from the heap.

NumPy asks for transparent huge pages on every array of 4 MiB or more (``madvise``). Where the kernel
compacts memory to find a huge page at the fault itself (THP ``defrag`` set to ``always``, ``madvise`` or
``defer+madvise``), each first touch of such an array can stall: a cold WCC on 100,000 nodes / 1,000,000
edges took 1.08-1.47 s of CPU with huge pages against 0.87-0.94 s without (5 runs each, fresh processes;
memory already reused was not slower without them). So where faults compact, NumPy's hint is turned off.
Set KPGNB_MALLOPT=0 to leave the allocator and NumPy's hint alone."""
import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
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
    if faults_compact():
        _numpy_hugepages(False)
    _done = bool(ok)
    return _done


def faults_compact(path: str = THP_DEFRAG) -> bool:
    """Whether a fault in memory advised for huge pages compacts memory before it returns (the selected
    ``[mode]`` of the kernel's THP defrag setting)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return False
    mode = text[text.find("[") + 1:text.find("]")] if "[" in text else ""
    return mode in ("always", "madvise", "defer+madvise")


def _numpy_hugepages(enabled: bool) -> None:
    from numpy._core import multiarray
    multiarray._set_madvise_hugepage(enabled)
