"""The grader's own test: the bug zoo (ten wrong solutions, each a mistake seen in the field,
must lose points with a message that names the property it breaks) and bad submissions (each
costs only its own checks, with one clear line)."""

import csv
import zipfile

import pytest

from classroom import build, parts, runner
from classroom.submissions import ROOT, copy_project, find_root, workspace

pytestmark = pytest.mark.slow  # grades submissions in worker processes: not in make test-fast

# ----------------------------------------------------------------------------------------------
# The bug zoo: wrong solutions, each a mistake seen in the field (where: the comment).
# (name, part, the reference lines, the wrong lines, the check that must catch it, words its
# message must contain)

ZOO = [
    # 1. Resampling from the target after a rejection, instead of from max(0, p - q).
    #    Seen: SafeAILab/EAGLE#329 (replacement sampled from the target, q taken as 1);
    #    ShopeeLLM/Spec-RL#14 (the first rejected position samples from the target).
    ("resample from the target", "3c",
     "return i, sample(residual(target_probs[i], draft_probs[i]), rng)",
     "return i, sample(target_probs[i], rng)",
     "verify_keeps_the_target_distribution_exactly", ["first token distributed"]),
    # 2. The draft proposes its argmax, yet acceptance uses the ratio test with its probabilities.
    #    Seen: jaymody/speculative-sampling#3 (the author agreed: sample, don't argmax);
    #    huggingface/transformers#32867 (greedy assistant, its sampling probabilities as q).
    ("draft proposes its argmax", "3c",
     "            seq.append(sample(probs, rng))",
     "            seq.append(int(probs.argmax()))",
     "sampling_has_the_target_distribution", ["distributed as the big model samples them"]),
    # 3. The draft samples from top-k filtered probabilities but verify gets unfiltered ones.
    #    Seen: vllm-project/vllm#9834, fixed by #10198 (top-p on the draft's side only);
    #    huggingface/transformers#47932 (q returned from logits the draft did not sample).
    ("unfiltered draft probabilities", "3c",
     "            probs = warp(score(draft, draft_cache, seq, len(seq))[-1], temperature, top_k)\n"
     "            draft_probs.append(probs)                                       # (V,)",
     "            logits = score(draft, draft_cache, seq, len(seq))[-1]\n"
     "            probs = warp(logits, temperature, top_k)\n"
     "            draft_probs.append(warp(logits, temperature))",
     "sampling_has_the_target_distribution", ["top_k=3"]),
    # 4. The random generator reseeded every round.
    #    Seen: feifeibear/LLMSpeculativeSampling's sample() called torch.manual_seed on every
    #    call (its PRs #8, #19 fix seed bugs); vllm-project/vllm-ascend#16370 (acceptance and
    #    resampling reused one random draw).
    ("generator reseeded every round", "3c",
     "        draft_probs = []\n",
     "        draft_probs = []\n        rng = np.random.default_rng(1234)\n",
     "sampling_draws_from_the_given_rng", ["never reseed"]),
    # 5. No bonus token when every guess is kept.
    #    Seen: ohdearquant/lattice#509 (bonus dropped on full accept); vllm-project/vllm#5765
    #    (KV-cache proposers gained the bonus token).
    ("no bonus token", "3b",
     "            cache.forget_from(n + kept)       # ... leave both caches too\n"
     "        seq.append(added)",
     "            cache.forget_from(n + kept)       # ... leave both caches too\n"
     "        if kept < k_round or k_round == 0:\n            seq.append(added)",
     "greedy_with_a_perfect_draft", ["bonus"]),
    # 6. Draft token i compared with the target's prediction one position later.
    #    Seen: ohdearquant/lattice#243 (verify loop shifted by one, fixed in #258);
    #    a review of mlx-node/mlx-node#11 ("verification logits are shifted by one").
    ("off by one", "3b",
     "kept, added = greedy_verdict(seq[n:], [int(c) for c in choices])",
     "kept, added = greedy_verdict(seq[n:], [int(c) for c in choices[1:]] + [int(choices[-1])])",
     "greedy_is_the_big_models_output", ["greedy output"]),
    # 7. The caches keep the rejected draft tokens.
    #    Seen: ml-explore/mlx-lm#1423, fixed by #1427 (a full rotating cache kept rejected
    #    entries, so temperature-0 output diverged).
    ("cache not rolled back", "3b",
     "        for cache in (target_cache, draft_cache):\n"
     "            cache.forget_from(n + kept)       # ... leave both caches too\n",
     "",
     "greedy_is_the_big_models_output", ["forget rejected tokens"]),
    # 8. Accepting whenever the target gives the token at least the draft's probability.
    #    No bug report found; the same rule is offered on purpose as a lossy mode in
    #    AtomicBot-ai/atomic-llama-cpp-turboquant#8 (fixed-threshold acceptance).
    ("deterministic acceptance", "3c",
     "if rng.random() < accept_probability(target_probs[i, token], draft_probs[i, token]):",
     "if target_probs[i, token] >= draft_probs[i, token]:",
     "verify_keeps_the_target_distribution_exactly", ["min(1, target/draft)"]),
    # 9. The residual max(0, p - q) sampled without renormalising it.
    #    No bug report found: torch.multinomial renormalises by itself (noted in the review of
    #    vllm-project/vllm#2336), so the mistake bites with inverse-CDF sampling, as here.
    ("residual not renormalised", "3c",
     "return i, sample(residual(target_probs[i], draft_probs[i]), rng)",
     "return i, sample(np.maximum(target_probs[i] - draft_probs[i], 0.0), rng)",
     "verify_keeps_the_target_distribution_exactly", ["renormalised"]),
    # 10. Verification crops the context its own way, unlike plain decoding.
    #    Seen: huggingface/transformers#30042 (assisted output differed from greedy: cache
    #    positions updated differently), #30413.
    ("verification crops differently", "3b",
     "choices = score(target, target_cache, seq, n).argmax(-1)",
     "choices = forward(target, seq[-target.block_size:])[-(len(seq) - n + 1):].argmax(-1)",
     "greedy_is_the_big_models_output", ["past the window"]),
]


