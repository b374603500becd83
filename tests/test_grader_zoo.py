"""The grader's own test, in this process: the bug zoo (wrong solutions, each a mistake seen in
the field or planted, must lose points in its own part with a message that names it), as the
grader grades (the references live) and as a student's own `make check` sees it (the build's
recorded answers); and submissions that get a value right without doing what the part asks
(a loss with no gradient, a tree walk with no siblings, a timer that averages), each with the
control that shows its values are right."""

import pytest
from graders import ROOT, full, in_process, recorded, said, scores

from classroom import build
from lessonkit import parts

pytestmark = pytest.mark.slow  # the zoo, graded: not in make test-fast


@pytest.fixture(scope="module")
def make_check(student_build):
    return recorded(student_build)


def sources(make_check):
    return {"grade": None, "make check": make_check}


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


@pytest.mark.parametrize("where", ["grade", "make check"])
@pytest.mark.parametrize("bug", ZOO, ids=[bug[0] for bug in ZOO])
def test_the_grader_catches_every_bug_of_the_zoo(bug, where, make_check):
    name, part, right, wrong, catcher, words = bug
    results = {r.check.name: r for r in in_process(
        [part], [("numpy_speculative.py", right, wrong)], sources(make_check)[where])}
    assert sum(r.score for r in results.values()) < parts.BY_ID[part].points, name
    caught = results[catcher]
    assert caught.status in ("fail", "error"), f"{name}: {catcher} {caught.status}"
    message = " ".join(caught.lines())
    for word in words:
        assert word in message, f"{name}: {word!r} not in {message!r}"


def test_teachers_md_has_the_points_table_and_the_whole_zoo():
    teachers = (ROOT / "classroom" / "TEACHERS.md").read_text()
    assert build.points_table() in teachers, "TEACHERS.md: regenerate the points table"
    for name, *_ in ZOO:
        assert f"| {name} |" in teachers, f"TEACHERS.md lacks the zoo's {name!r}"


# ----------------------------------------------------------------------------------------------
# Bad answers: one clear line, 0 for that check


@pytest.mark.parametrize("case, part, edit, words", [
    ("wrong return type", "1a", ("numpy_speculative.py", "    return kept, target_choices[kept]",
                                 "    return str(kept)"), ["a pair of whole numbers"]),
    ("nan", "2c", ("speculative.py", "    return expected_tokens_per_pass(alpha, k) / (k * c + "
                   "verify_cost)", "    return float('nan')"), ["nan"]),
    ("wrong signature", "4b", ("speculative.py", "def break_even_alpha(k, c, verify_cost=1.0):",
                               "def break_even_alpha(k):"), ["TypeError"]),
    ("sys.exit", "1a", ("numpy_speculative.py", "    kept = 0\n    while kept",
                        "    import sys\n    sys.exit(3)\n    kept = 0\n    while kept"),
     ["SystemExit"]),
])
def test_a_bad_answer_costs_its_checks_in_one_line(case, part, edit, words, make_check):
    results = in_process([part], [edit], make_check)
    assert any(r.status != "pass" for r in results), case
    message = said(results)
    for word in words:
        assert word in message, (case, message)
    assert "Traceback" not in message


# ----------------------------------------------------------------------------------------------
# Hints that name the mistake (issues 31, 32, 42 and 53)


@pytest.mark.parametrize("case, part, edit, words", [
    ("2b counts every accepted guess", "2b",
     ("exercises/ex2_derive.py", "kept = np.cumprod(accepted, axis=1).sum(axis=1)",
      "kept = accepted.sum(axis=1)"), ["counting every accepted guess", "leading run"]),
    ("3a scales attention by sqrt(C)", "3a",
     ("numpy_speculative.py", "k[:, part].T / math.sqrt(hs)", "k[:, part].T / math.sqrt(C)"),
     ["scaled by sqrt(C)", "sqrt(head size)"]),
    ("3a LayerNorm adds the bias first", "3a",
     ("numpy_speculative.py", "    return (x - mean) / np.sqrt(variance + eps) * weight + bias",
      "    return ((x - mean) / np.sqrt(variance + eps) + bias) * weight"),
     ["adds bias before multiplying by weight"]),
    ("4b ignores verify_cost", "4b",
     ("speculative.py", "expected_speedup(mid, k, c, verify_cost) < 1",
      "expected_speedup(mid, k, c) < 1"), ["ignores verify_cost"]),
    ("3c keeps no guess", "3c",
     ("numpy_speculative.py", "    for i, token in enumerate(draft_tokens):\n",
      "    return 0, sample(target_probs[0], rng)\n    for i, token in enumerate(draft_tokens):\n"),
     ["kept as often as the exact rule", "throws away the speed-up"]),
])
def test_a_hint_names_the_mistake(case, part, edit, words, make_check):
    # The control: the same words are not in what the zoo's other mistakes are told.
    results = in_process([part], [edit], make_check)
    message = said(results)
    assert any(r.status == "fail" for r in results), (case, message)
    for word in words:
        assert word in message, (case, message)
    others = " ".join(" ".join(c[5]) for c in ZOO)
    assert not any(word in others for word in words)


