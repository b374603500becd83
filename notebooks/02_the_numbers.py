# %% [markdown]
# # 2. The numbers: how much a draft buys you
#
# Notebook 1 watched speculative decoding work: the draft guesses `k` characters, the big model
# checks them all in one pass and keeps the ones it agrees with. This notebook puts numbers on
# it, each first with a formula and then by measuring: how often a guess is kept (**alpha**,
# α, of two kinds); how many characters one pass of the big model writes (3.36 for α = 0.8 and
# `k = 4`, says the lesson); and how much faster that is by the clock. On the way: why real
# runs fall short of the formula, why "a quarter of the guesses kept" and "2 characters per
# pass" are one fact, and the paper's table of speed-ups, recomputed.
#
# Reading time: about 30 minutes. You write four small functions (the "your turn" cells); the
# cell after each checks your answer the way the course's grader does.

# %%
# Setup. The project's modules come from its environment (`make setup`; `make notebooks` opens
# Jupyter there). The models train on first use: a few minutes, with a progress bar.
from fractions import Fraction

import matplotlib.pyplot as plt
import numpy as np
import torch

import gpt
import numpy_speculative as ns
import speculative as sd
from harness import common
from classroom.yourturn import check
from exercises import ex2_derive
from lessonkit import corpus, machine

models = common.notebook_models(["big", "draft", "distilled"])
target = models["big"]
DRAFTS = {"draft": "the lesson's draft (1 x 32)", "distilled": "the distilled draft (1 x 128)"}
QUICK = common.notebook_args().quick  # tiny models (the test suite): numbers mean little
print(f"big model: {target.num_params():,} parameters; " + "; ".join(
    f"{name}: {models[name].num_params():,}" for name in DRAFTS))

# %% [markdown]
# ## Alpha: how often a guess survives
#
# Everything starts from the probability that the big model keeps a guess of the draft. How to
# measure it depends on how we decode. **Greedy decoding** (temperature 0) always takes the most
# likely character. A guess is kept exactly when the draft's most likely character is also the
# big model's, so the α that counts is the **greedy agreement**: the share of positions where
# the two top choices are the same.
#
# **Sampling** (temperature 1, say) draws characters at random. Let `p` be the big model's
# distribution at a position and `q` the draft's. The draft draws its guess `x` from `q`; the
# big model keeps it with probability `min(1, p(x) / q(x))` (notebook 4 shows why). Averaged
# over the draft's draw, a guess is kept with probability
#
#     sum over x of q(x) * min(1, p(x) / q(x))  =  sum over x of min(p(x), q(x))
#
# the overlap of the two distributions: 1 when they are identical, 0 when they share nothing.
# A three-character example, checked by playing the rule many times: draw a guess from `q`,
# keep it with probability `min(1, p(x) / q(x))` (`ns.accept_probability`, given; notebook 4
# builds the whole rule on it):

# %%
p = np.array([0.6, 0.3, 0.1])    # the big model
q = np.array([0.3, 0.5, 0.2])    # the draft
overlap = np.minimum(p, q).sum()
rng = np.random.default_rng(0)
trials = 4000 if QUICK else 20_000
guesses = rng.choice(3, size=trials, p=q)
kept = sum(rng.random() < ns.accept_probability(p[x], q[x]) for x in guesses)
print(f"sum of min(p, q) = {overlap:.2f}; {trials:,} guesses drawn from q: "
      f"{kept / trials:.3f} kept")
print(f"greedy: the top choices are {p.argmax()} and {q.argmax()}, so alpha = "
      f"{float(p.argmax() == q.argmax()):.0f}")
assert abs(kept / trials - overlap) < 0.02 and p.argmax() != q.argmax()

# %% [markdown]
# The same pair gives α = 0.7 when sampling and α = 0 when greedy: the draft's favourite is not
# the big model's, so a greedy guess is never kept, while a sampled guess often lands on a
# character both like. Feed the formulas below the α that matches the decoding. For real
# models, `sd.measure_agreement` reads held-out text (the last tenth of the corpus, never
# trained on) through both models and hands both models' logits at every position to
# `agreement_of`, which you write now: `alpha` is the overlap at the temperature you give it,
# `greedy_agreement` the share of equal top choices.
#
# ## Your turn: alpha and agreement from two models' logits
#
# `agreement_of(target_logits, draft_logits, temperature=..., top_k=..., top_p=...)` gets two
# arrays of logits of the same shape `(..., V)`: any number of leading dimensions (windows,
# positions), the vocabulary last. Return two Python floats:
#
# - alpha: turn both into the distributions decoding would sample from, with `warp(logits,
#   temperature, top_k, top_p)` (already written, in `numpy_speculative`; temperature 0 gives
#   one-hots), take the element-wise minimum, sum over the vocabulary, average over every
#   position;
# - the greedy agreement: the share of positions where both argmaxes are equal.

