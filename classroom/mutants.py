"""
classroom/mutants.py: the checks against every mutant of every solution region (the teacher's
only; `python -m classroom mutants [--part 3b]`).

A mutant is the reference with one small change inside a solution region (an operator, a
comparison, a constant one off, a statement left out, min for max, and for or...). It is killed
when a check of its part fails on it (public or hidden seed). A part's score is the share of
its mutants killed, leaving out those listed in EQUIVALENT (mutants no check can tell from the
reference, each with the reason); the survivors are listed for a new check or a reason.
"""

import ast
import copy
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from classroom import checks, expected, plan, project, regions
from lessonkit import parts

TIMEOUT = 20    # seconds for a mutant's checks (a mutant that loops is killed by its time)
SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
         ast.FloorDiv: ast.Div, ast.Pow: ast.Mult, ast.Mod: ast.FloorDiv, ast.MatMult: ast.Mult,
         ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
         ast.IsNot: ast.Is, ast.And: ast.Or, ast.Or: ast.And, ast.USub: ast.UAdd}
NAMES = {"max": "min", "min": "max", "argmax": "argmin", "argmin": "argmax", "any": "all",
         "all": "any", "break": "continue", "mean": "sum", "sum": "mean", "median": "mean",
         "True": "False", "False": "True"}
# Mutants no check can tell from the reference (name: the line, what changed), and why.
RANDOM = "rng.random() is continuous: it equals the bound with probability 0"
AXIS = "the array is 2-D here: axis 1 is axis -1"
EQUIVALENT = {
    "2b: simulate: accepted = rng.random((rounds, k)) < alpha: `rng.random((rounds, k)) < "
    "alpha` -> `rng.random((rounds, k)) <= alpha`": RANDOM,
    "2b: simulate: return float(tokens.mean()), float(tokens.std(ddof=1) / np.sqrt(rounds)): "
    "`1` -> `0`": "a standard error with ddof 0 or 2 differs from ddof 1's by a factor 1 +- "
                  "1 / (2 rounds): 2.5e-5 at 20,000 rounds, far below a simulation's noise",
    "2b: simulate: return float(tokens.mean()), float(tokens.std(ddof=1) / np.sqrt(rounds)): "
    "`1` -> `2`": "the same",
    "3a: layer_norm: mean = x.mean(-1, keepdims=True): `-1` -> `+1`": AXIS,
    "3a: layer_norm: variance = x.var(-1, keepdims=True): `-1` -> `+1`": AXIS,
    "3a: attention: 3, axis=-1): `-1` -> `+1`": AXIS,
    "3a: attention: y = np.concatenate(heads, axis=-1): `-1` -> `+1`": AXIS,
    "3b: speculative_greedy: choices = score(target, target_cache, seq, n).argmax(-1): `-1` -> "
    "`+1`": AXIS,
    "3b: speculative_greedy: seq.append(int(score(draft, draft_cache, seq, len(seq))[-1]"
    ".argmax())): `1` -> `0`": "score(..., len(seq)) returns one row: row 0 is row -1",
    "3c: speculative_sample: probs = warp(score(draft, draft_cache, seq, len(seq))[-1], "
    "temperature, top_k): `1` -> `0`": "score(..., len(seq)) returns one row: row 0 is row -1",
    "3c: verify: if rng.random() < accept_probability(target_probs[i, token], draft_probs[i, "
    "token]):: `rng.random() < accept_probability(target_probs[i, token], draft_probs[i, "
    "token])` -> `rng.random() <= accept_probability(target_probs[i, token], draft_probs[i, "
    "token])`": RANDOM,
    "4b: break_even_alpha: if expected_speedup(1.0, k, c, verify_cost) <= 1:: "
    "`expected_speedup(1.0, k, c, verify_cost) <= 1` -> `expected_speedup(1.0, k, c, "
    "verify_cost) < 1`": "the speed-up at alpha 1 is exactly 1 only where no alpha helps "
                         "either way: both return nan, or bisect to alpha 1",
    "4b: break_even_alpha: low, high = 0.0, 1.0: `0.0` -> `-1.0`": "bisection from -1: the "
    "first middle is 0, below the break-even point, and from there it is the same bisection",
    "4b: break_even_alpha: low, high = 0.0, 1.0: `1.0` -> `2.0`": "bisection to 2: the first "
    "middle is 1, above the break-even point, and from there it is the same bisection",
    "4b: break_even_alpha: for _ in range(100):: `100` -> `99`": "bisection converged to the "
    "last bit long before: 2^-99 is far below a float's resolution near the root",
    "4b: break_even_alpha: for _ in range(100):: `100` -> `101`": "the same",
    "4b: break_even_alpha: low, high = (mid, high) if expected_speedup(mid, k, c, verify_cost) "
    "< 1 else (low, mid): `expected_speedup(mid, k, c, verify_cost) < 1` -> "
    "`expected_speedup(mid, k, c, verify_cost) <= 1`": "a middle exactly at the root moves the "
    "other end: the same root to the last bits",
    "5a: timer: torch.cuda.synchronize(): `torch.cuda.synchronize()` left out": "the "
    "synchronisation before start.record(): a CUDA event is recorded on the GPU's queue after "
    "the work before it, so the event timer needs no wait there (the clock timer does: checked)",
    "5a: timer: return start.elapsed_time(end) / 1e3: `1000.0` -> `1001.0`": "0.1% of the "
    "simulated 20 ms: 20 microseconds, below any timer's noise on a CPU",
    "5a: timer: return start.elapsed_time(end) / 1e3: `1000.0` -> `999.0`": "the same",
    "6a: prompt_lookup: for n in range(min(longest, len(seq) - 1), shortest - 1, -1):: "
    "`len(seq) - 1` -> `len(seq) + 1`": "a tail as long as seq (or longer) has no earlier "
    "occurrence: the start loop is empty, and the shorter tails follow as before",
    "6a: prompt_lookup: for n in range(min(longest, len(seq) - 1), shortest - 1, -1):: `1` -> "
    "`0`": "the same, for a tail as long as seq",
    "6a: prompt_lookup: for start in range(len(seq) - n - 1, -1, -1):: `1` -> `2` (#2)":
        "the loop's end one further: start -1, where seq[-1:n - 1] is empty, never the tail",
    "6b: head_logits: return (x[:, None, :] @ head_w)[:, 0]: `0` -> `-1`": "that axis has "
    "size 1: index 0 is index -1",
    "6b: heads_loss: want = torch.softmax(teacher, -1) if targets == \"soft\" else "
    "teacher.argmax(-1): `-1` -> `+1`": "teacher is flattened to (positions, V): " + AXIS,
    "6b: heads_loss: want = torch.softmax(teacher, -1) if targets == \"soft\" else "
    "teacher.argmax(-1): `-1` -> `+1` (#2)": "the same",
    "7b: eagle_roll: logits.append(F.linear(feature[0, 0], lm_head)): `0` -> `-1`": "feature "
    "is (1, 1, C): index 0 is index -1",
    "7b: eagle_roll: logits.append(F.linear(feature[0, 0], lm_head)): `0` -> `-1` (#2)": "the "
    "same, its second axis",
    "8a: tree_mask: if parent >= 0:: `0` -> `-1`": "the root's row is made first, when "
    "seen[-1], the last node's row, is still all False: or-ing it changes nothing",
    "8b: sample_walk: if rng.random() < accept_probability(target[token], draft[token]):: "
    "`rng.random() < accept_probability(target[token], draft[token])` -> `rng.random() <= "
    "accept_probability(target[token], draft[token])`": RANDOM,
}


