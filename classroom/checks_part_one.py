"""
classroom/checks_part_one.py: the checks of exercises 1, 2, 4 and 5 (exercise 3's:
checks_exercise_3.py).

Every expected value is ctx.ref's (checks.py); what is public here is how cases are drawn, the
properties measured (passes counted, distributions, draws) and the hints.
"""

import math
import time

import numpy as np

from classroom.checks import (
    Fail,
    FakeGPU,
    LETTERS,
    Skip,
    a_float,
    check,
    chi_square_fails,
    fix_first,
    pair_of_ints,
    text,
)

# ----------------------------------------------------------------------------------------------
# Exercise 1: a greedy round


def random_round(rng, k=None):
    k = k or int(rng.integers(1, 9))
    choices = rng.integers(0, 3, k + 1).tolist()
    draft_tokens = rng.integers(0, 3, k).tolist()
    agree = int(rng.integers(0, k + 1))            # long agreements happen: copy a prefix
    draft_tokens[:agree] = choices[:agree]
    return draft_tokens, choices


def explain_round(draft_tokens, choices, got, want):
    shown = f"draft guessed {text(draft_tokens)!r}, the big model chose {text(choices)!r}"
    if got[0] > want[0]:
        i = want[0]
        return (shown, f"draft token {i + 1} was kept although the big model chose "
                       f"{LETTERS[choices[i]]!r} there: compare with the big model's choice at "
                       f"the same position")
    if got[0] < want[0]:
        i = got[0]
        return (shown, f"draft token {i + 1} ({LETTERS[draft_tokens[i]]!r}) equals the big "
                       f"model's choice there, so it is kept: keep guesses while they match")
    return (shown, f"after {want[0]} kept guesses the big model adds its own choice at the same "
                   f"position ({LETTERS[want[1]]!r}): the correction, or the bonus when all "
                   f"were kept")


def judge(ctx, greedy_verdict, draft_tokens, choices, case=""):
    want = tuple(ctx.ref.round_verdict(draft_tokens, choices))
    got = pair_of_ints(greedy_verdict(list(draft_tokens), list(choices)), "greedy_verdict")
    if got != want:
        shown, hint = explain_round(draft_tokens, choices, got, want)
        raise Fail(f"{case}(kept, token) = ({want[0]}, {LETTERS[want[1]]!r}) when {shown}",
                   f"({got[0]}, {text([got[1]])!r})", hint)


@check("1a", 2, torch_free=True)
def verdict_on_random_rounds(ctx):
    greedy_verdict = ctx.student("numpy_speculative").greedy_verdict
    for _ in range(300):
        judge(ctx, greedy_verdict, *random_round(ctx.rng))


@check("1a", 1, torch_free=True)
def verdict_at_the_edges(ctx):
    greedy_verdict = ctx.student("numpy_speculative").greedy_verdict
    for draft_tokens, choices, case in (([1, 2, 0], [1, 2, 0, 2], "every guess kept: the bonus"),
                                        ([1, 2, 0], [2, 2, 0, 1], "the first guess rejected"),
                                        ([], [1], "no guesses (the last token of a run)"),
                                        ([0], [0, 1], "one guess, kept")):
        judge(ctx, greedy_verdict, draft_tokens, choices, f"{case}: ")


VERDICT_CHECKS = (verdict_on_random_rounds, verdict_at_the_edges)   # 1a's, for fix_first


@check("1b", 2, torch_free=True)
def replay_writes_the_text(ctx):
    replay = ctx.student("numpy_speculative").replay
    for _ in range(50):
        prompt = ctx.rng.integers(0, 3, 3).tolist()
        rounds = [random_round(ctx.rng) for _ in range(int(ctx.rng.integers(1, 6)))]
        want = ctx.ref.replay(prompt, rounds)
        got = replay(list(prompt), [(list(d), list(c)) for d, c in rounds])
        if not isinstance(got, (list, tuple)) or list(got) != want:
            raise Fail(f"{text(want)!r} from prompt {text(prompt)!r} and {len(rounds)} rounds",
                       repr(text(got)) if isinstance(got, (list, tuple)) else repr(got),
                       fix_first(ctx, "greedy_verdict", VERDICT_CHECKS, "each round adds its "
                                 "kept guesses, then the big model's own token"))


# ----------------------------------------------------------------------------------------------
# Exercise 2: the numbers


