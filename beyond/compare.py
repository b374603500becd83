"""
beyond/compare.py: drafts against plain greedy decoding, on the same prompts, by the clock.

    table = compare.greedy_table(big, {"heads": heads_draft}, [4], prompts, 200)
    stats, speedup = table["heads", 4]

Every output is first checked to be plain decoding's, token for token; then plain and
speculative decoding are timed alternately (machine.paired_times), the speed-up the median of
the ratios, with the machine's load said beside each row (machine.Busy).
"""

import torch

import speculative as sd
from lessonkit import machine


def greedy_table(target, drafts, ks, prompts, new_tokens=200, repeats=3, log=print):
    """{(name, k): (sd.Stats of the run, speed-up against plain decoding)} for each drafter of
    `drafts` ({name: drafter}) and each k of `ks`, greedy, `new_tokens` after each prompt
    (a (1, T) token tensor); each row logged: guesses kept, characters per target pass (the big
    model's own token of every round counted, the "+1") and without it, the speed-up."""
    def plain():
        return [sd.generate(target, p, new_tokens) for p in prompts]
    want, table = plain(), {}
    for name, draft in drafts.items():
        for k in ks:
            def speculative(draft=draft, k=k):
                return [sd.speculative_generate(target, draft, p, new_tokens, k=k)
                        for p in prompts]
            stats = sd.Stats(k=k)
            for (out, run), expected in zip(speculative(), want):
                if not torch.equal(out, expected):
                    raise SystemExit(f"greedy output with {name} differs from plain decoding "
                                     f"(k = {k}): a bug, please report it")
                stats.add(run)
            with machine.Busy() as busy:
                plain_s, draft_s, speedup, ratios = machine.paired_times(plain, speculative,
                                                                         repeats)
            table[name, k] = stats, speedup
            log(f"{name:18s} k = {k}: kept {stats.kept_of_checked:.1%}, "
                f"{stats.tokens_per_pass:.2f} characters per pass "
                f"({stats.tokens_per_pass - 1:.2f} accepted), {speedup:.2f}x plain decoding "
                f"({len(prompts) * new_tokens / draft_s:,.0f} characters/s against plain "
                f"decoding's {len(prompts) * new_tokens / plain_s:,.0f}) "
                f"{busy.note([machine.spread(ratios)])}")
    return table
