"""Attack (session 50) on Datalog: a seeded generator of random stratified programs of its own (several
strata, negation of lower strata including recursive and aggregated ones, multi-aggregate heads
count/sum/min/max/avg/countd over lower strata, recursive min over float distances and string labels,
recursive max/min with two grouping columns, min/max through mutual recursion, mutual recursion of up to
three predicates, int/float/str constants, int+float arithmetic on both sides of comparisons) over small
inputs with insert/retract streams that also remove rows never inserted (negative multiplicities: such a
row is absent), checked every epoch against ``datalog_reference.evaluate`` at W = 1, 2, 3; the same
programs' ``follow()`` streams rebuilt epoch by epoch; goals with several bound positions and constants
against the full relation filtered; %%datalog cells over other programs' exports; goals after the
program's inputs are closed.

Bugs (``xfail(strict=True)``): closing an input does not move a goal's bindings input on, so the goal
keeps answering as of before the changes the close sealed; a goal made after its program's inputs closed
(at an epoch > 1) is never answered, also on a program over a closed program's export; a %%datalog cell
cannot read another program's export, and the refusal of a relation view points at df.use().

Probed and held (no test where earlier rounds cover it): -0.0/0.0 as one value in joins, groups, antijoins
and goal asks; int64 extremes in avg/sum; goal patterns with whitespace, comments, a trailing '.', string
constants '?', '_', 'a,b'; bool columns; .decl refusals; concurrent asks from threads; chains of 2,000
nodes with cuts; key= inputs under random programs."""
from __future__ import annotations

import random
from collections import Counter, defaultdict

import pandas as pd
import pytest

import kpgnb as kp
from datalog_reference import _py, diff_rows, evaluate, rows_of, same_rows
from notebook_shell import ip, ok, quiet, run, shell  # noqa: F401 - fixtures

WAIT_S = 60

# -- the generator ------------------------------------------------------------------------------------------

INPUTS = {"e": ("int", "int"), "w": ("int", "int", "float"), "u": ("int",), "s": ("str", "int")}
DTYPES = {"int": "int64", "float": "float64", "str": "str"}
FLOATS = [0.5, 1.5, -1.0, 2.25]


def value(rng, t):
    return rng.randrange(5) if t == "int" else rng.choice(FLOATS) if t == "float" else rng.choice("abc")


def const(rng, t):
    return str(rng.randrange(5)) if t == "int" else repr(rng.choice(FLOATS)) if t == "float" else \
        '"' + rng.choice("abc") + '"'