@pytest.mark.parametrize("bug", ZOO, ids=[bug[0] for bug in ZOO])
def test_the_grader_catches_every_bug_of_the_zoo(bug, tmp_path):
    name, part, right, wrong, catcher, words = bug
    ws = copy_project(tmp_path / "ws")
    path = ws / "numpy_speculative.py"
    source = path.read_text()
    assert source.count(right) == 1, f"{name}: the reference changed; update the zoo"
    path.write_text(source.replace(right, wrong))
    results = {r.check.name: r for r in runner.run_checks(ws, runner.select(part=part), [0],
                                                          timeout=30)}
    assert sum(r.score for r in results.values()) < parts.BY_ID[part].points, name
    caught = results[catcher]
    assert caught.status in ("fail", "error"), f"{name}: {catcher} {caught.status}"
    message = " ".join(caught.lines())
    for word in words:
        assert word in message, f"{name}: {word!r} not in {message!r}"


# ----------------------------------------------------------------------------------------------
# Bad input: one clear line, 0 for that check, nothing else lost


def grade_part(tmp_path, part, edit):
    submission = copy_project(tmp_path / "submission")
    file, old, new = edit
    text = (submission / file).read_text()
    assert old in text
    (submission / file).write_text(text.replace(old, new, 1))
    ws, missing = workspace(submission, tmp_path / "scratch")
    results = runner.run_checks(ws, runner.select(part=part), [0], missing=missing, timeout=5)
    return results, [line for r in results for line in r.lines()]


