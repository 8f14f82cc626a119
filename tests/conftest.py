"""Shared fixtures. ``spark``: one local[2] SparkSession on loopback for the whole test session (started on
first use, stopped at the end). Before the first test, every kernel family is compiled (or loaded from the
cache): on a fresh machine that takes a minute, and it must not count against the first test's waits,
whose timeouts bound the engine's work, not numba's."""
import os
import shutil

import pytest


@pytest.fixture(scope="session", autouse=True)
def _kernels_compiled():
    from kpgnb.engine.warmup import warm_kernels
    warm_kernels()


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime")
    import kpgnb.spark
    session = kpgnb.spark.session(app="kpgnb-tests", cores=2, partitions=2)
    yield session
    session.stop()