def program(seed: int) -> str:
    rng = random.Random(seed)
    types = dict(INPUTS)
    finite = set(INPUTS)        # relations whose ints stay in the domain (safe in recursion)
    lines = []
    n = [0]

    def fresh(p):
        n[0] += 1
        return f"{p}{n[0]}"

    def body(srcs, must=(), neg=(), rec=False):
        vt, lits, k = {}, [], 0
        atoms = list(must)
        while len(atoms) < rng.choice([1, 2, 2, 3]):
            atoms.append(rng.choice(srcs))
        rng.shuffle(atoms)
        for p in atoms:
            args = []
            for t in types[p]:
                r = rng.random()
                same = [v for v, tt in vt.items() if tt == t]
                if r < 0.08:
                    args.append(const(rng, t))
                elif r < 0.16:
                    args.append("_")
                elif same and r < 0.6:
                    args.append(rng.choice(same))
                else:
                    k += 1
                    v = f"{t[0]}{k}"
                    vt[v] = t
                    args.append(v)
            lits.append(f"{p}({', '.join(args)})")
        if not vt:
            p = rng.choice(srcs)
            vt["z0"] = types[p][0]
            lits.append(f"{p}(z0{', _' * (len(types[p]) - 1)})")
        nums = [v for v, t in vt.items() if t != "str"]
        if nums and rng.random() < 0.4:   # arithmetic on both sides, ints against floats
            a, b = rng.choice(nums), rng.choice(nums)
            lhs = rng.choice([f"{a} + {b}", f"{a} * 2", f"{a} - 1", a, f"{a} % 3"])
            rhs = rng.choice([f"{b} + 0.5", const(rng, "int"), const(rng, "float"), f"{b} * {b}", b])
            lits.append(f"{lhs} {rng.choice(['<', '<=', '>', '>=', '!=', '='])} {rhs}")
        elif rng.random() < 0.3:
            v = rng.choice(list(vt))
            lits.append(f"{v} != {const(rng, vt[v])}")
        if nums and not rec and rng.random() < 0.4:
            a, b = rng.choice(nums), rng.choice(nums)
            ex = rng.choice([f"{a} + {b}", f"{a} * 3 - {b}", f"{a} / 2", f"{a} % 2", f"{a} + 0.25"])
            vt["v"] = "float" if "0.25" in ex or "float" in (vt[a], vt[b]) else "int"
            lits.append(f"v = {ex}")
        if neg and rng.random() < 0.45:
            p = rng.choice(neg)
            args = []
            for t in types[p]:
                same = [v for v, tt in vt.items() if tt == t]
                r = rng.random()
                args.append(rng.choice(same) if same and r < 0.65 else const(rng, t) if r < 0.8 else "_")
            lits.append(f"!{p}({', '.join(args)})")
        return lits, vt

    def head(vt, ts=None):
        if ts is None:
            return [(v, vt[v]) for v in rng.sample(list(vt), min(len(vt), rng.choice([1, 2, 2, 3])))]
        out = []
        for t in ts:
            same = [v for v, tt in vt.items() if tt == t]
            if not same:
                return None
            out.append((rng.choice(same), t))
        return out

    for _ in range(rng.randint(3, 6)):
        kind = rng.choice(["plain", "rec", "mut", "agg", "agg", "min"])
        lower = list(types)
        if kind == "plain":
            p, ts = fresh("p"), None
            for _ in range(rng.choice([1, 2])):
                for _ in range(30):
                    lits, vt = body(lower, neg=lower)
                    h = head(vt, ts)
                    if h:
                        break
                else:
                    break
                ts = [t for _, t in h]
                lines.append(f"{p}({', '.join(a for a, _ in h)}) :- {', '.join(lits)}.")
            if ts:
                types[p] = tuple(ts)
                if not any("v =" in ln for ln in lines[-2:]):
                    finite.add(p)
        elif kind in ("rec", "mut"):
            k = 1 if kind == "rec" else rng.choice([2, 3])
            ps = [fresh("r") for _ in range(k)]
            base = [x for x in types if x in finite]
            for p in ps:
                for _ in range(30):
                    lits, vt = body(base, neg=lower, rec=True)
                    h = head(vt)
                    if h:
                        break
                types[p] = tuple(t for _, t in h)
                lines.append(f"{p}({', '.join(a for a, _ in h)}) :- {', '.join(lits)}.")
            for i, p in enumerate(ps):
                for j in range(rng.choice([1, 2])):
                    q = ps[(i + 1) % k] if j == 0 else rng.choice(ps)
                    must = [q] + ([rng.choice(ps)] if rng.random() < 0.25 else [])
                    for _ in range(40):
                        lits, vt = body(base + ps, must=must, neg=lower, rec=True)
                        h = head(vt, types[p])
                        if h:
                            break
                    else:
                        continue
                    lines.append(f"{p}({', '.join(a for a, _ in h)}) :- {', '.join(lits)}.")
            finite.update(ps)
        elif kind == "agg":
            p = fresh("a")
            for _ in range(40):
                lits, vt = body(lower, neg=lower)
                if len(vt) >= 2:
                    break
            names = list(vt)
            rng.shuffle(names)
            g = names[:min(len(names) - 1, rng.choice([0, 1, 1, 2]))]
            rest = names[len(g):]
            aggs = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                v = rng.choice(rest)
                t = vt[v]
                aggs.append((rng.choice(["count", "countd", "min", "max"] + (["sum", "avg"] if t != "str" else [])), v, t))
            lines.append(f"{p}({', '.join(g + [f'{f}<{v}>' for f, v, _ in aggs])}) :- {', '.join(lits)}.")
            types[p] = tuple([vt[x] for x in g] + ["int" if f in ("count", "countd") else "float" if f == "avg" else t
                                                   for f, v, t in aggs])
        else:
            p, agg = fresh("m"), rng.choice(["min", "max"])
            shape = rng.choice(["sp", "lab", "lab2", "mut"])
            root = rng.choice([x for x in types if types[x] == ("int",)])
            if shape == "sp":     # recursive min over float distances
                lines.append(f"{p}(y, min<d>) :- {root}(y), d = 0.0.")
                lines.append(f"{p}(y, min<d>) :- {p}(x, d1), w(x, y, c), c > 0.0, d = d1 + c.")
                types[p] = ("int", "float")
            elif shape == "lab":  # string labels, a negation inside the loop
                lines.append(f"{p}(x, {agg}<l>) :- s(l, x).")
                lines.append(f"{p}(y, {agg}<l>) :- {p}(x, l), e(x, y), !{root}(y).")
                types[p] = ("int", "str")
            elif shape == "lab2":  # two grouping columns
                lines.append(f"{p}(x, g, {agg}<l>) :- s(g, x), e(x, l).")
                lines.append(f"{p}(y, g, {agg}<l>) :- {p}(x, g, l), e(x, y).")
                types[p] = ("int", "str", "int")
            else:                 # min/max through mutual recursion
                q = fresh("h")
                lines.append(f"{p}(y, {agg}<d>) :- {root}(y), d = y * 10.")
                lines.append(f"{p}(y, {agg}<d>) :- {q}(y, d).")
                lines.append(f"{q}(y, d) :- {p}(x, d), e(x, y).")
                types[p], types[q] = ("int", "int"), ("int", "int")
            if shape in ("lab", "lab2"):
                finite.add(p)
    return "\n".join(lines) + "\n"