@pytest.mark.parametrize("case, part, edit, words", [
    ("syntax error", "2a", ("speculative.py", "    if alpha == 1:\n", "    if alpha == 1\n"),
     ["SyntaxError", "speculative.py"]),
    ("wrong return type", "1a", ("numpy_speculative.py", "    return kept, target_choices[kept]",
                                 "    return str(kept)"), ["a pair of whole numbers"]),
    ("nan", "2c", ("speculative.py", "    return expected_tokens_per_pass(alpha, k) / (k * c + "
                   "verify_cost)", "    return float('nan')"), ["nan"]),
    ("wrong signature", "4b", ("speculative.py", "def break_even_alpha(k, c, verify_cost=1.0):",
                               "def break_even_alpha(k):"), ["TypeError"]),
    ("endless loop", "1b", ("numpy_speculative.py", "    seq = list(prompt)\n    for draft_tokens",
                            "    while True:\n        pass\n    seq = list(prompt)\n    for "
                            "draft_tokens"), ["did not finish"]),
    ("sys.exit", "1a", ("numpy_speculative.py", "    kept = 0\n    while kept",
                        "    import sys\n    sys.exit(3)\n    kept = 0\n    while kept"),
     ["SystemExit"]),
    ("imports torch in exercise 3", "3a", ("numpy_speculative.py", "    mean = x.mean(",
                                           "    import torch\n    mean = x.mean("),
     ["NumPy alone"]),
])
def test_bad_submissions_cost_only_their_checks(case, part, edit, words, tmp_path):
    results, lines = grade_part(tmp_path, part, edit)
    assert all(r.score == 0 or r.status == "pass" for r in results)
    assert any(r.status != "pass" for r in results), case
    message = " ".join(lines)
    for word in words:
        assert word in message, (case, message)
    assert "Traceback" not in message


def test_a_missing_file_costs_its_parts_only(tmp_path):
    submission = copy_project(tmp_path / "submission")
    (submission / "exercises" / "ex2_derive.py").unlink()
    ws, missing = workspace(submission, tmp_path / "scratch")
    assert missing == ["exercises/ex2_derive.py"]
    results = runner.run_checks(ws, runner.select(exercise=2), [0], missing=missing)
    by_part = {p: [r for r in results if r.check.part == p] for p in ("2a", "2b", "2c")}
    assert all(r.status == "missing" for r in by_part["2b"])
    assert "missing file exercises/ex2_derive.py" in " ".join(by_part["2b"][0].lines())
    assert all(r.status == "pass" for r in by_part["2a"] + by_part["2c"])


def test_a_zip_with_an_extra_folder_level_is_found(tmp_path):
    inner = copy_project(tmp_path / "alice" / "speculative-class-alice")
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in inner.rglob("*"):
            z.write(f, f.relative_to(tmp_path))
    ws, missing = workspace(archive, tmp_path / "scratch")
    assert missing == []
    assert find_root(tmp_path / "alice").name == "speculative-class-alice"


# Processes forked at import, even as daemons of their own session: tests/test_hostile_zoo.py.


def test_a_link_to_the_graders_files_is_not_a_submission(tmp_path):
    # Links in a submission to the grader's reference (a file, or a folder holding one) would
    # hand the student the solution's points: they count as missing files.
    submission = copy_project(tmp_path / "submission")
    (submission / "speculative.py").unlink()
    (submission / "speculative.py").symlink_to(ROOT / "speculative.py")
    (submission / "exercises").rename(tmp_path / "elsewhere")
    (submission / "exercises").symlink_to(ROOT / "exercises", target_is_directory=True)
    _, missing = workspace(submission, tmp_path / "scratch")
    assert set(missing) == {"speculative.py", "exercises/ex2_derive.py", "exercises/ex5_gpu.py"}
    (submission / "speculative.py").unlink()                         # the control: real files
    (submission / "speculative.py").write_text((ROOT / "speculative.py").read_text())
    _, missing = workspace(submission, tmp_path / "scratch2")
    assert "speculative.py" not in missing