# %% your turn: speculative.agreement_of
# source only: the reference answer (the notebooks put its code here instead)
from speculative import agreement_of
import numpy as np
from numpy_speculative import warp

# %%
check("4a")

# %% [markdown]
# With your `agreement_of`, the two drafts against the big model:

# %%
agreement = {}
for name, label in DRAFTS.items():
    greedy = sd.measure_agreement(target, models[name], gpt.val_data, temperature=0.0)
    sampled = sd.measure_agreement(target, models[name], gpt.val_data, temperature=1.0)
    agreement[name] = {"greedy": greedy.greedy_agreement, "sampled": sampled.alpha}
    print(f"{label}: greedy agreement {greedy.greedy_agreement:.3f}, "
          f"alpha at temperature 1 {sampled.alpha:.3f} ({greedy.positions:,} positions)")
    # At temperature 0 both distributions are one-hot: their overlap is 1 or 0, so the two agree.
    assert abs(greedy.alpha - greedy.greedy_agreement) < 1e-9 and 0 <= sampled.alpha <= 1
common.claim(agreement["distilled"]["greedy"] > agreement["draft"]["greedy"] > 0.5,
             "both drafts agree with the big model more than half the time, the distilled one more")

# %% [markdown]
# The lesson reported 37% agreement for its draft; ours agrees far more often, and the
# distilled draft (one layer as wide as the big model, trained to imitate the big model's
# predictions rather than the text) more often still. Agreement belongs to one pair of trained
# models, not to the method; docs/LESSON.md says how ours were trained.
#
# ## How many characters per pass?
#
# The simplest model of a round: each of the `k` guesses is kept with probability α,
# independently, and the round stops at the first rejection. Guess 1 is kept with probability
# α; guess 2 only if guess 1 was kept too: α²; guess `i` with α^i. On top, every round writes
# one character of the big model's own (its correction at the first rejection, or the bonus
# character when all `k` pass). Counting that one as α⁰ = 1, a pass writes on average
#
#     1 + α + α² + ... + α^k  =  (1 - α^(k+1)) / (1 - α)
#
# (multiply the sum by 1 - α and all cancels but 1 - α^(k+1)). For α = 0.8 and k = 4:
# 1 + 0.8 + 0.64 + 0.512 + 0.4096 = 3.3616.
#
# ## Your turn: expected characters per pass
#
# Write `expected_tokens_per_pass(alpha, k)`. Mind α = 1 (every guess kept): the closed form
# divides 0 by 0 there, but the answer is plain, `k + 1`.

# %% your turn: speculative.expected_tokens_per_pass
# source only: the reference answer (the notebooks put its code here instead)
from speculative import expected_tokens_per_pass

# %%
check("2a")

# %% [markdown]
# ### 3.3616, exactly
#
# A float cannot hold 0.8 exactly (in binary it repeats), so a float sum is off in the last
# digits. `fractions.Fraction` computes with exact ratios: with α = 4/5 (`Fraction(0.8)` would
# take the float's binary value) sum and closed form are one fraction, 3.3616 exactly. Below
# it, how the sum grows with α and k. Each extra guess adds α^k, which shrinks fast, so longer
# drafts help less and less, and the sum stays below 1 / (1 - α): 5 for α = 0.8, 10 for 0.9.

# %%
a = Fraction(4, 5)
by_sum, closed = sum(a ** i for i in range(5)), (1 - a ** 5) / (1 - a)
print(f"1 + a + a^2 + a^3 + a^4 = {by_sum} = {float(by_sum)}; (1 - a^5) / (1 - a) = {closed}")
print(f"sd.expected_tokens_per_pass(0.8, 4) = {sd.expected_tokens_per_pass(0.8, 4)!r} (a float)")
assert by_sum == closed == Fraction(33616, 10000)
assert abs(sd.expected_tokens_per_pass(0.8, 4) - 3.3616) < 1e-12

