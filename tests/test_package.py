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