def load(eng, rng):
    sess, state = {}, {}
    for p, ts in INPUTS.items():
        sess[p] = eng.input(p, [f"c{i}" for i in range(len(ts))], dtypes=[DTYPES[t] for t in ts])
        rows = [tuple(value(rng, t) for t in ts) for _ in range(8 if len(ts) > 1 else 2)]
        sess[p].insert(rows)
        state[p] = Counter(rows)
        sess[p].advance_to(1)
    return sess, state


def churn(rng, sess, state, absent=True):
    """Up to 4 changes per input: remove a present row, remove a row that may be absent (its count goes
    below zero: absent until inserted back past zero), or insert one (maybe a duplicate)."""
    for p, ts in INPUTS.items():
        for _ in range(rng.randint(0, 4)):
            r = rng.random()
            present = [k for k, c in state[p].items() if c > 0]
            if present and r < 0.4:
                row = rng.choice(present)
                sess[p].remove([row])
                state[p][row] -= 1
            elif absent and r < 0.55:
                row = tuple(value(rng, t) for t in INPUTS[p])
                sess[p].remove([row])
                state[p][row] -= 1
            else:
                row = tuple(value(rng, t) for t in INPUTS[p])
                sess[p].insert([row])
                state[p][row] += 1


def advance(sess):
    e = max(s.epoch for s in sess.values()) + 1
    for s in sess.values():
        s.advance_to(e)


def rows(view):
    return sorted(map(tuple, view.to_pandas().values.tolist()))


# -- held: random programs against the reference ------------------------------------------------------------

@pytest.mark.parametrize("seed", range(9))
def test_random_stratified_programs_with_absent_removals_match_the_reference(seed):
    rng = random.Random(seed)
    text = program(seed)
    with kp.Engine(workers=seed % 3 + 1) as eng:
        sess, state = load(eng, rng)
        prog = eng.datalog(text, name="r50")
        for epoch in range(4):
            if epoch:
                churn(rng, sess, state)
                advance(sess)
            want = evaluate(text, state)
            for pred, rel in want.items():
                eng.wait(prog[pred], timeout=WAIT_S)
                got = rows_of(prog[pred], prog.columns(pred))
                assert same_rows(got, rel), f"seed {seed} epoch {epoch} {pred}: {diff_rows(got, rel)}\n{text}"


@pytest.mark.parametrize("seed", [100, 101, 102])
def test_follow_streams_of_random_programs_rebuild_every_epoch(seed):
    """Each relation's follower, read to its end once the inputs close, sums to the reference at every
    epoch, each row with multiplicity 0 or 1."""
    rng = random.Random(seed)
    text = program(seed)
    with kp.Engine(workers=seed % 3 + 1) as eng:
        sess, state = load(eng, rng)
        prog = eng.datalog(text, name="f50")
        wants = [evaluate(text, state)]
        followers = {p: prog[p].follow(timeout=WAIT_S) for p in wants[0]}
        for epoch in range(1, 5):
            churn(rng, sess, state, absent=False)
            for s in sess.values():
                s.advance_to(epoch + 1)
            wants.append(evaluate(text, state))
        for s in sess.values():
            s.close()
        for pred, f in followers.items():
            cols = prog.columns(pred)
            changes = defaultdict(Counter)
            for df in f:
                for r in df.to_dict("records"):
                    changes[int(r[f.time_col])][tuple(_py(r[c]) for c in cols)] += int(r[f.diff_col])
            cur = Counter()
            for epoch, want in enumerate(wants):
                cur.update(changes.get(epoch, Counter()))
                assert set(cur.values()) <= {0, 1}, (pred, epoch, dict(cur))
                got = {r for r, c in cur.items() if c}
                assert same_rows(got, want[pred]), f"{pred} epoch {epoch}: {diff_rows(got, want[pred])}\n{text}"