@check("2a", 2)
def tokens_per_pass_is_the_sum(ctx):
    f = ctx.student("speculative").expected_tokens_per_pass
    for alpha, k in [(0.8, 4), (0.0, 3), (0.5, 1)] + [
            (float(ctx.rng.random()), int(ctx.rng.integers(1, 13))) for _ in range(200)]:
        got, want = a_float(f(alpha, k), "expected_tokens_per_pass"), ctx.ref.tokens_per_pass(
            alpha, k)
        if not abs(got - want) <= 1e-9 * want:
            raise Fail(f"1 + alpha + ... + alpha^k = {want:.6f} for alpha {alpha:.4f}, k {k}",
                       f"{got:.6f}", "a round always writes the target's token (alpha^0), plus "
                       "draft token i with probability alpha^i")


@check("2a", 1)
def tokens_per_pass_limits(ctx):
    f = ctx.student("speculative").expected_tokens_per_pass
    for k in (1, 4, 9):
        got = a_float(f(1.0, k), "expected_tokens_per_pass")
        if abs(got - (k + 1)) > 1e-9:
            raise Fail(f"k + 1 = {k + 1} tokens when every guess is kept (alpha = 1)", f"{got}",
                       "the closed form divides 0 by 0 at alpha = 1: treat it apart")
        if abs(a_float(f(1 - 1e-9, k), "expected_tokens_per_pass") - (k + 1)) > 1e-5:
            raise Fail(f"close to {k + 1} for alpha just below 1", f"{f(1 - 1e-9, k)}")
    grid = np.linspace(0, 0.99, 50)
    for k in (1, 4):
        values = [a_float(f(float(a), k), "expected_tokens_per_pass") for a in grid]
        if any(b <= a for a, b in zip(values, values[1:])):
            raise Fail("tokens per pass grows with alpha", "it does not", "")
    if not all(f(0.7, k + 1) > f(0.7, k) for k in range(1, 8)):
        raise Fail("tokens per pass grows with k", "it does not", "")


TOKENS_CHECKS = (tokens_per_pass_is_the_sum, tokens_per_pass_limits)   # 2a's, for fix_first


def simulates_rounds(ctx, simulate, alpha, k, runs, salt, law=True):
    """Fail unless simulate is a simulation: `runs` runs of one round each (a fresh rng each)
    write a whole number of tokens, 1 to k + 1 (the closed form plus noise does not), and (law)
    as often as the process writes them, by chi-square."""
    counts = np.zeros(k + 1)
    for run in range(runs):
        result = simulate(alpha, k, 1, ctx.worker_rng(salt + run))
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise Fail("simulate returns (mean, standard error)", repr(result)[:80])
        tokens = a_float(result[0], "simulate")
        if tokens != round(tokens) or not 1 <= tokens <= k + 1:
            raise Fail(f"a simulation of one round (alpha {alpha:.3f}, k {k}) writes a whole "
                       f"number of tokens, 1 to {k + 1}", f"{tokens!r}",
                       "simulate each round: keep guesses while rng.random() < alpha, stop at "
                       "the first rejection, add the target's own token; return the mean of "
                       "the rounds' tokens (the formula plus noise is not a simulation)")
        counts[int(tokens) - 1] += 1
    want = np.array(ctx.ref.round_stats(alpha, k)["law"])
    if law and chi_square_fails(counts, want):
        n = int(np.abs(counts / runs - want).argmax())
        raise Fail(f"the tokens of one round as often as the process writes them (alpha "
                   f"{alpha:.3f}, k {k})", f"{n + 1} tokens in {counts[n] / runs:.3f} "
                   f"of {runs} one-round runs; the process: {want[n]:.3f}",
                   "each round on its own: keep draft tokens up to the first rejection (each "
                   "accepted with probability alpha), then the target's own token")