def test_a_file_that_does_not_compile_costs_its_own_parts_only(tmp_path, monkeypatch):
    # speculative.py imports numpy_speculative.py: a syntax error there must not cost 2a.
    submission = copy_project(tmp_path / "submission")
    broken = submission / "numpy_speculative.py"
    broken.write_text(broken.read_text().replace("    kept = 0\n", "    kept = = 0\n", 1))
    select = runner.select
    monkeypatch.setattr(runner, "select", lambda part=None, **kw: [
        c for c in select(hidden=True) if c.part in ("1a", "2a")])
    from classroom.__main__ import grade_one
    results, _ = grade_one(submission)
    by_part = {p: [r for r in results if r.check.part == p] for p in ("1a", "2a")}
    assert all(r.status == "error" and "SyntaxError" in " ".join(r.lines())
               for r in by_part["1a"])
    assert by_part["2a"] and all(r.status == "pass" for r in by_part["2a"])
    # the control: run as submitted, the import error reaches 2a
    ws, _ = workspace(submission, tmp_path / "scratch")
    plain = runner.run_checks(ws, [r.check for r in by_part["2a"]], [0])
    assert all(r.status != "pass" for r in plain)


def test_an_endless_loop_is_cut_once_per_part(tmp_path):
    # 3b has several checks and two seeds; each would wait out the limit. After the first
    # timeout the part's other checks are not run, so the grade waits about one limit.
    edit = ("numpy_speculative.py", "    seq, passes = list(prompt), 0\n",
            "    while True:\n        pass\n    seq, passes = list(prompt), 0\n")
    submission = copy_project(tmp_path / "submission")
    text = (submission / edit[0]).read_text()
    (submission / edit[0]).write_text(text.replace(edit[1], edit[2], 1))
    ws, missing = workspace(submission, tmp_path / "scratch")
    results = runner.run_checks(ws, runner.select(part="3b", hidden=True), [0, 1], jobs=1,
                                timeout=3)
    assert all(r.status == "timeout" for r in results) and len(results) >= 3
    waited = [o for r in results for o in r.outcomes.values() if "not run" not in o["message"]]
    assert len(waited) == 1                          # one limit waited out, not 2 x 4 of them


def test_grade_all_grades_the_others_when_one_zip_is_corrupt(tmp_path, monkeypatch):
    # A zip whose data is damaged (extracting raises zlib.error or BadZipFile): that student's
    # row says "not graded" with blank points, not 0, and the next student is still graded.
    folder = tmp_path / "submissions"
    good = copy_project(folder / "bob")
    broken = folder / "alice.zip"
    with zipfile.ZipFile(broken, "w", zipfile.ZIP_DEFLATED) as z:
        for name in parts.STUDENT_FILES:
            z.write(good / name, name)
    data = bytearray(broken.read_bytes())
    for i in range(200, 400):                                  # inside the first member's data
        data[i] ^= 0x55
    broken.write_bytes(bytes(data))
    select = runner.select
    monkeypatch.setattr(runner, "select", lambda **kw: select(part="2a"))
    from classroom.__main__ import main
    grades = tmp_path / "grades.csv"
    assert main(["grade-all", str(folder), "--csv", str(grades)]) == 0
    rows = {r["student"]: r for r in csv.DictReader(grades.open())}
    assert rows["alice.zip"]["note"].startswith("not graded") and rows["alice.zip"]["total"] == ""
    assert rows["alice.zip"]["2a"] == "" and rows["bob"]["total"] == "3" and rows["bob"]["2a"] == "3"


def test_teachers_md_has_the_points_table_and_the_whole_zoo():
    teachers = (ROOT / "classroom" / "TEACHERS.md").read_text()
    assert build.points_table() in teachers, "TEACHERS.md: regenerate the points table"
    for name, *_ in ZOO:
        assert f"| {name} |" in teachers, f"TEACHERS.md lacks the zoo's {name!r}"


# ----------------------------------------------------------------------------------------------
# Hints that name the mistake (issue 32) and feedback that points at the cause (issue 31)


