"""Reading a view back for comparison with an oracle (shared by the memory-mode and graph attacks)."""


def read(view, cols, at=None):
    """The view's rows (columns ``cols``) as a sorted list of tuples, as of epoch ``at``."""
    df = view.to_pandas(at=at)
    return sorted(tuple(r) for r in df[cols].itertuples(index=False, name=None))


def close_enough(a, b, tol=1e-9):
    """Row lists equal, floats within tol (relative): sums in another order differ in the last bits."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            if isinstance(p, float) or isinstance(q, float):
                if not abs(p - q) <= tol * max(1.0, abs(p), abs(q)):
                    return False
            elif p != q:
                return False
    return True