@check("2b", 2)
def simulation_agrees_with_the_formula(ctx):
    simulate = ctx.student("exercises.ex2_derive").simulate
    for i in range(4):
        alpha, k, rounds = float(ctx.rng.uniform(0.1, 0.95)), int(ctx.rng.integers(1, 9)), 20_000
        result = simulate(alpha, k, rounds, ctx.worker_rng(i))
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise Fail("simulate returns (mean, standard error)", repr(result))
        mean, se = (a_float(v, "simulate") for v in result)
        stats = ctx.ref.round_stats(alpha, k)
        want, sd, every = stats["mean"], stats["sd"], stats["every guess"]
        if abs(mean - want) > 5 * sd / math.sqrt(rounds):
            counts_every = abs(mean - every) <= 5 * math.sqrt(k * alpha * (1 - alpha) / rounds)
            raise Fail(f"a mean within 5 standard errors of {want:.4f} (alpha {alpha:.3f}, "
                       f"k {k})", f"{mean:.4f}",
                       f"that is {every:.4f}, what counting every accepted guess gives; a "
                       "round keeps only the guesses before the first rejection (the leading "
                       "run), plus one token of the target's own" if counts_every else
                       "a round stops at the first rejection; it always writes one token of "
                       "the target's own")
        if not abs(se - sd / math.sqrt(rounds)) < 0.15 * sd / math.sqrt(rounds):
            raise Fail(f"standard error about {sd / math.sqrt(rounds):.4f} (the spread of tokens "
                       f"per round over the square root of {rounds:,} rounds)", f"{se:.4f}",
                       "std(tokens) / sqrt(rounds)")
        if i < 2:                          # the mean is right: is it a simulation's?
            simulates_rounds(ctx, simulate, alpha, k, 400, 1000 * (i + 1))


@check("2b", 1)
def simulation_draws_from_the_given_rng(ctx):
    simulate = ctx.student("exercises.ex2_derive").simulate
    simulates_rounds(ctx, simulate, 0.6, 4, 20, 100, law=False)   # whole rounds, then the rng
    same = [simulate(0.6, 4, 2000, np.random.default_rng(7))[0] for _ in range(2)]
    other = [simulate(0.6, 4, 2000, np.random.default_rng(s))[0] for s in (8, 9, 10)]
    if same[0] != same[1] or len(set(map(float, other + same[:1]))) < 3:
        raise Fail("the same rng seed gives the same result, other seeds other results",
                   f"seed 7 twice: {same}; seeds 8-10: {other}",
                   "draw every random number from the rng argument; never reseed")


def over_the_cost(ctx, got, alpha, k, cost):
    """True when `got`, the student's expected_speedup, is the student's own
    expected_tokens_per_pass(alpha, k) over the right cost: 2c calls 2a, so 2c is as wrong as
    2a is. (Graded, 2a is the grader's reference and this is False.)"""
    try:
        tokens = a_float(ctx.student("speculative").expected_tokens_per_pass(alpha, k), "")
    except Exception:  # noqa: BLE001 (any failure of the student's 2a: no diagnosis)
        return False
    return abs(got - tokens / cost) <= 1e-9 * abs(got)


@check("2c", 2)
def speedup_is_tokens_over_cost(ctx):
    f = ctx.student("speculative").expected_speedup
    for _ in range(200):
        alpha, k = float(ctx.rng.random()), int(ctx.rng.integers(1, 11))
        c, verify_cost = float(ctx.rng.uniform(0, 0.6)), float(ctx.rng.choice([1.0, 1.5, 2.0]))
        want = ctx.ref.speedup(alpha, k, c, verify_cost)
        got = a_float(f(alpha, k, c, verify_cost), "expected_speedup")
        if abs(got - want) > 1e-9 * want:
            hint = ("a round costs k draft steps of c each plus one verification pass of "
                    "verify_cost target steps")
            if over_the_cost(ctx, got, alpha, k, k * c + verify_cost):
                hint = fix_first(ctx, "expected_tokens_per_pass", TOKENS_CHECKS, "the cost, "
                                 "k c + verify_cost, is right", "expected_speedup calls")
            raise Fail(f"{want:.6f} for alpha {alpha:.3f}, k {k}, c {c:.3f}, verify cost "
                       f"{verify_cost}", f"{got:.6f}", hint)
        if verify_cost == 1.0 and abs(a_float(f(alpha, k, c), "expected_speedup") - want) > 1e-9:
            raise Fail("verify_cost defaults to 1 (the lesson's formula)", "another default")


# ----------------------------------------------------------------------------------------------
# Exercise 4: break