@pytest.mark.parametrize("case, part, edit, words", [
    ("2b counts every accepted guess", "2b",
     ("exercises/ex2_derive.py", "kept = np.cumprod(accepted, axis=1).sum(axis=1)",
      "kept = accepted.sum(axis=1)"), ["counts every accepted guess", "leading run"]),
    ("3a scales attention by sqrt(C)", "3a",
     ("numpy_speculative.py", "k[:, part].T / math.sqrt(hs)", "k[:, part].T / math.sqrt(C)"),
     ["scaled by sqrt(C)", "sqrt(head size)"]),
    ("4b ignores verify_cost", "4b",
     ("speculative.py", "expected_speedup(mid, k, c, verify_cost) < 1",
      "expected_speedup(mid, k, c) < 1"), ["ignores verify_cost"]),
    ("3c keeps no guess", "3c",
     ("numpy_speculative.py", "    for i, token in enumerate(draft_tokens):\n",
      "    return 0, sample(target_probs[0], rng)\n    for i, token in enumerate(draft_tokens):\n"),
     ["kept as often as the exact rule", "throws away the speed-up"]),
])
def test_a_hint_names_the_mistake(case, part, edit, words, tmp_path):
    # Each mistake gets a hint that names it; the control: the same words are not in what the
    # reference's other mistakes of the zoo are told (the hint is about this one).
    results, lines = grade_part(tmp_path, part, edit)
    message = " ".join(lines)
    assert any(r.status == "fail" for r in results), (case, message)
    for word in words:
        assert word in message, (case, message)
    others = " ".join(" ".join(c[5]) for c in ZOO)
    assert not any(word in others for word in words)