ks = [1, 2, 3, 4, 6, 8, 16]
print("alpha " + "".join(f"{'k=' + str(k):>7}" for k in ks) + "   1/(1-alpha)")
for alpha in [0.2, 0.4, 0.6, 0.8, 0.9]:
    row = [sd.expected_tokens_per_pass(alpha, k) for k in ks]
    print(f"{alpha:5} " + "".join(f"{v:7.3f}" for v in row) + f"   {1 / (1 - alpha):7.3f}")
    assert all(b > a for a, b in zip(row, row[1:])) and row[-1] < 1 / (1 - alpha)

# %% [markdown]
# ## Checking the formula by simulation
#
# A derivation can hide a mistake, so let us play the game many times. A round: draw `k` uniform
# random numbers; guess `i` is accepted if its number is below α; the round keeps the accepted
# guesses up to the first rejection and adds one character of the big model's. The average
# should land on the formula within a few standard errors (the spread of the per-round counts
# over the square root of the number of rounds).
#
# ## Your turn: simulate the accept/reject process (2b; 2c comes with the costs, below)
#
# Write `simulate(alpha, k, rounds, rng)`: it returns the mean characters per round and the
# standard error of that mean. Draw every random number from `rng` (a NumPy generator), so that
# the same seed gives the same result. A loop over rounds works; NumPy can also do all rounds at
# once (`np.cumprod` along a row of accept/reject flags is 1 up to the first rejection, 0 after).

# %% your turn: exercises.ex2_derive.simulate
# source only: the reference answer (the notebooks put its code here instead)
from exercises.ex2_derive import simulate
import numpy as np

# %%
check("2b")

# %% [markdown]
# With the exercise's own `simulate`, formula and simulation side by side: lines are the
# formula, dots simulated rounds, the dotted line the ceiling 1 / (1 - α).

# %%
rng = np.random.default_rng(1337)
rounds = 20_000 if QUICK else 200_000
mean, se = ex2_derive.simulate(0.8, 4, rounds, rng)
print(f"alpha 0.8, k 4: formula 3.3616, simulated {mean:.4f} +- {se:.4f} ({rounds:,} rounds)")
assert abs(mean - 3.3616) < 5 * se

fig, ax = plt.subplots(figsize=(8, 4.5))
grid = np.linspace(0, 0.97, 98)
for k in [1, 2, 4, 8]:
    line, = ax.plot(grid, [sd.expected_tokens_per_pass(a, k) for a in grid], label=f"k = {k}")
    for alpha in [0.2, 0.4, 0.6, 0.7, 0.8, 0.9]:
        m, s = ex2_derive.simulate(alpha, k, 20_000, rng)
        assert abs(m - sd.expected_tokens_per_pass(alpha, k)) < 5 * s
        ax.scatter([alpha], [m], s=18, color=line.get_color(), zorder=3)
ax.plot(grid, 1 / (1 - grid), "k:", label="1 / (1 - alpha): k without limit")
ax.scatter([0.8], [3.3616], marker="*", s=180, color="black", zorder=4,
           label="alpha 0.8, k 4: 3.3616")