# Part two: each planted bug loses points in its own part only, with a hint that names it.
PART_TWO_BUGS = [
    ("lookup takes the first occurrence", "6a", "beyond/ngram.py",
     "for start in range(len(seq) - n - 1, -1, -1):", "for start in range(len(seq) - n):",
     ["first earlier occurrence"], ["shorter tail"]),
    ("lookup finds the tail itself", "6a", "beyond/ngram.py",
     "for start in range(len(seq) - n - 1, -1, -1):", "for start in range(len(seq) - n, -1, -1):",
     ["the tail itself"], []),
    ("lookup proposes the match", "6a", "beyond/ngram.py",
     "return seq[start + n:start + n + k]", "return seq[start:start + k]",
     ["matched tokens themselves"], []),
    ("lookup tries the shortest tail first", "6a", "beyond/ngram.py",
     "for n in range(min(longest, len(seq) - 1), shortest - 1, -1):",
     "for n in range(shortest, min(longest, len(seq) - 1) + 1):", ["longest tail"],
     ["first earlier occurrence"]),
    ("a head's target one too far", "6b", "beyond/heads.py",
     "guess = guesses[:, :-i, i - 1].flatten(0, 1)    # state t guesses token t + 1 + i\n"
     "        teacher = logits[:, i:].flatten(0, 1)",
     "guess = guesses[:, :-i - 1, i - 1].flatten(0, 1)\n"
     "        teacher = logits[:, i + 1:].flatten(0, 1)", ["one position too far"], []),
    ("a head learns the big model's own target", "6b", "beyond/heads.py",
     "guess = guesses[:, :-i, i - 1].flatten(0, 1)    # state t guesses token t + 1 + i\n"
     "        teacher = logits[:, i:].flatten(0, 1)",
     "guess = guesses[:, :guesses.shape[1] - i + 1, i - 1].flatten(0, 1)\n"
     "        teacher = logits[:, i - 1:].flatten(0, 1)", ["one position too near"], []),
    ("the heads' loss as a pooled mean", "6b", "beyond/heads.py",
     "        losses.append(F.cross_entropy(guess, want))\n    return torch.stack(losses).mean()",
     "        losses.append(F.cross_entropy(guess, want, reduction='none'))\n"
     "    return torch.cat(losses).mean()", ["pooled together"], []),
    ("a head's block with the sigmoid", "6b", "beyond/heads.py",
     "x = state + silu(state @ fc_w + fc_b)", "x = state + 1 / (1 + np.exp(-(state @ fc_w + fc_b)))",
     ["sigmoid"], []),
    ("a head's block without the residual", "6b", "beyond/heads.py",
     "x = state + silu(state @ fc_w + fc_b)", "x = silu(state @ fc_w + fc_b)",
     ["without the residual"], []),
    ("eagle roll pairs f_t with x_t", "7b", "beyond/eagle.py",
     "tokens = torch.tensor([seq[1:]], device=features.device)",
     "tokens = torch.tensor([seq[:-1]], device=features.device)", ["not with seq[:-1]"], []),
    ("eagle roll feeds the big model's feature", "7b", "beyond/eagle.py",
     "states = torch.cat([states, feature], 1)",
     "states = torch.cat([states, features[None, -1:]], 1)", ["big model's last feature"], []),
    ("eagle roll with wte and lm_head swapped", "7b", "beyond/eagle.py",
     "feature = eagle(states, tokens, wte)[:, -1:]                       # f' (1, 1, C)\n"
     "        logits.append(F.linear(feature[0, 0], lm_head))",
     "feature = eagle(states, tokens, lm_head)[:, -1:]\n"
     "        logits.append(F.linear(feature[0, 0], wte))", ["wte and lm_head swapped"], []),
    ("eagle roll reads the last pair only", "7b", "beyond/eagle.py",
     "feature = eagle(states, tokens, wte)[:, -1:]",
     "feature = eagle(states[:, -1:], tokens[:, -1:], wte)[:, -1:]", ["only the last pair"], []),
    ("eagle shift pairs f_t with x_t", "7a", "beyond/eagle.py",
     "return features[:, :-1], idx[:, 1:], features[:, 1:]",
     "return features[:, :-1], idx[:, :-1], features[:, 1:]", ["pairs f_t with x_t"], []),
    ("eagle target off by one", "7a", "beyond/eagle.py",
     "return features[:, :-1], idx[:, 1:], features[:, 1:]",
     "return features[:, :-1], idx[:, 1:], features[:, :-1]", ["own input feature"], []),
    ("eagle cross-entropy on the token it reads", "7a", "beyond/eagle.py",
     "want = F.softmax(F.linear(targets, lm_head), -1)",
     "want = F.softmax(F.linear(states, lm_head), -1)", ["the head at the true f_{t+1}"], []),
    ("eagle regression squared", "7a", "beyond/eagle.py",
     "regression = F.smooth_l1_loss(guess, targets)",
     "regression = F.mse_loss(guess, targets)", ["squared error"], []),
    ("eagle cross-entropy through a detached guess", "7a", "beyond/eagle.py",
     "F.log_softmax(F.linear(guess, lm_head), -1)",
     "F.log_softmax(F.linear(guess.detach(), lm_head), -1)", ["not detached"], []),
    ("a causal mask over the tree's nodes", "8a", "beyond/tree.py",
     "seen[a] |= seen[parent]", "seen[a, :a] = True", ["causal mask over the nodes"], []),
    ("a node sees its parent only", "8a", "beyond/tree.py",
     "seen[a] |= seen[parent]", "seen[a, parent] = True", ["every ancestor"], []),
    ("the nodes do not see the chain", "8a", "beyond/tree.py",
     "    visible[chain:, cached:cached + chain] = True\n", "", ["do not see the chain"], []),
    ("a node placed by its index", "8a", "beyond/tree.py",
     "[root + depth for depth in depths]", "[root + a for a in range(len(parents))]",
     ["its index in the list"], []),
    ("greedy adds the token after the root", "8b", "beyond/tree_sampling.py",
     "return path, choices[node]", "return path, choices[0]", ["after the last kept node"], []),
    ("greedy tries the first child only", "8b", "beyond/tree_sampling.py",
     "for c in tree.children(node) if", "for c in tree.children(node)[:1] if",
     ["only the first child"], []),
    ("greedy reads the child's own choice", "8b", "beyond/tree_sampling.py",
     "if tree.tokens[c] == choices[node]", "if tree.tokens[c] == choices[c]",
     ["choices[node]"], ["only the first child"]),
    ("greedy forgets the bonus token", "8b", "beyond/tree_sampling.py",
     "        if child is None:\n            return path, choices[node]",
     "        if child is None:\n            return path, (choices[node] if path == [] or "
     "tree.children(node) else None)", ["the bonus when the walk reaches a leaf"], []),
    ("siblings accepted independently", "8b", "beyond/tree_sampling.py",
     "            target = residual(target, draft)                    # 2. the next sibling's "
     "target\n", "", ["same, unchanged target"], []),
    ("a residual not renormalised", "8b", "beyond/tree_sampling.py",
     "target = residual(target, draft)", "target = np.maximum(target - draft, 0.0)",
     ["not renormalised"], []),
    ("the root's target below the root", "8b", "beyond/tree_sampling.py",
     "    while True:\n        target = target_probs[node]",
     "    target = target_probs[0]\n    while True:", ["its own row"], []),
    ("sampling tries the first child only", "8b", "beyond/tree_sampling.py",
     "        for child in tree.children(node):", "        for child in tree.children(node)[:1]:",
     ["second and third children of the root were never kept"], []),
]


