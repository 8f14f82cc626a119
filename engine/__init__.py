"""kpgnb.engine: the differential dataflow engine (arrangements, operators, runtime).

Imports only numpy, numba and the standard library (DESIGN.md section 1).
"""
from .memory import tune_allocator

tune_allocator()