def mutations(node):
    """(description, the node as the mutant has it) for each small change of one node."""
    out = []
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.UnaryOp)) and type(node.op) in SWAPS:
        out.append(_with(node, "op", SWAPS[type(node.op)]()))
    if isinstance(node, ast.BoolOp):
        out.append(_with(node, "op", SWAPS[type(node.op)]()))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(node.operand)
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in SWAPS:
                new = copy.deepcopy(node)
                new.ops[i] = SWAPS[type(op)]()
                out.append(new)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float) and \
            not isinstance(node.value, bool):
        for value in {node.value + 1, node.value - 1, 0} - {node.value}:
            out.append(ast.Constant(type(node.value)(value)))
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        out.append(ast.Constant(not node.value))
    if isinstance(node, ast.Name) and node.id in NAMES:
        out.append(ast.Name(NAMES[node.id], node.ctx))
    if isinstance(node, ast.Attribute) and node.attr in NAMES:
        out.append(_with(node, "attr", NAMES[node.attr]))
    if isinstance(node, ast.Break):
        out.append(ast.Continue())
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        for end in ("lower", "upper"):
            if getattr(node.slice, end) is not None:
                new = copy.deepcopy(node)
                setattr(new.slice, end, None)
                out.append(new)
    return [(f"`{ast.unparse(node)}` -> `{ast.unparse(new)}`", new) for new in out]


def _with(node, field, value):
    new = copy.deepcopy(node)
    setattr(new, field, value)
    return new


class Mutator(ast.NodeTransformer):
    """Replaces the `target`th mutable node of the region lines (counted in visiting order);
    done: what it changed, in its line."""

    def __init__(self, lines, target, text):
        self.lines, self.target, self.count, self.done = lines, target, 0, None
        self.text = text.splitlines()

    def generic_visit(self, node):
        if self.done is None and getattr(node, "lineno", None) in self.lines:
            found = mutations(node)
            statement = isinstance(node, (ast.Assign, ast.AugAssign)) or \
                isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)
            found += [(f"`{ast.unparse(node)}` left out", ast.Pass())] if statement else []
            for description, new in found:
                if self.count == self.target:
                    self.done = f"{self.text[node.lineno - 1].split('#')[0].strip()}: {description}"
                    return ast.copy_location(new, node)
                self.count += 1
        return super().generic_visit(node)