@pytest.mark.parametrize("case, part, file, right, wrong, words, absent", PART_TWO_BUGS,
                         ids=[bug[0] for bug in PART_TWO_BUGS])
def test_a_part_two_bug_costs_its_part_only_and_is_named(case, part, file, right, wrong, words,
                                                         absent, make_check):
    # As a student's own check reads it (the build's recorded answers), every part of the
    # exercise run on the planted file: only the bug's part loses points; its hint names it,
    # and not the mistake it is easily taken for (absent).
    exercise = [p.id for p in parts.PARTS if p.exercise == parts.BY_ID[part].exercise]
    results = in_process(exercise, [(file, right, wrong)], make_check)
    got = scores(results)
    assert got[part] < parts.BY_ID[part].points, case
    assert all(got[p] == parts.BY_ID[p].points for p in got if p != part), (case, got)
    message = said([r for r in results if r.check.part == part])
    for word in words:
        assert word in message, (case, message)
    for word in absent:
        assert word not in message, (case, message)
    assert "characters in all" not in message                     # no hint is cut


# ----------------------------------------------------------------------------------------------
# Values right, the part not done (issue 51): each loses its points; the control shows that the
# values it returns are what a check of values alone would take.


NO_GRADIENT_LOSS = [
    ("beyond/heads.py", "    return torch.stack(losses).mean()",
     "    value = float(torch.stack(losses).mean())\n"
     "    return torch.tensor(value) + 0 * guesses.sum()"),
]
NO_GRADIENT_EAGLE = [
    ("beyond/eagle.py", "    return regression + ce_weight * cross_entropy",
     "    with torch.no_grad():\n        value = regression + ce_weight * cross_entropy\n"
     "    return value + 0 * sum(p.sum() for p in eagle.parameters())"),
]
CHAIN_SAMPLING = [PART_TWO_BUGS[-1][2:5]]
AVERAGING_TIMER = [("exercises/ex5_gpu.py", "return statistics.median(seconds(fn) for _ in "
                    "range(repeats))", "return statistics.mean(seconds(fn) for _ in "
                    "range(repeats))")]
