"""Datalog text to a ``syntax.Program``, with lark (LALR). Every syntax error becomes a ``DatalogError``
that locates it (see ``errors.py``)."""
from __future__ import annotations

import itertools
import re

from lark import Lark, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from ..engine.columns import text_problem
from ..engine.errors import ArgumentTypeError
from .errors import datalog_error
from .syntax import Aggregate, Atom, BinOp, Comparison, Const, Decl, Program, Rule, Span, Var

GRAMMAR = r"""
start: _statement*
_statement: decl | rule

decl: ".decl" NAME "(" [coldecl ("," coldecl)*] ")" "."?
coldecl: NAME ":" NAME

rule: head "."                              -> fact
    | head (":-" | "<-") literal ("," literal)* "."

head: NAME "(" [harg ("," harg)*] ")"
?harg: AGG | expr

?literal: atom
        | ("!" | "not") atom                -> negation
        | expr COMPOP expr                  -> comparison

atom: NAME "(" [expr ("," expr)*] ")"

goal: NAME "(" [garg ("," garg)*] ")" "."?
?garg: "?"                                  -> ask
     | expr

?expr: term | expr ADDOP term               -> binop
?term: factor | term MULOP factor           -> binop
?factor: NUMBER                             -> number
       | STRING                             -> string
       | NAME                               -> var
       | "_"                                -> anon
       | "-" factor                         -> neg
       | "(" expr ")"

AGG.3: /(min|max|count|sum|avg|countd)\s*<\s*[A-Za-z_][A-Za-z0-9_]*\s*>/
COMPOP: "!=" | "<=" | ">=" | "==" | "=" | "<" | ">"
ADDOP: "+" | "-"
MULOP: "*" | "/" | "%"
NAME: /(?!not\b)[A-Za-z][A-Za-z0-9_]*/ | /_[A-Za-z0-9_]+/
NUMBER: /\d+(\.\d+)?([eE][+-]?\d+)?/ | /\.\d+([eE][+-]?\d+)?/
STRING: /"([^"\\\n]|\\.)*"/ | /'([^'\\\n]|\\.)*'/
COMMENT: /\/\/[^\n]*/ | /#[^\n]*/ | /\/\*(.|\n)*?\*\//

%import common.WS
%ignore WS
%ignore COMMENT
"""

_PARSER = None


def _parser() -> Lark:
    global _PARSER
    if _PARSER is None:
        _PARSER = Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=True,
                       start=["start", "goal"])
    return _PARSER


def _span(meta_or_tok) -> Span:
    m = meta_or_tok
    return Span(m.line, m.column, m.end_line, m.end_column)


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_HEX = re.compile(r"[0-9a-fA-F]*")


class _TruncatedEscape(Exception):
    """A \\u or \\x escape without its 4 or 2 hex digits (``args[0]``: the escape as written)."""


def _unescape(m) -> str:
    """A backslash escape in a string constant: \\n \\t \\r \\0, \\xHH, \\uHHHH; any other escaped
    character stands for itself (\\" \\' \\\\). Other characters, non-ASCII ones included, are taken
    as written. A \\u or \\x without all its hex digits (\\u12, \\x, \\x4g) is an error, not the
    letters: the text meant a character it does not say."""
    e = m.group(1)
    if len(e) > 1:
        return chr(int(e[1:], 16))
    if e in ("u", "x"):
        digits = _HEX.match(m.string, m.end()).group()[:4 if e == "u" else 2]
        raise _TruncatedEscape("\\" + e + digits)
    return _ESCAPES.get(e, e)


ASK = "?"  # a goal argument to ask (Goal.args hold it, "_" and constants)
INT64 = (-(1 << 63), (1 << 63) - 1)