def _fmt(v):
    return f'"{v}"' if isinstance(v, str) else repr(v)


@pytest.mark.parametrize("seed", [7, 11, 23])
def test_goals_with_several_bound_positions_and_constants_match_the_filtered_relation(seed):
    rng = random.Random(seed)
    text = program(seed)
    with kp.Engine(workers=seed % 3 + 1) as eng:
        sess, state = load(eng, rng)
        prog = eng.datalog(text, name="g50")
        want = evaluate(text, state)
        goals = []
        for pred in sorted(want):
            arity, rel = len(prog.columns(pred)), sorted(want[pred], key=repr)
            for _ in range(2):
                args = ["?" if r < 0.55 else "_" if r < 0.75 or not rel else rng.choice(rel)[i]
                        for i, r in enumerate(rng.random() for _ in range(arity))]
                if "?" not in args:
                    args[rng.randrange(arity)] = "?"
                pat = f"{pred}({', '.join(a if a in ('?', '_') else _fmt(a) for a in args)})"
                goals.append((prog.goal(pat), pred, args, set(), pat))
        for epoch in range(3):
            if epoch:
                churn(rng, sess, state, absent=False)
                advance(sess)
                eng.wait(timeout=WAIT_S)
            cur = evaluate(text, state)
            for g, pred, args, asked, _ in goals:
                qs = [i for i, a in enumerate(args) if a == "?"]
                rel = sorted(cur[pred], key=repr)
                for _ in range(3):
                    if rel and rng.random() < 0.7:
                        b = tuple(rng.choice(rel)[i] for i in qs)
                    else:
                        b = tuple(value(rng, {"int64": "int", "float64": "float"}.get(
                            prog.analysis.dtypes[pred][i], "str")) for i in qs)
                    if b in asked and rng.random() < 0.4:
                        g.retract(*b)
                        asked.discard(b)
                    else:
                        g.ask(*b)
                        asked.add(b)
            for g, pred, args, asked, pat in goals:
                eng.wait(g.view, timeout=WAIT_S)
                eng.wait(prog[pred], timeout=WAIT_S)
                full = rows_of(prog[pred], prog.columns(pred))
                assert same_rows(full, cur[pred]), f"{pred} epoch {epoch}: {diff_rows(full, cur[pred])}"
                qs = [i for i, a in enumerate(args) if a == "?"]
                exp = {r for r in full if all(a in ("?", "_") or r[i] == a for i, a in enumerate(args))
                       and tuple(r[i] for i in qs) in asked}
                got = rows_of(g.view, prog.columns(pred))
                assert same_rows(got, exp), f"epoch {epoch} {pat} asked {sorted(asked, key=repr)}: {diff_rows(got, exp)}"