NO_WAIT_FIRST = [("exercises/ex5_gpu.py", "        start, end = torch.cuda.Event(enable_timing="
                  "True), torch.cuda.Event(enable_timing=True)\n        torch.cuda.synchronize()",
                  "        started = time.perf_counter()\n        fn()\n        torch.cuda."
                  "synchronize()\n        return time.perf_counter() - started\n        start, "
                  "end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing="
                  "True)")]


@pytest.mark.parametrize("case, part, edits, catcher, words", [
    ("6b: a loss with the right value and no gradient", "6b", NO_GRADIENT_LOSS,
     "heads_loss_pairs_each_head_with_its_token", ["gradient", "trains nothing"]),
    ("7a: a loss computed under no_grad, plus 0 x the weights", "7a", NO_GRADIENT_EAGLE,
     "eagle_loss_learns_the_next_feature", ["gradient", "zero"]),
    ("8b: a walk that tries the first child only", "8b", CHAIN_SAMPLING,
     "sample_walk_keeps_the_target_distribution", ["never kept"]),
    ("5a: a timer that averages", "5a", AVERAGING_TIMER, "timer_warms_up_and_takes_the_median",
     ["the median"]),
    ("5a: a timer that never waits before the clock", "5a", NO_WAIT_FIRST,
     "timer_waits_for_the_gpu", ["before starting the clock"]),
])
def test_a_part_is_judged_by_what_defines_it(case, part, edits, catcher, words, make_check):
    results = {r.check.name: r for r in in_process([part], edits, make_check)}
    assert results[catcher].status == "fail", (case, results[catcher].lines())
    message = " ".join(results[catcher].lines())
    for word in words:
        assert word in message, (case, message)
    assert sum(r.score for r in results.values()) < full(part) - 1, case