ax.set(xlabel="alpha (probability that a guess is kept)", ylabel="characters per pass",
       ylim=(0.9, 9.5), title="Expected characters per pass: formula (lines), simulation (dots)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Real runs fall short: misses come in runs
#
# Now the real thing: held-out prompts decoded greedily with each draft (k = 4), the characters
# per pass set against the formula fed with the greedy agreement. The generations stay inside
# the models' 128-character window, so every round is exactly one pass of the big model.

# %%
K = 4
N_NEW = 30 if QUICK else 96
prompts = corpus.held_out_prompts(4 if QUICK else 8, 32)
runs, short = {}, {}
for name, label in DRAFTS.items():
    runs[name] = stats = sd.Stats(k=K)
    for prompt in prompts:
        out, s = sd.speculative_generate(target, models[name], prompt, N_NEW, k=K)
        assert torch.equal(out, sd.generate(target, prompt, N_NEW))  # greedy: the big model's text
        stats.add(s)
    formula = sd.expected_tokens_per_pass(agreement[name]["greedy"], K)
    short[name] = 1 - stats.tokens_per_pass / formula       # how far short of the formula
    print(f"{label}: {stats.tokens_per_pass:.2f} characters per pass; the formula with "
          f"alpha = {agreement[name]['greedy']:.3f} says {formula:.2f} ({short[name]:.0%} short)")
    assert 1 <= stats.tokens_per_pass <= K + 1
assert short["draft"] > 0         # the lesson's draft writes less than the formula says

# %% [markdown]
# The lesson's draft writes fewer characters per pass than the formula promises. Where the
# distilled draft lands, a little below the formula or a little above, differs from one pair of
# trained models to another: it is right far more often, so it has fewer misses to string
# together. The formula's weak spot is the word "independently". A draft that misses one character has
# usually lost the thread (a name it does not know, a turn of phrase it did not expect) and
# tends to miss the next one too; on familiar ground it gets several in a row.
#
# The trace shows it. The first guess of a round comes right after a character the big model
# wrote itself: usually its correction, where the draft had just been wrong. Every later guess
# comes right after a guess that was kept. Were guesses independent, both would be kept at the
# same rate α. Call `a1` the share of first guesses kept and `a2` the share of guesses kept
# right after a kept one; a round then writes on average 1 + a1 (1 + a2 + a2² + a2³) characters
# for k = 4, which should land closer to the measured figure than the one-α formula.

# %%
def round_rates(stats):
    """(share of first guesses kept, share of later guesses kept given the one before was)."""
    rounds = [(len(guesses), n) for guesses, n, _ in stats.trace if guesses]
    # In a round that kept n of its m guesses, min(n + 1, m) - 1 later guesses were checked.
    checked = sum(min(n + 1, m) - 1 for m, n in rounds)
    return np.mean([n > 0 for _, n in rounds]), sum(max(n - 1, 0) for _, n in rounds) / checked


for name, label in DRAFTS.items():
    (a1, a2), measured = round_rates(runs[name]), runs[name].tokens_per_pass
    two = 1 + a1 * sum(a2 ** i for i in range(K))
    one = sd.expected_tokens_per_pass(agreement[name]["greedy"], K)
    print(f"{label}: a1 = {a1:.0%} of first guesses kept, a2 = {a2:.0%} after a kept one; "
          f"characters per pass {measured:.2f}, from a1 and a2 {two:.2f}, from alpha {one:.2f}")
    if name == "draft":
        common.claim(a2 > a1 and abs(two - measured) < abs(one - measured) / 2,
                     "a guess after a kept one is kept more often, and a1 and a2 predict the "
                     "characters per pass far better than alpha alone")

# %% [markdown]
# For the lesson's draft a guess right after a kept one is kept more often than a first guess
# (a2 above a1), and the two rates explain most of its shortfall: their figure lies less than
# half as far from the measured one as the one-α formula's.
#
# Sampling draws every guess afresh, and there the α to use is the overlap at the decoding's
# temperature; notebook 4 decodes at temperature 1 and checks that formula against the run.
#
# ## "About 2 characters per pass, a quarter of the guesses kept"
#
# The lesson reported both figures for its run, and they sound contradictory: if only a quarter
# of the guesses survive, how can a pass write two characters? They are one fact seen twice. A
# round writes one character of the big model's plus the guesses it kept, so a run that writes
# `T` characters per pass keeps `T - 1` guesses per round out of `k` proposed:
#
#     share of guesses kept = (characters per pass - 1) / k
#
# With k = 4, 2 characters per pass is (2 - 1) / 4, a quarter kept. The share kept is not α:
# guesses after the first rejection count as proposed but are never checked. Our runs, both
# ways, and then: which α gives the lesson's 2 characters per pass, if guesses were
# independent? It solves 1 + α + α² + α³ + α⁴ = 2, and since the sum grows with α, halving an
# interval that holds the answer finds it (bisection): about 0.52, twice the share kept. And the lesson's 37% agreement
# would give only 1.58 characters per pass: its two figures were presumably measured on
# different text.

# %%
for name, label in DRAFTS.items():
    stats = runs[name]
    print(f"{label}: {stats.acceptance_rate:.1%} of guesses kept; "
          f"({stats.tokens_per_pass:.2f} - 1) / {K} = {(stats.tokens_per_pass - 1) / K:.1%}")
    # Equal up to each prompt's last round, which may propose fewer than k guesses.
    assert abs(stats.acceptance_rate - (stats.tokens_per_pass - 1) / K) < 0.03
low, high = 0.0, 1.0                  # the sum is 1 at alpha 0 and 5 at alpha 1
while high - low > 1e-12:
    middle = (low + high) / 2
    low, high = (middle, high) if sd.expected_tokens_per_pass(middle, 4) < 2 else (low, middle)
two_per_pass = low
print(f"alpha for 2 characters per pass at k = 4: {two_per_pass:.3f}; "
      f"characters per pass for alpha 0.37: {sd.expected_tokens_per_pass(0.37, 4):.2f}")
assert 0.51 < two_per_pass < 0.53 and abs(sd.expected_tokens_per_pass(two_per_pass, 4) - 2) < 1e-6
assert round(sd.expected_tokens_per_pass(0.37, 4), 2) == 1.58

# %% [markdown]
# ## From passes to seconds
#
# Fewer passes of the big model is not yet less time. A round costs `k` draft steps and one
# check. In units of one big-model step (one character, with its KV cache):
#
# - `c`: one draft step over one big-model step;
# - the **verify cost**: one big-model pass over `k + 1` new characters over a pass over one.
#   The lesson assumes 1: on a GPU, where a step's time goes into reading the weights from
#   memory, five positions cost about what one costs.
#
# A round costs `k c + verify cost` steps and writes (1 - α^(k+1)) / (1 - α) characters, where
# plain decoding writes one character per step, so
#
#     speed-up = (1 - α^(k+1)) / ((1 - α) (k c + verify cost))
#
# ## Your turn: the expected speed-up
#
# Write `expected_speedup(alpha, k, c, verify_cost=1.0)`. Use your `expected_tokens_per_pass`.

# %% your turn: speculative.expected_speedup
# source only: the reference answer (the notebooks put its code here instead)
from speculative import expected_speedup

# %%
check("2c")

# %% [markdown]
# ### c and the verify cost on this machine
#
# `machine.pass_time` times one cached forward pass (after 64 cached characters) on one torch
# thread and returns the median. A draft step over a big-model step is `c`; a pass over `k + 1`
# characters over a pass over one is the verify cost. Another program on the same cores slows
# some moments more than others, so the cell times every kind of pass in turn, in blocks of
# ten passes, and keeps the median of the ratios of blocks timed side by side: a slow moment
# hits both sides of a ratio. It says when it saw the machine busy all the same.

# %%
BLOCKS = 2 if QUICK else 10
kinds = {("big", t): (target, t) for t in range(1, 8)} | {(n, 1): (models[n], 1) for n in DRAFTS}
times = {kind: [] for kind in kinds}
with machine.Busy() as busy:
    for _ in range(BLOCKS):
        for kind, (model, tokens) in kinds.items():
            times[kind].append(machine.pass_time(model, tokens, repeats=10))
steps = np.array(times["big", 1])                        # one-character steps, block by block
one = float(np.median(steps))
verify_cost = {k: float(np.median(times["big", k + 1] / steps)) for k in range(1, 7)}
c = {name: float(np.median(times[name, 1] / steps)) for name in DRAFTS}
print(f"one step of the big model: {one * 1e6:.0f} us")
print("verify cost, a pass over k + 1 characters in one-character steps: "
      + ", ".join(f"k={k}: {v:.2f}" for k, v in verify_cost.items()))
size = {name: models[name].num_params() / target.num_params() for name in DRAFTS}
for name, label in DRAFTS.items():
    print(f"c, {label}: {c[name]:.3f} of a big-model step, for {size[name]:.1%} of its parameters")
busy_note = busy.note()   # claims about the clock are checked on a quiet machine only
print(busy_note or "(the machine was quiet while timing)")
common.claim(verify_cost[4] > 0.8, "five characters are not cheaper than 0.8 of one", busy_note)
common.claim(1 < verify_cost[4] < (K + 1) / 2, "five characters cost more than one, far less than "
             "five", busy_note)
common.claim(c["draft"] > 3 * size["draft"], "a draft step costs far more than its size suggests",
             busy_note)
common.claim(c["distilled"] < 2 * c["draft"], "a wider draft step costs little more", busy_note)

# %% [markdown]
# Compare c with the share of parameters: on a CPU a step of a tiny model is mostly fixed
# overhead (torch's per-call work; notebook 6 takes it apart), so the lesson's draft costs far
# more than its size suggests, and the wider distilled draft little more than the narrow one.
# The same overhead puts the verify cost above 1 but far below `k + 1`.
#
# Now the prediction against the clock. For each draft and a few k, `machine.paired_times`
# times plain and speculative decoding of the same prompts alternately (so that a change in the
# machine's speed hits both) and gives the median ratio. Next to it: the formula with the greedy
# agreement, measured `c` and verify cost; the same cost model fed with the characters per pass
# the run really achieved; and a picture: the formula for k = 1 to 6 (lines), the measured
# speed-ups (dots). Above 1, speculation wins.

# %%
PAIRS, timed_prompts = (2, prompts[:2]) if QUICK else (3, prompts[:4])
results, spreads = {}, []
with machine.Busy() as busy:
    for name, label in DRAFTS.items():
        print(f"{label}\n  {'k':>2} {'measured':>9} {'predicted':>10} {'from run':>9} "
              f"{'chars/pass':>11}")
        for k in [1, 2, 4, 6]:
            stats = sd.Stats(k=k)
            for prompt in timed_prompts:
                stats.add(sd.speculative_generate(target, models[name], prompt, N_NEW, k=k)[1])
            _, _, ratio, ratios = machine.paired_times(
                lambda: [sd.generate(target, p, N_NEW) for p in timed_prompts],
                lambda: [sd.speculative_generate(target, models[name], p, N_NEW, k=k)
                         for p in timed_prompts], PAIRS)
            spreads.append(machine.spread(ratios))
            predicted = sd.expected_speedup(agreement[name]["greedy"], k, c[name], verify_cost[k])
            from_run = stats.tokens_per_pass / (k * c[name] + verify_cost[k])
            results[name, k] = (ratio, predicted, from_run, stats.tokens_per_pass)
            print(f"  {k:>2} {ratio:>8.2f}x {predicted:>9.2f}x {from_run:>8.2f}x "
                  f"{stats.tokens_per_pass:>11.2f}")
            assert ratio > 0 and predicted > 0
print(busy.note(spreads) or "(the machine was quiet while timing)")

fig, ax = plt.subplots(figsize=(8, 4.2))
for name, label in DRAFTS.items():
    alpha = agreement[name]["greedy"]
    line, = ax.plot(list(verify_cost), [sd.expected_speedup(alpha, k, c[name], v)
                                        for k, v in verify_cost.items()], label=f"{label}: formula")
    measured = [(k, r[0]) for (n, k), r in results.items() if n == name]
    ax.scatter(*zip(*measured), color=line.get_color(), zorder=3, label=f"{label}: measured")
ax.axhline(1, color="grey", lw=0.8, ls="--")
ax.set(xlabel="k (guesses per round)", ylabel="speed-up over plain decoding",
       title="Predicted (measured alpha, c, verify cost) and measured speed-up")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# What to read in all this, written from this run's own figures. They differ from run to run,
# more so on a busy machine, where a slow moment moves the measured and predicted figures apart
# (`python -m harness.benchmark` times more prompts). The ceiling is the formula's speed-up with
# this machine's costs if every guess were kept; notebook 5 finds the α where it crosses 1. For
# a GPU the cell assumes c = 0.05 and verify cost 1, typical of a big model there.

# %%
for name, label in DRAFTS.items():
    measured, predicted, from_run, per_pass = results[name, K]
    guessing, checking, alpha = K * c[name], verify_cost[K], agreement[name]["greedy"]
    ceiling = sd.expected_speedup(1.0, K, c[name], checking)
    print(f"- {label} {'pays' if measured > 1 else 'does not pay'} on this machine at k = {K}: "
          f"{measured:.2f}x measured. Its {K} guesses cost {guessing:.2f} big-model steps "
          f"(c = {c[name]:.2f}), the check {checking:.2f}: by these costs a round wrote "
          f"{per_pass:.2f} characters in the time plain decoding writes "
          f"{guessing + checking:.2f}.\n"
          f"  The formula was {'optimistic' if predicted > measured else 'pessimistic'}: "
          f"{predicted:.2f}x from alpha, {from_run:.2f}x from the run's characters per pass.\n"
          f"  With every guess kept it would reach {ceiling:.2f}x on this machine; with its "
          f"greedy agreement {alpha:.3f}, c = 0.05 and verify cost 1 (a GPU): "
          f"{sd.expected_speedup(alpha, K, 0.05):.2f}x.")
    assert sd.expected_speedup(alpha, K, 0.05) > 1

# %% [markdown]
# Why: a round that writes fewer characters than plain decoding writes in the same time does
# not pay. (The lesson saw "no wall-clock gain" for its draft: its loop had no KV cache, so each
# draft step recomputed the whole context and cost more than ours.) The distilled draft
# is right far more often for a step that costs less than twice as much (checked above): width
# is nearly free on a CPU, agreement counts. Where the formula is optimistic, the "from run"
# figure explains part of the gap (misses come in runs); the rest is time the formula does not
# count, such as the Python around each round. Where it is pessimistic, suspect the machine: c
# and the verify cost were timed at another moment than the decoding.
#
# ## The paper's numbers, recomputed
#
# Leviathan, Kalman and Matias (2023), who introduced speculative decoding, derive the same two
# formulas (γ for our k; the speed-up is their Theorem 3.8). Below: the six speed-ups this
# project's tests quote as their Table 1 (c = 0; asserted: if your copy of the paper differs,
# correct this cell and `tests/test_speculative.py`); a grid for drafts at 1% and 10% of a
# big-model step (verify cost 1), each row's best k starred (`sd.best_k` agrees); and the best
# k with this machine's own costs.

# %%
quoted = {(0.6, 2): 1.96, (0.7, 3): 2.53, (0.8, 2): 2.44, (0.8, 5): 3.69, (0.9, 2): 2.71,
          (0.9, 10): 6.86}    # tests/test_speculative.py, as Leviathan et al.'s Table 1
print("\n".join(f"alpha {a}, k {k:>2}, c 0: {sd.expected_speedup(a, k, 0.0):.2f}x (quoted "
                f"{want})" for (a, k), want in quoted.items()))
assert all(round(sd.expected_speedup(a, k, 0.0), 2) == want for (a, k), want in quoted.items())
best = {}
for cost in [0.01, 0.1]:
    print(f"\nc = {cost}:\nalpha " + "".join(f"{'k=' + str(k):>7}" for k in range(1, 11)))
    for alpha in [0.5, 0.6, 0.7, 0.8, 0.9]:
        row = [sd.expected_speedup(alpha, k, cost) for k in range(1, 11)]
        best[cost, alpha] = sd.best_k(alpha, cost, k_max=10)
        assert best[cost, alpha] == 1 + int(np.argmax(row))
        print(f"{alpha:5} " + "".join(f"{v:6.2f}{'*' if k == best[cost, alpha] else ' '}"
                                      for k, v in enumerate(row, 1)))
assert [best[0.01, a] for a in (0.5, 0.6, 0.7, 0.8, 0.9)] == [5, 7, 9, 10, 10]
assert [best[0.1, a] for a in (0.5, 0.6, 0.7, 0.8, 0.9)] == [2, 3, 4, 6, 10]
print()
for name, label in DRAFTS.items():
    here = max(verify_cost, key=lambda k: sd.expected_speedup(
        agreement[name]["greedy"], k, c[name], verify_cost[k]))
    fastest = max((k for n, k in results if n == name), key=lambda k: results[name, k][0])
    print(f"this machine, {label}: the formula's best k {here} (of 1 to 6); measured, "
          f"the fastest of k = 1, 2, 4, 6 was {fastest}")

# %% [markdown]
# With a draft at 1% of a step, long drafts pay: the best k climbs from 5 at α = 0.5 to the
# grid's edge, 10, from α = 0.8 on. At 10% of a step every guess has a price, and the best k
# stays between 2 and 6 up to α = 0.8. The larger c is and the faster the verify cost grows with
# k, the smaller the best k: compare the last lines with this machine's c printed above.
#
# ## What to remember
#
# - α is the chance a guess is kept: the greedy agreement for greedy decoding, the overlap
#   sum min(p, q) for sampling. Measure the one that matches how you decode.
# - A pass writes 1 + α + ... + α^k = (1 - α^(k+1)) / (1 - α) characters if guesses are
#   independent: 3.3616 for α = 0.8, k = 4, never more than 1 / (1 - α).
# - Real greedy runs write fewer, because misses come in runs.
# - The share of guesses kept is (characters per pass - 1) / k, not α: "a quarter kept" and
#   "2 per pass" are the same fact.
# - By the clock, a round costs k c + verify cost big-model steps. On a GPU c is small and the
#   verify cost near 1; on a CPU with tiny models neither holds, and a draft must agree often
#   to pay.