def test_recursive_min_max_with_negative_and_huge_weights_and_labels_on_a_dag():
    """The by-size entry (enter_at/delay) of monotone recursive mins with negative weights, labels of
    -2**62..2**61 and a max next to it, under retractions."""
    text = """
sp(s, y, min<d>) :- root(s), y = s, d = -3.
sp(s, y, min<d>) :- sp(s, x, d1), w(x, y, c), d = c + d1.
lab(x, min<l>) :- lbl(x, l).
lab(y, min<l>) :- lab(x, l), w(x, y, _).
lp(y, max<d>) :- root(y), d = 0.
lp(y, max<d>) :- lp(x, d1), w(x, y, c), d = d1 + c.
"""
    big = [-(2 ** 62), -(2 ** 40), -7, -1, 0, 5, 2 ** 33, 2 ** 61]
    rng = random.Random(5)

    def edge():
        x = rng.randrange(7)
        return (x, rng.randrange(x + 1, 8), rng.choice([-5, -1, 0, 2, 3, -(2 ** 40), 2 ** 35]))
    make = {"w": edge, "root": lambda: (rng.randrange(8),), "lbl": lambda: (rng.randrange(8), rng.choice(big))}
    for workers in (1, 3):
        with kp.Engine(workers=workers) as eng:
            state = {"w": Counter(edge() for _ in range(12)), "root": Counter([(0,), (3,)]),
                     "lbl": Counter(make["lbl"]() for _ in range(6))}
            cols = {"w": ["a", "b", "c"], "root": ["a"], "lbl": ["a", "l"]}
            sess = {p: eng.input(p, cols[p], rows=list(state[p].elements())) for p in state}
            for s in sess.values():
                s.advance_to(1)
            prog = eng.datalog(text, name="dag")
            for epoch in range(5):
                if epoch:
                    for p, s in sess.items():
                        for _ in range(rng.randint(0, 3)):
                            present = [k for k, c in state[p].items() if c > 0]
                            if present and rng.random() < 0.5:
                                r = rng.choice(present)
                                s.remove([r])
                                state[p][r] -= 1
                            else:
                                r = make[p]()
                                s.insert([r])
                                state[p][r] += 1
                        s.advance_to(epoch + 1)
                for pred, rel in evaluate(text, state).items():
                    eng.wait(prog[pred], timeout=WAIT_S)
                    got = rows_of(prog[pred], prog.columns(pred))
                    assert got == rel, f"W{workers} epoch {epoch} {pred}: {diff_rows(got, rel)}"


# -- bugs ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_goal_answer_includes_the_changes_sealed_by_closing_an_input(workers):
    with kp.Engine(workers=workers) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 2), (2, 3)])
        e.advance_to(1)
        prog = eng.datalog("tc(x, y) :- e(x, y).\ntc(x, y) :- tc(x, z), e(z, y).\n", name="p")
        g = prog.goal("tc(?, _)")
        g.ask(2)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows(g.view) == [(2, 3)]
        e.insert([(3, 4)])
        e.remove([(2, 3)])
        e.close()                                   # seals these last changes
        eng.wait(prog["tc"], timeout=WAIT_S)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows(prog["tc"]) == [(1, 2), (3, 4)]
        assert rows(g.view) == []                   # today: [(2, 3)], a row tc no longer has


@pytest.mark.parametrize("earlier_goal", [False, True])
def test_goal_made_after_the_inputs_closed_answers_its_first_ask(earlier_goal):
    with kp.Engine(workers=2 if earlier_goal else 1) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 2), (2, 3)])
        e.advance_to(1)
        prog = eng.datalog("tc(x, y) :- e(x, y).\ntc(x, y) :- tc(x, z), e(z, y).\n", name="p")
        if earlier_goal:                            # its ask moves e on to epoch 2
            g = prog.goal("tc(?, _)")
            g.ask(2)
            eng.wait(g.view, timeout=WAIT_S)
            assert rows(g.view) == [(2, 3)]
        else:
            e.advance_to(2)
            eng.wait(prog["tc"], timeout=WAIT_S)
        e.close()                                   # no more changes: the graph is final
        g2 = prog.goal("tc(_, ?)")
        g2.ask(3)
        eng.wait(g2.view, timeout=WAIT_S)
        assert rows(prog["tc"]) == [(1, 2), (1, 3), (2, 3)]
        assert rows(g2.view) == [(1, 3), (2, 3)]    # today: [] (the view at epoch 0)


def test_goal_on_a_program_over_a_closed_programs_export_answers():
    with kp.Engine(workers=1) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 2), (2, 3)])
        u = eng.input("u", ["a"], rows=[(1,)])
        e.advance_to(1)
        u.advance_to(1)
        a = eng.datalog("tc(x, y) :- e(x, y).\ntc(x, y) :- tc(x, z), e(z, y).\n", name="A")
        e.advance_to(3)
        eng.wait(a["tc"], timeout=WAIT_S)
        e.close()
        b = eng.datalog("r(y) :- t(x, y), u(x).\n", inputs={"t": "A.tc"}, name="B")
        u.close()
        eng.wait(b["r"], timeout=WAIT_S)
        assert rows(b["r"]) == [(2,), (3,)]          # final: every input is closed
        g = b.goal("r(?)")
        g.ask(2)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows(g.view) == [(2,)]                # today: [] for good


