"""Datalog on the engine: programs compile to ordinary collections (arranged, shared, maintained).

``eng.datalog(text, inputs=, name=)`` parses (``parser``), checks (``analysis``) and compiles
(``compiler``) a program into one dataflow (``program``); ``prog.goal(...)`` rewrites it with magic sets
(``magic``)."""
from .program import Goal, Program, install
from .parser import parse

__all__ = ["Goal", "Program", "install", "parse"]