# Part two: each planted bug loses points in its own part only, with a hint that names it.
PART_TWO_BUGS = [
    ("lookup takes the first occurrence", "6a", "beyond/ngram.py",
     "for start in range(len(seq) - n - 1, -1, -1):", "for start in range(len(seq) - n):",
     ["first earlier occurrence"]),
    ("lookup finds the tail itself", "6a", "beyond/ngram.py",
     "for start in range(len(seq) - n - 1, -1, -1):", "for start in range(len(seq) - n, -1, -1):",
     ["the tail itself"]),
    ("lookup proposes the match", "6a", "beyond/ngram.py",
     "return seq[start + n:start + n + k]", "return seq[start:start + k]",
     ["matched tokens themselves"]),
    ("lookup tries the shortest tail first", "6a", "beyond/ngram.py",
     "for n in range(min(longest, len(seq) - 1), shortest - 1, -1):",
     "for n in range(shortest, min(longest, len(seq) - 1) + 1):", ["longest tail"]),
    ("a head's target one too far", "6b", "beyond/heads.py",
     "guess = guesses[:, :-i, i - 1].flatten(0, 1)    # state t guesses token t + 1 + i\n"
     "        teacher = logits[:, i:].flatten(0, 1)",
     "guess = guesses[:, :-i - 1, i - 1].flatten(0, 1)\n"
     "        teacher = logits[:, i + 1:].flatten(0, 1)", ["one position too far"]),
    ("a head learns the big model's own target", "6b", "beyond/heads.py",
     "guess = guesses[:, :-i, i - 1].flatten(0, 1)    # state t guesses token t + 1 + i\n"
     "        teacher = logits[:, i:].flatten(0, 1)",
     "guess = guesses[:, :guesses.shape[1] - i + 1, i - 1].flatten(0, 1)\n"
     "        teacher = logits[:, i - 1:].flatten(0, 1)", ["one position too near"]),
    ("a head's block with the sigmoid", "6b", "beyond/heads.py",
     "x = state + silu(state @ fc_w + fc_b)", "x = state + 1 / (1 + np.exp(-(state @ fc_w + fc_b)))",
     ["sigmoid"]),
    ("a head's block without the residual", "6b", "beyond/heads.py",
     "x = state + silu(state @ fc_w + fc_b)", "x = silu(state @ fc_w + fc_b)",
     ["without the residual"]),
    ("eagle roll pairs f_t with x_t", "7a", "beyond/eagle.py",
     "tokens = torch.tensor([seq[1:]], device=features.device)",
     "tokens = torch.tensor([seq[:-1]], device=features.device)", ["not with seq[:-1]"]),
    ("eagle roll feeds the big model's feature", "7a", "beyond/eagle.py",
     "states = torch.cat([states, feature], 1)",
     "states = torch.cat([states, features[None, -1:]], 1)", ["big model's last feature"]),
    ("eagle roll with wte and lm_head swapped", "7a", "beyond/eagle.py",
     "feature = eagle(states, tokens, wte)[:, -1:]                       # f' (1, 1, C)\n"
     "        logits.append(F.linear(feature[0, 0], lm_head))",
     "feature = eagle(states, tokens, lm_head)[:, -1:]\n"
     "        logits.append(F.linear(feature[0, 0], wte))", ["wte and lm_head swapped"]),
    ("eagle roll reads the last pair only", "7a", "beyond/eagle.py",
     "feature = eagle(states, tokens, wte)[:, -1:]",
     "feature = eagle(states[:, -1:], tokens[:, -1:], wte)[:, -1:]", ["only the last pair"]),
    ("eagle shift pairs f_t with x_t", "7b", "beyond/eagle.py",
     "return features[:, :-1], idx[:, 1:], features[:, 1:]",
     "return features[:, :-1], idx[:, :-1], features[:, 1:]", ["pairs f_t with x_t"]),
    ("eagle target off by one", "7b", "beyond/eagle.py",
     "return features[:, :-1], idx[:, 1:], features[:, 1:]",
     "return features[:, :-1], idx[:, 1:], features[:, :-1]", ["own input feature"]),
    ("eagle cross-entropy on the token it reads", "7b", "beyond/eagle.py",
     "want = F.softmax(F.linear(targets, lm_head), -1)",
     "want = F.softmax(F.linear(states, lm_head), -1)", ["the head at the true f_{t+1}"]),
    ("eagle regression squared", "7b", "beyond/eagle.py",
     "regression = F.smooth_l1_loss(guess, targets)",
     "regression = F.mse_loss(guess, targets)", ["squared error"]),
    ("a causal mask over the tree's nodes", "8a", "beyond/tree.py",
     "seen[a] |= seen[parent]", "seen[a, :a] = True", ["causal mask over the nodes"]),
    ("a node sees its parent only", "8a", "beyond/tree.py",
     "seen[a] |= seen[parent]", "seen[a, parent] = True", ["every ancestor"]),
    ("the nodes do not see the chain", "8a", "beyond/tree.py",
     "    visible[chain:, cached:cached + chain] = True\n", "", ["do not see the chain"]),
    ("a node placed by its index", "8a", "beyond/tree.py",
     "[root + depth for depth in depths]", "[root + a for a in range(len(parents))]",
     ["its index in the list"]),
    ("greedy adds the token after the root", "8b", "beyond/tree_sampling.py",
     "return path, choices[node]", "return path, choices[0]", ["after the last kept node"]),
    ("greedy tries the first child only", "8b", "beyond/tree_sampling.py",
     "for c in tree.children(node) if", "for c in tree.children(node)[:1] if",
     ["only the first child"]),
    ("siblings accepted independently", "8b", "beyond/tree_sampling.py",
     "            target = residual(target, draft)                    # 2. the next sibling's "
     "target\n", "", ["same, unchanged target"]),
    ("a residual not renormalised", "8b", "beyond/tree_sampling.py",
     "target = residual(target, draft)", "target = np.maximum(target - draft, 0.0)",
     ["not renormalised"]),
    ("the root's target below the root", "8b", "beyond/tree_sampling.py",
     "    while True:\n        target = target_probs[node]",
     "    target = target_probs[0]\n    while True:", ["its own row"]),
]


@pytest.mark.parametrize("case, part, file, right, wrong, words", PART_TWO_BUGS,
                         ids=[bug[0] for bug in PART_TWO_BUGS])