@check("4a", 2)
def agreement_from_logits(ctx):
    sd = ctx.student("speculative")
    for temperature, top_k in ((1.0, None), (0.7, None), (1.0, 3)):
        target = ctx.rng.normal(size=(4, 9, 8)) * 2
        draft = target + ctx.rng.normal(size=target.shape) * 1.5
        result = sd.agreement_of(target, draft, temperature=temperature, top_k=top_k)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise Fail("agreement_of returns (alpha, greedy agreement)", repr(result)[:80])
        alpha, agree = (a_float(v, "agreement_of") for v in result)
        want_alpha, want_agree = ctx.ref.agreement(target, draft, temperature, top_k)
        if abs(alpha - want_alpha) > 1e-6:
            raise Fail(f"alpha = mean over positions of sum_x min(target(x), draft(x)) = "
                       f"{want_alpha:.6f} (temperature {temperature}, top_k {top_k})",
                       f"{alpha:.6f}", "both distributions warped as decoding would; the sum "
                       "runs over the vocabulary, the mean over every position")
        if abs(agree - want_agree) > 1e-12:
            raise Fail(f"greedy agreement {want_agree:.4f}", f"{agree:.4f}",
                       "the fraction of positions where both argmaxes are the same")


@check("4a", 1)
def agreement_at_temperature_zero(ctx):
    sd = ctx.student("speculative")
    target = ctx.rng.normal(size=(3, 7, 8))
    draft = target + ctx.rng.normal(size=target.shape)
    alpha, agree = (a_float(v, "agreement_of") for v in
                    sd.agreement_of(target, draft, temperature=0.0))
    if abs(alpha - agree) > 1e-12:
        raise Fail("at temperature 0 alpha equals the greedy agreement (both distributions are "
                   "one-hot)", f"alpha {alpha:.4f}, agreement {agree:.4f}",
                   "warp the logits with the temperature before comparing distributions")


@check("4b", 2)
def break_even_gives_speedup_one(ctx):
    f = ctx.student("speculative").break_even_alpha
    for _ in range(60):
        k, c = int(ctx.rng.integers(1, 9)), float(ctx.rng.uniform(0.01, 0.5))
        verify_cost = float(ctx.rng.choice([1.0, 1.3]))
        want = ctx.ref.break_even(k, c, verify_cost)
        if math.isnan(want):                   # no alpha helps: the other check's case
            continue
        alpha = a_float(f(k, c, verify_cost), "break_even_alpha")
        at_one = ctx.ref.break_even(k, c, 1.0)         # (asked always: a student's check
        if not abs(alpha - want) <= 1e-6:              # reads it from what the build recorded)
            ignored = verify_cost != 1.0 and abs(alpha - at_one) <= 1e-6
            raise Fail(f"the alpha where the speed-up is exactly 1, within 1e-6: {want:.7f} "
                       f"(k {k}, c {c:.3f}, verify cost {verify_cost})", f"{alpha!r}",
                       "that is the break-even point for a verify cost of 1: break_even_alpha "
                       "ignores verify_cost; a round costs k c + verify_cost target steps"
                       if ignored else "the speed-up grows with alpha: bisect between 0 and 1 "
                       "until the interval is tiny (a 0.01 grid is not precise enough)")


@check("4b", 1)
def break_even_lesson_values_and_hopeless_costs(ctx):
    f = ctx.student("speculative").break_even_alpha
    for c, want in ((0.2, 0.4553), (0.05, 0.1668)):
        got = a_float(f(4, c), "break_even_alpha")
        if round(got, 4) != want:
            raise Fail(f"{want} for k 4, c {c}", f"{got:.6f}", "")
    got = f(4, 1.5)
    if not (isinstance(got, float) and math.isnan(got)):
        raise Fail("nan when no alpha helps (k 4, c 1.5: a round costs 7 steps, it writes at "
                   "most 5 tokens)", repr(got), "return math.nan")


# ----------------------------------------------------------------------------------------------
# Exercise 5: GPU timing (on the CPU, with a simulated GPU)


class Counted:
    """A function to time: call i sleeps seconds[i] (the last entry for every call after)."""

    def __init__(self, *seconds):
        self.calls, self.seconds = 0, seconds

    def __call__(self):
        self.calls += 1
        time.sleep(self.seconds[min(self.calls, len(self.seconds)) - 1])


