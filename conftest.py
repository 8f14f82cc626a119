"""Shared by the test suite and the tutorials nbval runs: no progress lines from waits that happen to be
slow on a busy machine (their output would differ from the stored one; tests/test_magics.py turns them
back on where it checks them), and the benchmark notebook on the committed --quick results."""
import os

os.environ.setdefault("KPGNB_PROGRESS", "0")
os.environ.setdefault("KPGNB_BENCH", "quick")  # notebooks/04-benchmarks.ipynb plots the committed --quick results