def test_a_part_two_bug_costs_its_part_only_and_is_named(case, part, file, right, wrong, words,
                                                         tmp_path):
    ws = copy_project(tmp_path / "ws")
    source = (ws / file).read_text()
    assert source.count(right) == 1, f"{case}: the reference changed; update the bugs"
    (ws / file).write_text(source.replace(right, wrong))
    exercise = parts.BY_ID[part].exercise
    results = runner.run_checks(ws, runner.select(exercise=exercise), [0], timeout=30)
    scores = {p.id: sum(r.score for r in results if r.check.part == p.id)
              for p in parts.PARTS if p.exercise == exercise}
    assert scores[part] < parts.BY_ID[part].points, case
    assert all(scores[p] == parts.BY_ID[p].points for p in scores if p != part), (case, scores)
    message = " ".join(line for r in results if r.check.part == part for line in r.lines())
    for word in words:
        assert word in message, (case, message)


def test_greedy_feedback_counts_positions_in_the_new_text(tmp_path):
    # The off-by-one decoder: the position is counted in the new text that is shown, from 1.
    results, lines = grade_part(tmp_path, "3b", ("numpy_speculative.py", ZOO[5][2], ZOO[5][3]))
    message = next(line for line in lines if line.startswith("got: differs"))
    shown = message.split(": ", 2)[2].strip("'")
    position = int(message.split("from new token ")[1].split(":")[0])
    expected = next(line for line in lines if line.startswith("expected:"))
    want = expected.rsplit(": ", 1)[1].strip("'")
    first = next(i for i, (a, b) in enumerate(zip(shown, want)) if a != b) + 1
    assert position == first, (message, expected)


def test_a_round_that_adds_no_token_is_named_within_the_limit(tmp_path):
    # A 3b whose rounds add no token loops forever: the timeout says why, from the passes the
    # grader counted, and comes at the limit (3 s here), not later.
    import time
    edit = ("numpy_speculative.py", "            cache.forget_from(n + kept)       # ... leave "
            "both caches too\n        seq.append(added)\n", "            cache.forget_from(n + "
            "kept)       # ... leave both caches too\n")
    submission = copy_project(tmp_path / "submission")
    text = (submission / edit[0]).read_text()
    (submission / edit[0]).write_text(text.replace(edit[1], edit[2], 1))
    ws, _ = workspace(submission, tmp_path / "scratch")
    start = time.monotonic()
    results = runner.run_checks(ws, runner.select(part="3b"), [0], timeout=3)
    elapsed = time.monotonic() - start
    message = " ".join(line for r in results for line in r.lines())
    assert "a round that adds no token" in message, message
    assert elapsed < 3 + 15, elapsed


@pytest.mark.parametrize("references", ["student's check", "grade (control)"])
def test_fix_1a_first_when_1b_fails_because_of_1a(references, tmp_path, monkeypatch):
    # In a student's own check (no reference for 1a) a wrong greedy_verdict fails 1b too: its
    # hint says to fix 1a first. The control: graded, 1b gets the grader's 1a and passes.
    if references == "student's check":
        monkeypatch.setattr(runner, "references", lambda part: {})
    results, lines = grade_part(tmp_path, "1b", ("numpy_speculative.py",
                                                 "    return kept, target_choices[kept]",
                                                 "    return kept, target_choices[kept - 1]"))
    message = " ".join(lines)
    if references == "student's check":
        assert "fix 1a first" in message, message
    else:
        assert all(r.status == "pass" for r in results), message


# ----------------------------------------------------------------------------------------------
# A part that calls a wrong one says so first, and 3a's hint names the mistake it measured
# (issue 42). Each bug with its message's words; `absent`: words of the other hints, which this
# one must not get (a control: the hint fits what was measured, not a fixed list). Run as a
# student's own check: no reference stands in for another part's function.

WRONG_1A = ("numpy_speculative.py", "    return kept, target_choices[kept]",
            "    return kept, target_choices[kept - 1]")
WRONG_2A = ("speculative.py", "    return (1 - alpha ** (k + 1)) / (1 - alpha)",
            "    return (1 - alpha ** k) / (1 - alpha)")
