"""Packaging: the distribution layout (engine/ as kpgnb.engine, widgets/ as kpgnb.widgets) imports both
from an editable install and from a built wheel, and ``import kpgnb`` stays cheap."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code, cwd, env=None):
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_import_is_cheap(tmp_path):
    r = run("import sys, kpgnb; print(sorted(m for m in ('numba', 'pyspark', 'pandas') if m in sys.modules))",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_subpackages_import(tmp_path):
    r = run("import kpgnb.engine.runtime, kpgnb.widgets, kpgnb.graphs; print(kpgnb.engine.__file__)", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.path.join("engine", "__init__.py") in r.stdout


def test_wheel_installs_and_imports(tmp_path):
    wheels = tmp_path / "wheels"
    site = tmp_path / "site"
    b = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(wheels), ROOT], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stderr
    whl = next(wheels.glob("kpgnb-*.whl"))
    i = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(whl)],
                       capture_output=True, text=True, timeout=600)
    assert i.returncode == 0, i.stderr
    env = dict(os.environ, PYTHONPATH=str(site))
    code = ("import kpgnb, kpgnb.engine.runtime as rt, kpgnb.widgets; "
            "print(rt.__file__); eng = kpgnb.Engine(workers=1); eng.close()")
    r = run(code, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(site))


def test_huge_page_hint_follows_the_kernels_defrag_mode(tmp_path):
    """NumPy's huge-page hint is off after the import exactly where a huge-page fault compacts memory,
    and KPGNB_MALLOPT=0 leaves it as NumPy set it."""
    from kpgnb.engine.memory import faults_compact
    for mode, compacts in [("always", True), ("madvise", True), ("defer+madvise", True), ("defer", False),
                           ("never", False)]:
        f = tmp_path / mode
        f.write_text(" ".join(f"[{m}]" if m == mode else m
                              for m in ("always", "defer", "defer+madvise", "madvise", "never")) + "\n")
        assert faults_compact(str(f)) is compacts, mode
    assert faults_compact(str(tmp_path / "missing")) is False
    probe = ("import kpgnb.engine; from numpy._core import multiarray as m; "
             "from kpgnb.engine.memory import faults_compact; print(m._get_madvise_hugepage(), faults_compact())")
    hint, compacts = run(probe, cwd=tmp_path).stdout.split()
    if sys.platform.startswith("linux"):
        assert hint == str(compacts != "True")
    kept = run(probe, cwd=tmp_path, env={**os.environ, "KPGNB_MALLOPT": "0"}).stdout.split()
    assert kept[0] == "True"