@v_args(meta=True)
class _ToSyntax(Transformer):
    def __init__(self, text: str):
        super().__init__()
        self.text = text
        self._fresh = itertools.count(1)
        self._unsigned = {}  # id -> token of each 2**63 literal not (yet) negated: only -2**63 is int64

    def _check_unsigned(self):
        """An integer literal outside int64 that no unary minus took back into it (the literals wait
        here until their statement ends: -9223372036854775808 is int64, and -9223372036854775809 is
        named with its sign)."""
        for tok in self._unsigned.values():
            raise self._out_of_int64(str(tok), int(str(tok)), tok.line, tok.column, _span(tok))

    def _out_of_int64(self, written: str, value: int, line: int, column: int, span):
        written = " ".join(written.split())  # (one line, for the message's first line)
        shown = str(value) if written.replace(" ", "") == str(value) else f"{written} (= {value})"
        return datalog_error(self.text, line, column, f"the integer {shown} is outside int64 (-2**63 to "
                             f"2**63 - 1); write it as a float ({value}.0) if that is meant", span)

    def start(self, meta, items):
        self._check_unsigned()
        return [i for i in items if i is not None]

    def decl(self, meta, items):
        name, *cols = items
        return Decl(str(name), tuple(c for c in cols if c is not None), _span(meta))

    def coldecl(self, meta, items):
        name, typ = items
        return (str(name), str(typ), _span(typ))

    def fact(self, meta, items):
        self._check_unsigned()
        return Rule(items[0], (), _span(meta))

    def rule(self, meta, items):
        self._check_unsigned()
        return Rule(items[0], tuple(items[1:]), _span(meta))

    def head(self, meta, items):
        name, *args = items
        args = tuple(self._agg(a) if hasattr(a, "type") and a.type == "AGG" else a for a in args if a is not None)
        return Atom(str(name), args, False, _span(meta))

    def _agg(self, tok):
        func, var = str(tok).split("<", 1)
        var = var.rstrip(">").strip()
        if var == "_":  # (anonymous, as elsewhere: the analysis says an aggregate needs a named variable)
            var = f"_#{next(self._fresh)}"
        return Aggregate(func.strip(), Var(var, _span(tok)), _span(tok))

    def atom(self, meta, items):
        name, *args = items
        return Atom(str(name), tuple(a for a in args if a is not None), False, _span(meta))

    def negation(self, meta, items):
        a = items[-1]
        return Atom(a.pred, a.args, True, _span(meta))

    def comparison(self, meta, items):
        left, op, right = items
        return Comparison("=" if str(op) == "==" else str(op), left, right, _span(meta))

    def binop(self, meta, items):
        left, op, right = items
        return BinOp(str(op), left, right, _span(meta))

    def number(self, meta, items):
        text = str(items[0])
        value = int(text) if text.isdigit() else float(text)
        if value in (float("inf"), float("-inf")):  # 1e400: the literal is past float64's range
            tok = items[0]
            raise datalog_error(self.text, tok.line, tok.column, f"the float constant {text} is beyond the "
                                f"largest float64 (about 1.8e308)", _span(tok))
        const = Const(value, _span(items[0]))
        if isinstance(value, int) and value > INT64[1]:  # (a unary minus may take it back: see neg)
            self._unsigned[id(const)] = items[0]
        return const

    def string(self, meta, items):
        tok = items[0]
        try:
            value = _ESCAPE.sub(_unescape, str(tok)[1:-1])
        except _TruncatedEscape as bad:
            raise datalog_error(self.text, tok.line, tok.column, f"the escape {bad.args[0]} in the string "
                                f"constant is incomplete: \\u takes 4 hex digits (\\uHHHH), \\x takes 2 "
                                f"(\\xHH); write \\\\ for a backslash", _span(tok)) from None
        if not value.isascii():  # \uD83D\uDE00, a surrogate pair written as two escapes, is one character
            value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        problem = text_problem(value)
        if problem is not None:  # (a \uD800 escape: no column, file or Spark could hold the string)
            raise datalog_error(self.text, tok.line, tok.column, f"the string constant is {problem}", _span(tok))
        return Const(value, _span(tok))

    def var(self, meta, items):
        return Var(str(items[0]), _span(items[0]))

    def anon(self, meta, items):
        return Var(f"_#{next(self._fresh)}", _span(meta))

    def neg(self, meta, items):
        x = items[0]
        if isinstance(x, Const) and not isinstance(x.value, str):
            self._unsigned.pop(id(x), None)
            value = -x.value
            if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:  # -9223372036854775809, and
                # --9223372036854775808 (folded, it is 2**63: checked as any literal, not wrapped)
                written = self.text[meta.start_pos:meta.end_pos]
                raise self._out_of_int64(written, value, meta.line, meta.column, _span(meta))
            return Const(value, _span(meta))
        return BinOp("-", Const(0, _span(meta)), x, _span(meta), unary=True)

    def ask(self, meta, items):
        return ASK

    def goal(self, meta, items):
        self._check_unsigned()
        name, *args = items
        return str(name), tuple(a for a in args if a is not None), _span(meta)


def _expected(err: UnexpectedInput) -> str:
    names = {"NAME": "a name", "NUMBER": "a number", "STRING": "a string", "LPAR": "'('", "RPAR": "')'",
             "COMMA": "','", "DOT": "'.'", "COMPOP": "a comparison", "AGG": "an aggregate", "__ANON_0": "':-'",
             "IF": "':-'", "COLON": "':'", "ADDOP": "'+' or '-'", "MULOP": "'*', '/' or '%'",
             "MINUS": "'-'", "UNDERSCORE": "'_'", "BANG": "'!'", "NOT": "'not'"}
    exp = sorted({names.get(t) or _literal(t) for t in getattr(err, "expected", ()) or ()})
    return ", ".join(exp[:6]) if exp else ""


