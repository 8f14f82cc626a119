"""The Datalog program as typed values: what the parser produces and every later pass reads.

Each node keeps its ``Span`` (line and column in the program text, 1-based) so an error found by any
pass can point at the text it concerns."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Var:
    """A variable. Each ``_`` in the text becomes a fresh variable ``_#1``, ``_#2``... (never shared);
    an expression argument of an atom becomes a fresh *named* variable ``_ε1``... (analysis.py), which
    the atom binds like any other. Both are hidden from a rule's bindings (``hidden``)."""
    name: str
    span: Span = field(compare=False, default=None)

    @property
    def anonymous(self) -> bool:
        return self.name.startswith("_#")


EXPR_VAR = "_ε"  # prefix of expression variables: no name the grammar accepts (names are ASCII), yet an
#                  identifier, since the compiler names a column after every bound variable


def hidden(name: str) -> bool:
    """Whether a variable is one the text did not name (``_``, or an atom's expression argument)."""
    return name.startswith("_#") or name.startswith(EXPR_VAR)


@dataclass(frozen=True)
class Const:
    """An int, float or string constant (or a bool: the language has none, but a goal's 0 or 1 of a bool
    column is rewritten into one, ``magic.rewrite``)."""
    value: object
    span: Span = field(compare=False, default=None)

    @property
    def type(self) -> str:
        v = self.value
        return ("str" if isinstance(v, str) else "float" if isinstance(v, float) else
                "bool" if isinstance(v, bool) else "int")


@dataclass(frozen=True)
class BinOp:
    """Arithmetic: op in + - * / %. A unary minus ``-x`` is ``0 - x`` with ``unary`` set (evaluated as the
    subtraction, shown and named in errors as written: ``-x``)."""
    op: str
    left: object
    right: object
    span: Span = field(compare=False, default=None)
    unary: bool = field(compare=False, default=False)


@dataclass(frozen=True)
class Aggregate:
    """``min<v>``, ``max<v>``, ``count<v>``, ``sum<v>``, ``avg<v>`` or ``countd<v>``, in a head argument."""
    func: str
    var: Var
    span: Span = field(compare=False, default=None)


@dataclass(frozen=True)
class Atom:
    """``pred(args)``; ``negated`` for ``!pred(...)`` / ``not pred(...)`` in a body."""
    pred: str
    args: tuple
    negated: bool = False
    span: Span = field(compare=False, default=None)

    @property
    def arity(self) -> int:
        return len(self.args)


@dataclass(frozen=True)
class Comparison:
    """``left op right`` with op in = != < <= > >=. ``x = expr`` with x bound by nothing else in the
    rule is an assignment (analysis decides)."""
    op: str
    left: object
    right: object
    span: Span = field(compare=False, default=None)


@dataclass(frozen=True)
class Rule:
    """``head :- body.``; a fact has an empty body."""
    head: Atom
    body: tuple
    span: Span = field(compare=False, default=None)

    @property
    def aggregates(self) -> list:
        return [(i, a) for i, a in enumerate(self.head.args) if isinstance(a, Aggregate)]


@dataclass(frozen=True)
class Decl:
    """``.decl pred(col: type, ...)`` with types int, float, str."""
    pred: str
    columns: tuple  # of (name, type)
    span: Span = field(compare=False, default=None)


@dataclass(frozen=True)
class Program:
    rules: tuple
    decls: tuple
    text: str = field(compare=False, default="")


def variables(term) -> list:
    """The variables of a term, expression, aggregate, atom or comparison, in order of appearance."""
    if isinstance(term, Var):
        return [term]
    if isinstance(term, Const):
        return []
    if isinstance(term, Aggregate):
        return [term.var]
    if isinstance(term, (BinOp, Comparison)):
        return variables(term.left) + variables(term.right)
    if isinstance(term, Atom):
        return [v for a in term.args for v in variables(a)]
    raise TypeError(f"not a Datalog term: {term!r}")


def show(term) -> str:
    """Datalog text for a node (used in error messages and magic-set program listings)."""
    if isinstance(term, Var):
        return "_" if term.anonymous else term.name
    if isinstance(term, Const):
        return repr(term.value) if isinstance(term.value, str) else str(term.value)
    if isinstance(term, BinOp):
        if term.unary:  # (an operand that is arithmetic shows its own parentheses: -(x + 1))
            return f"-{show(term.right)}"
        return f"({show(term.left)} {term.op} {show(term.right)})"
    if isinstance(term, Aggregate):
        return f"{term.func}<{show(term.var)}>"
    if isinstance(term, Atom):
        return ("!" if term.negated else "") + f"{term.pred}({', '.join(show(a) for a in term.args)})"
    if isinstance(term, Comparison):
        return f"{show(term.left)} {term.op} {show(term.right)}"
    if isinstance(term, Rule):
        head = show(term.head)
        return f"{head}." if not term.body else f"{head} :- {', '.join(show(b) for b in term.body)}."
    raise TypeError(f"not a Datalog term: {term!r}")