@check("5a", 2)
def timer_warms_up_and_takes_the_median(ctx):
    measure = ctx.student("exercises.ex5_gpu").timer("cpu")
    fn = Counted(0.06, 0.06, 0.06, 0.002)                    # three slow first calls
    seconds = a_float(measure(ctx.lend(fn), 5, warmup=3), "measure")
    if fn.calls != 8:
        raise Fail("3 warm-up calls and 5 timed ones: 8 calls of fn", f"{fn.calls}",
                   "run fn warmup times before timing it")
    if not 0.0015 < seconds < 0.02:
        raise Fail("about 2 ms, the time of a call after warm-up", f"{seconds * 1e3:.1f} ms",
                   "exclude the warm-up calls (they pay for caches and compilation) and "
                   "return seconds per call")
    fn = Counted(0.002)
    a_float(measure(ctx.lend(fn), 5), "measure")
    if fn.calls != 8:
        raise Fail("3 warm-up calls by default and 5 timed ones: 8 calls of fn", f"{fn.calls}",
                   "warmup defaults to 3: measure(fn, repeats, warmup=3)")
    outlier = Counted(0.003, 0.003, 0.003, 0.1, 0.003)       # the 2nd timed call is slow
    seconds = a_float(measure(ctx.lend(outlier), 5, warmup=2), "measure")
    if not 0.002 < seconds < 0.015:
        raise Fail("about 3 ms: the median of 5 calls of 3 ms, one of which took 100 ms",
                   f"{seconds * 1e3:.1f} ms", "return the median of the timed calls: one call "
                   "slowed by the machine moves the mean, not the median")
    times = [a_float(measure(ctx.lend(Counted(t)), 3, warmup=1), "measure")
             for t in (0.002, 0.01, 0.03)]
    if not times[0] < times[1] < times[2]:
        raise Fail("longer calls measure longer (2, 10, 30 ms)",
                   ", ".join(f"{t * 1e3:.1f} ms" for t in times), "")


@check("5a", 2)
def timer_waits_for_the_gpu(ctx):
    """timer("cuda") with a simulated GPU standing in for torch.cuda: its work, its clock and its
    queue live in the grader (helpers.FakeGPU), so what the timer did is measured here."""
    gpu = FakeGPU()
    with ctx.on_gpu(gpu):
        measure = ctx.student("exercises.ex5_gpu").timer("cuda")
        seconds = a_float(measure(ctx.lend(gpu.launch), 5, warmup=2), "measure")
        returned = time.perf_counter()
        if gpu.launches != 7:
            raise Fail("2 warm-up calls and 5 timed ones: 7 calls of fn", f"{gpu.launches}",
                       "run fn warmup times, then the timed calls")
        if gpu.busy_until > returned + 1e-3:
            raise Fail("measure returns after the work it timed has finished on the GPU",
                       f"{(gpu.busy_until - returned) * 1e3:.0f} ms of it still queued",
                       "kernels run asynchronously: call torch.cuda.synchronize() before "
                       "reading the clock, or synchronize the end event before elapsed_time")
        if not 0.015 < seconds < 0.06:
            raise Fail("about 20 ms: the work fn queued on the GPU, not the time to queue it",
                       f"{seconds * 1e3:.2f} ms", "kernels run asynchronously: call "
                       "torch.cuda.synchronize() before starting the clock and before reading "
                       "it, or record torch.cuda.Event pairs and synchronize before "
                       "elapsed_time")
        for _ in range(5):                     # five launches queued before measure is called
            gpu.launch()
        seconds = a_float(measure(ctx.lend(gpu.launch), 1, warmup=2), "measure")
    if not 0.015 < seconds < 0.06:
        raise Fail("about 20 ms for one timed call, with 100 ms of other work and the warm-up's "
                   "still queued on the GPU when measure was called", f"{seconds * 1e3:.1f} ms",
                   "wait for the GPU (torch.cuda.synchronize()) before starting the clock: work "
                   "queued earlier must not land in the measurement")


@check("5a", 0)
def timer_on_a_real_gpu(ctx):
    """With a CUDA GPU, the student's timer against CUDA events around the same work."""
    measured = ctx.helper("time_on_real_gpu", "exercises.ex5_gpu", "timer")
    if measured is None:
        raise Skip("no CUDA GPU here: this check runs where torch sees one")
    if not (isinstance(measured, (tuple, list)) and len(measured) == 2):
        raise Fail("measure returns seconds", repr(measured)[:80])
    want, got = a_float(measured[0], "CUDA events"), a_float(measured[1], "measure")
    if not 0.7 * want < got < 1.5 * want:
        raise Fail(f"about {want * 1e3:.2f} ms (CUDA events around the same work)",
                   f"{got * 1e3:.2f} ms", "synchronise before reading the clock")