def mutants(part):
    """[(function, description, its module's source)] of every mutant of the part's regions."""
    path = project.ROOT / part.file
    text = path.read_text()
    found = []
    for first, last, _, function in regions.regions(text):
        if function not in part.functions:
            continue
        lines = set(range(first + 2, last + 1))               # 1-based, markers left out
        target = 0
        while True:
            mutator = Mutator(lines, target, text)
            tree = ast.fix_missing_locations(mutator.visit(ast.parse(text)))
            if mutator.done is None:
                break
            same = sum(1 for f, d, _ in found if f == function and d.split(" (")[0] ==
                       mutator.done)
            found.append((function, mutator.done + (f" (#{same + 1})" if same else ""),
                          ast.unparse(tree)))
            target += 1
    return found


class Memo:
    """The references, each answer computed once for all the mutants."""

    def __init__(self):
        self.table = {}

    def call(self, ctx, name, args):
        key = expected.key(f"{ctx.seed}:{name}", args)
        if key not in self.table:
            self.table[key] = expected.encode(getattr(expected.references, name)(ctx, *args))
        return expected.decode(self.table[key])


def killed(part, source, memo, seeds, limit=TIMEOUT):
    """What kills the module `source`: the first check of the part that fails on it (or runs
    out of `limit` seconds; None: no limit, for the reference) with its outcome; None if
    none."""
    def alarm(signum, frame):
        raise TimeoutError
    signal.signal(signal.SIGALRM, alarm)
    try:
        module = project.load_apart(part.file, source)
        for seed in seeds:
            for c in sorted(plan.select(part=part.id, hidden=True), key=lambda c: c.points):
                ctx = checks.LocalContext(seed, plan.fixtures(seed), memo,
                                          modules={module.__name__: module})
                signal.setitimer(signal.ITIMER_REAL, limit or 0)
                outcome = checks.run_check(c, ctx)
                signal.setitimer(signal.ITIMER_REAL, 0)
                if outcome["status"] not in ("pass", "skipped"):
                    return f"{c.name} at seed {seed}: {outcome}"
        return None
    except (TimeoutError, Exception) as e:  # noqa: BLE001 (a mutant that breaks the module)
        return f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def score(part_id):
    """{part, mutants, killed, equivalent, survivors, seconds} of one part, in this process."""
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))        # a mutant that grows
    part, memo, started = parts.BY_ID[part_id], Memo(), time.monotonic()
    seeds = [plan.PUBLIC_SEED, plan.hidden_seed()]
    # The reference first, with no limit: it also makes the fixtures and fills the memo, which
    # on a busy machine can take longer than a mutant's checks may.
    failed = killed(part, (project.ROOT / part.file).read_text(), memo, seeds, limit=None)
    if failed:
        raise RuntimeError(f"the checks of {part_id} fail on the reference itself: {failed}")
    survivors, equivalent, found = [], [], mutants(part)
    for function, description, source in found:
        name = f"{part.id}: {function}: {description}"
        if killed(part, source, memo, seeds) is None:
            (equivalent if name in EQUIVALENT else survivors).append(name)
    counted = len(found) - len(equivalent)
    return {"part": part.id, "mutants": len(found), "killed": counted - len(survivors),
            "equivalent": len(equivalent), "survivors": survivors,
            "score": 1.0 if not counted else (counted - len(survivors)) / counted,
            "seconds": round(time.monotonic() - started)}


def main(args):
    """Every part (or one) in a process of its own, two at a time; a table, and the survivors
    into args.out."""
    chosen = [args.part] if args.part else [p.id for p in parts.PARTS]
    running, results = [], []
    for part_id in chosen + [None, None]:
        while len(running) == 2 or (part_id is None and running):
            done = running.pop(0)
            out = done.communicate()[0]
            if done.returncode:
                raise SystemExit(f"the mutants of a part could not be scored: {out[-300:]}")
            results.append(json.loads(out))
            row = results[-1]
            print(f"{row['part']:>3}  {row['killed']:>4}/{row['mutants'] - row['equivalent']:<4} "
                  f"killed ({row['equivalent']} equivalent)  score {row['score']:.2f}  "
                  f"{row['seconds']} s", flush=True)
            if part_id is not None:
                break
        if part_id is not None:
            running.append(subprocess.Popen(
                [sys.executable, "-c", "import json, sys\nfrom classroom import mutants\n"
                 "print(json.dumps(mutants.score(sys.argv[1])))", part_id],
                cwd=project.ROOT, stdout=subprocess.PIPE, text=True))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    low = [r["part"] for r in results if r["score"] < 0.9]
    print(f"wrote {args.out}; " + (f"below 0.9: {', '.join(low)}" if low else
                                   "every part at 0.9 or more"))
    return 1 if low else 0