def _literal(terminal: str) -> str:
    """How a terminal without a friendly name is written (lark names anonymous ones __ANON_n)."""
    try:
        pattern = _parser().get_terminal(terminal).pattern
    except KeyError:
        return repr(terminal)
    return repr(pattern.value) if pattern.type == "str" else terminal.lower()


def _unfinished(text: str, start: str = "start"):
    """The error for a program (or goal) that ends inside a statement, placed just after its last token
    (comments after it are not where the statement was left unfinished)."""
    line, col = 1, 1
    try:
        for tok in _parser().lex(text):
            line, col = tok.end_line, tok.end_column
    except UnexpectedInput:  # (the parse got past every token, so lexing does not fail; but be safe)
        lines = text.rstrip().splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
    if start == "goal":
        return datalog_error(text, line, col, "the goal ends before it is complete: a goal is a relation and "
                                              "its arguments in parentheses, such as tc(?, _)")
    return datalog_error(text, line, col, "the program ends in the middle of a statement (a rule ends with '.')")


def _unclosed(text: str, pos: int, line: int, column: int):
    """The error for a string constant or a /* comment that the text does not close, at ``pos`` (where it
    opens), or None when no such thing opens there."""
    if text.startswith("/*", pos):
        return datalog_error(text, line, column, "this /* comment is not closed: end it with */", None)
    if pos < len(text) and text[pos] in "\"'":
        q = text[pos]
        return datalog_error(text, line, column, f"this string constant is not closed: end it with {q} on the "
                                                 f"same line (write \\{q} for a {q} inside it)")
    return None


def parse(text: str) -> Program:
    """The program in ``text``; raises DatalogError (line, column, caret) on a syntax error."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"a Datalog program is text, not {type(text).__name__}")
    items = _transform(text, "start")
    rules = tuple(i for i in items if isinstance(i, Rule))
    decls = tuple(i for i in items if isinstance(i, Decl))
    return Program(rules, decls, text)


def parse_goal(text: str) -> tuple:
    """(predicate, arguments, span) of a goal such as ``tc(?, _)``: each argument ASK, a Var (``_`` or a
    name) or a Const, with the program's constants and escapes; DatalogError (located in ``text``) on a
    syntax error."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"a goal is text such as 'tc(?, _)', not {type(text).__name__}")
    return _transform(text, "goal")


def _transform(text: str, start: str):
    try:
        tree = _parser().parse(text, start=start)
        return _ToSyntax(text).transform(tree)
    except UnexpectedEOF:
        raise _unfinished(text, start) from None
    except UnexpectedCharacters as err:
        unclosed = _unclosed(text, err.pos_in_stream, err.line, err.column)
        if unclosed is not None:
            raise unclosed from None
        raise datalog_error(text, err.line, err.column, f"unexpected character {text[err.pos_in_stream]!r}"
                            ) from None
    except UnexpectedToken as err:
        tok = err.token
        if tok.type == "$END":
            raise _unfinished(text, start) from None
        if str(tok) == "/" and text.startswith("/*", tok.start_pos):  # (a closed one is a comment, ignored)
            raise _unclosed(text, tok.start_pos, tok.line, tok.column) from None
        if str(tok) == "*" and tok.start_pos > 0 and text[tok.start_pos - 1] == "/":  # ("x /* ...": '/' read
            # as a division, as "/ *" never is)
            raise _unclosed(text, tok.start_pos - 1, tok.line, tok.column - 1) from None
        exp = _expected(err)
        raise datalog_error(text, tok.line, tok.column, f"unexpected {str(tok)!r}" +
                            (f"; expected {exp}" if exp else "")) from None
    except VisitError as err:
        if isinstance(err.orig_exc, RecursionError):
            raise _too_deep(text) from None
        raise err.orig_exc from None
    except RecursionError:
        raise _too_deep(text) from None


def _too_deep(text: str):
    """The parser's (recursive) limit, located at the line with the most operators, the likely culprit."""
    lines = text.splitlines() or [""]
    worst = max(range(len(lines)), key=lambda i: sum(lines[i].count(c) for c in "+-*/%("))
    return datalog_error(text, worst + 1, 1, "an expression nested too deeply to parse (hundreds of operators "
                                             "in a row): split it into several assignments")
