"""Session 52: defects found outside the attack rounds, each with the test that failed before its fix."""
import pandas as pd
import pytest

import kpgnb as kp


def test_datalog_float_literal_beyond_float64_is_an_error_at_its_column():
    with kp.Engine() as eng:
        with pytest.raises(kp.DatalogError, match="beyond the largest float64") as err:
            eng.datalog("p(x) :- e(x), x < 1e400.", inputs={"e": pd.DataFrame({"a": [1.0]})})
        assert (err.value.line, err.value.column) == (1, 19)
        prog = eng.datalog("p(x) :- e(x), x < 1.5e300.", inputs={"e": pd.DataFrame({"a": [1.0, 2.0]})})
        eng.wait(prog["p"], timeout=60)
        assert sorted(prog["p"].to_pandas()["x"]) == [1.0, 2.0]
