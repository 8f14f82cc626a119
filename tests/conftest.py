"""Shared fixtures. ``spark``: one local[2] SparkSession on loopback for the whole test session (started on
first use, stopped at the end)."""
import os
import shutil

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime")
    import kpgnb.spark
    session = kpgnb.spark.session(app="kpgnb-tests", cores=2, partitions=2)
    yield session
    session.stop()