def test_the_values_of_those_answers_are_right(make_check):
    """The control: each of them gives what a check of values alone takes: the losses their
    values, the chain walk its first token as often as the target says, the timers the right
    figures where no call is slow and nothing else is queued."""
    import numpy as np

    from classroom import checks, checks_part_one, checks_part_two, checks_trees, helpers
    from classroom import plan, references
    from graders import planted
    rng = np.random.default_rng(1)

    def ctx(edits):
        return checks.LocalContext(0, plan.fixtures(0), make_check, modules=planted(edits))
    guesses = rng.normal(size=(2, 7, 3, 5)).astype(np.float32)
    logits = rng.normal(size=(2, 7, 5)).astype(np.float32)
    value, _ = ctx(NO_GRADIENT_LOSS).helper("torch_loss", "beyond.heads", "heads_loss",
                                           guesses, logits, "soft")
    assert abs(value - references.heads_loss(None, guesses, logits, "soft")["want"]) < 1e-4
    draft, features, idx, wte, lm_head = checks_part_two.random_loss_case(rng, 2, 6)
    value, _ = ctx(NO_GRADIENT_EAGLE).helper("eagle_loss_value", "beyond.eagle", "eagle_loss",
                                             *draft, features, idx, wte, lm_head, 0.0, 0.1, 0)
    assert abs(value - references.eagle_loss(None, draft, features, idx, wte, lm_head, 0.1,
                                             0.0, 0)["want"]) < 1e-4
    chain = ctx(CHAIN_SAMPLING)
    target, draft = checks_trees.favoured_rows(rng, 5)
    targets, drafts = checks_trees.favoured_rows(rng, 5, (3, 5))
    trees, paths, added = chain.helper("sample_walks", "beyond.tree_sampling", "sample_walk",
                                       checks_trees.TREE_SHAPE, target, targets, draft,
                                       drafts, np.random.default_rng(2), 12000)
    first = [tree[path[0]] if path[0] >= 0 else token
             for tree, path, token in zip(trees, paths, added)]
    assert not checks.chi_square_fails(np.bincount(first, minlength=5), target)
    for edits in (AVERAGING_TIMER, NO_WAIT_FIRST):
        timer = ctx(edits).student("exercises.ex5_gpu").timer
        assert 0.0015 < timer("cpu")(checks_part_one.Counted(0.002), 5, warmup=3) < 0.01
        gpu = helpers.FakeGPU()
        real = helpers.use_gpu(gpu)
        try:
            assert 0.015 < timer("cuda")(gpu.launch, 3, warmup=0) < 0.06
        finally:
            helpers.restore_gpu(real)


# ----------------------------------------------------------------------------------------------
# A part that calls a wrong one says so first (a student's own check: no reference stands in),
# and 3a's hint names the mistake it measured. `absent`: the other hints' words (a control).

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
    ("1b on a wrong 1a", "1b", [WRONG_1A], "replay_writes_the_text", ["fix 1a first"], []),
    ("3b on a wrong 1a", "3b", [WRONG_1A], "greedy_is_the_big_models_output",
     ["fix 1a first", "verdict_on_random_rounds", "greedy output"], []),
    ("3c's decoder on a wrong verify", "3c", [("numpy_speculative.py", *ZOO[0][2:4])],
     "sampling_has_the_target_distribution",
     ["fix verify first", "verify_keeps_the_target_distribution_exactly"], []),
    ("3c's decoder wrong itself, verify right (control)", "3c",
     [("numpy_speculative.py", *ZOO[1][2:4])], "sampling_has_the_target_distribution",
     ["the draft must sample"], ["fix verify first"]),
    ("3c's draws on a verify that draws none", "3c", [("numpy_speculative.py", *ZOO[7][2:4])],
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
def test_a_hint_says_what_to_fix_first(case, part, edits, catcher, words, absent, make_check):
    results = {r.check.name: r for r in in_process([part], edits, make_check)}
    message = " ".join(results[catcher].lines())
    assert results[catcher].status == "fail", (case, message)
    for word in words:
        assert word in message, (case, word, message)
    for word in absent:
        assert word not in message, (case, word, message)


@pytest.mark.parametrize("case, part, edit", [("1b", "1b", WRONG_1A), ("2c", "2c", WRONG_2A),
                                              ("3b", "3b", WRONG_1A)])
def test_graded_a_part_gets_the_reference_of_the_part_it_calls(case, part, edit):
    # The control of "fix X first": graded, the part gets the grader's reference for the
    # function it calls (plan.references), and passes.
    results = in_process([part], [edit], references=True, seeds=(0, 271828))
    assert all(r.status == "pass" for r in results), said(results)


def test_greedy_feedback_counts_positions_in_the_new_text(make_check):
    # The off-by-one decoder: the position is counted in the new text that is shown, from 1.
    results = in_process(["3b"], [("numpy_speculative.py", ZOO[5][2], ZOO[5][3])], make_check)
    lines = [line for r in results for line in r.lines()]
    message = next(line for line in lines if line.startswith("got: differs"))
    shown = message.split(": ", 2)[2].strip("'")
    position = int(message.split("from new token ")[1].split(":")[0])
    expected = next(line for line in lines if line.startswith("expected:"))
    want = expected.rsplit(": ", 1)[1].strip("'")
    first = next(i for i, (a, b) in enumerate(zip(shown, want)) if a != b) + 1
    assert position == first, (message, expected)