def test_goal_asked_again_after_the_inputs_closed_still_answers():
    with kp.Engine(workers=2) as eng:
        e = eng.input("e", ["a", "b"], rows=[(1, 2), (2, 3)])
        u = eng.input("u", ["a"], rows=[(2,)])
        e.advance_to(1)
        u.advance_to(1)
        prog = eng.datalog("tc(x, y) :- e(x, y).\ntc(x, y) :- tc(x, z), e(z, y).\n"
                           "ok(x, y) :- tc(x, y), !u(y).\n", name="p")
        g = prog.goal("ok(?, _)")
        g.ask(1)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows(g.view) == [(1, 3)]
        e.insert([(3, 4)])
        e.close()                                   # rows buffered at the close go in
        g.ask(2)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows(g.view) == [(1, 3), (1, 4), (2, 3), (2, 4)]
        u.insert([(4,)])
        u.advance_to(5)
        u.close()
        g.retract(1)
        eng.wait(g.view, timeout=WAIT_S)
        assert rows(g.view) == [(2, 3)]


TC_CELL = ("%%datalog g --inputs edge=edges_df\ntc(x, y) :- edge(x, y).\n"
           "tc(x, y) :- tc(x, z), edge(z, y).\n")


def test_datalog_cell_refusing_a_relation_view_does_not_point_at_df_use(ip, capsys):
    ip.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})
    ok(ip, capsys, TC_CELL)
    r, out = run(ip, capsys, "%%datalog h --inputs t=tc\nr(x) :- t(x, 4).\n")
    if not r.success:
        assert "df.use" not in out, out


def test_datalog_cell_reads_another_programs_export(ip, capsys):
    ip.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})
    ok(ip, capsys, TC_CELL)
    outs = []
    for i, spelling in enumerate(["t=tc", "t=g.tc"]):
        r, out = run(ip, capsys, f"%%datalog h{i} --inputs {spelling}\nr{i}(x) :- t(x, 4).\n")
        outs.append(out)
        if r.success:
            assert rows(ip.user_ns[f"r{i}"]) == [(1,), (2,), (3,)]
            return
    pytest.fail("neither spelling installs: " + " | ".join(o.strip().splitlines()[0] for o in outs))


def test_datalog_cell_over_sessions_frames_and_shadowed_inputs(ip, capsys):
    """One frame bound to two predicates, an input session that changes after the cell, a program whose
    facts define a predicate named like an engine input (the facts win), and a dropped program's name
    reused."""
    ip.user_ns["edges_df"] = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 4]})
    ok(ip, capsys, "%%datalog g --inputs a=edges_df,b=edges_df -o P\nj(x, z) :- a(x, y), b(y, z).\n")
    assert rows(ip.user_ns["j"]) == [(1, 3), (2, 4)]
    ok(ip, capsys, "sess = kp.engine().input('ed', ['s', 'd'], rows=[(1, 2)]); sess.advance_to(1)")
    ok(ip, capsys, "%%datalog h --inputs e=sess\ntc(x, y) :- e(x, y).\ntc(x, y) :- tc(x, z), e(z, y).\n"
                   "n(count<y>) :- tc(_, y).\n")
    ok(ip, capsys, "sess.insert([(2, 3), (3, 1)]); sess.advance_to(2); kp.engine().wait(n)")
    assert rows(ip.user_ns["n"]) == [(3,)] and len(rows(ip.user_ns["tc"])) == 9
    ok(ip, capsys, "%%datalog h2\ned(5, 6).\nr(x) :- ed(x, _).\n")
    assert rows(ip.user_ns["r"]) == [(5,)]
    ok(ip, capsys, "%%datalog h3 -i e=sess -i f=edges_df\nr3(x) :- e(x, _), !f(x, _).\n")
    assert rows(ip.user_ns["r3"]) == []
    ok(ip, capsys, "%dataflow drop h")
    ok(ip, capsys, "%%datalog h\nq(x) :- ed(x, _).\n")
    assert rows(ip.user_ns["q"]) == [(1,), (2,), (3,)]
    ok(ip, capsys, "g1 = P.goal('j(?, _)'); g1.ask(1); kp.engine().wait(g1.view)")
    assert rows(ip.user_ns["g1"].view) == [(1, 3)]