NOT_CACHED = [("numpy_speculative.py", "cache.keys[layer] = np.concatenate([cache.keys[layer], k])",
               "cache.keys[layer] = k"),
              ("numpy_speculative.py",
               "cache.values[layer] = np.concatenate([cache.values[layer], v])",
               "cache.values[layer] = v")]
MEASURED = ["fix layer_norm first", "positions that start at 0", "without its causal mask",
            "fed to an empty cache, are right", "scaled by sqrt(C)"]


@pytest.mark.parametrize("case, part, edits, catcher, words, absent", [
    ("2c on a wrong 2a", "2c", [WRONG_2A], "speedup_is_tokens_over_cost",
     ["fix 2a first", "tokens_per_pass_is_the_sum", "k c + verify_cost, is right"], []),
    ("2c on a wrong 2a, its own cost wrong too (control)", "2c",
     [WRONG_2A, ("speculative.py", "(k * c + verify_cost)", "(c + verify_cost)")],
     "speedup_is_tokens_over_cost", ["a round costs k draft steps"], ["fix 2a first"]),
    ("3b on a wrong 1a", "3b", [WRONG_1A], "greedy_is_the_big_models_output",
     ["fix 1a first", "verdict_on_random_rounds", "greedy output"], []),
    ("3c's decoder on a wrong verify", "3c", [ZOO[0][2:4]],
     "sampling_has_the_target_distribution",
     ["fix verify first", "verify_keeps_the_target_distribution_exactly"], []),
    ("3c's decoder wrong itself, verify right (control)", "3c", [ZOO[1][2:4]],
     "sampling_has_the_target_distribution", ["the draft must sample"], ["fix verify first"]),
    ("3c's draws on a verify that draws none", "3c", [ZOO[7][2:4]],
     "sampling_with_a_perfect_draft", ["fix verify first", "draws of rng.random()"], []),
    ("3a LayerNorm by the std", "3a", [("numpy_speculative.py", "x.var(-1, keepdims=True)",
                                        "x.std(-1, keepdims=True)")],
     "forward_matches_torch", ["fix layer_norm first", "rows of variance", "not by the std"],
     MEASURED[1:]),
    ("3a positions from 0", "3a", [("numpy_speculative.py",
                                    'p["transformer.wpe.weight"][start:start + T]',
                                    'p["transformer.wpe.weight"][:T]')],
     "forward_continues_its_cache", [MEASURED[1], "cache.length"],
     MEASURED[:1] + MEASURED[2:]),
    ("3a no causal mask", "3a", [("numpy_speculative.py",
                                  "        scores = np.where(visible, scores, -np.inf)\n", "")],
     "forward_matches_torch", [MEASURED[2]], MEASURED[:2] + MEASURED[3:]),
    ("3a keys and values not kept in the cache", "3a", NOT_CACHED,
     "forward_continues_its_cache", [MEASURED[3]], MEASURED[:3] + MEASURED[4:]),
])
def test_a_hint_says_what_to_fix_first(case, part, edits, catcher, words, absent, tmp_path,
                                       monkeypatch):
    monkeypatch.setattr(runner, "references", lambda part: {})
    submission = copy_project(tmp_path / "submission")
    for file, old, new in [(e if len(e) == 3 else ("numpy_speculative.py", *e)) for e in edits]:
        source = (submission / file).read_text()
        assert source.count(old) == 1, (case, old)
        (submission / file).write_text(source.replace(old, new))
    ws, missing = workspace(submission, tmp_path / "scratch")
    results = {r.check.name: r for r in runner.run_checks(ws, runner.select(part=part), [0],
                                                          missing=missing)}
    message = " ".join(results[catcher].lines())
    assert results[catcher].status == "fail", (case, message)
    for word in words:
        assert word in message, (case, word, message)
    for word in absent:
        assert word not in message, (case, word, message)


def test_2c_on_a_wrong_2a_passes_when_graded(tmp_path):
    # The control of "fix 2a first": graded, 2c gets the grader's 2a (runner.references).
    results, lines = grade_part(tmp_path, "2c", WRONG_2A)
    assert all(r.status == "pass" for r in results), lines
