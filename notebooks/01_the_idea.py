# %% [markdown]
# # 1. The idea: a junior writer and a senior editor
#
# A language model writes one token at a time: to write the next character it runs a whole
# forward pass over the text so far, and only then can it start on the character after. The
# steps cannot run side by side: a big model's steps are expensive, and there are as many as
# there are characters.
#
# **Speculative decoding** puts a second, much smaller model next to the big one. Think of a
# junior writer and a senior editor. The junior (the *draft* model) quickly writes the next few
# characters, say `k = 4`. The senior (the *target*, our big model) then reads the text with
# all four guesses in **one** pass. A transformer predicts a next token at every position, so
# that one pass says what the senior would have written after each guess. The senior keeps
# the guesses from the left for as long as they are exactly what it would have written, and at
# the first one it disagrees with it writes its own character instead. If it agrees with all
# four, its prediction after the last one comes free: a bonus character.
#
# So one pass of the big model writes between 1 and `k + 1` characters, and greedy output is
# **exactly** what the big model writes alone: every character that survives is the big
# model's own choice. This notebook watches it happen with the lesson's models: a 4-layer
# character-level GPT trained on Shakespeare, and a 1-layer draft.
#
# Reading time: about 25 minutes. You write two small functions (the "your turn" cells); the
# cell after each checks your answer the way the course's grader does. Run the cells in order
# (Run All works too): a your-turn cell saves what you write into the project's file, which is
# where the rest of the course, and `make check`, take it from.

# %%
# Setup. The project's modules come from its environment (`make setup`; `make notebooks` opens
# Jupyter there). The models train on first use: a few minutes, with a progress bar.
import numpy as np
import torch
from IPython.display import HTML, display

import gpt
import speculative as sd
from harness import common
from classroom.yourturn import check
from exercises import ex1_watch, player
from lessonkit import machine

models = common.notebook_models(["big", "draft"])
target, draft = models["big"], models["draft"]
print(f"big model: {target.num_params():,} parameters; draft: {draft.num_params():,}")

# %% [markdown]
# ## Your turn: judge a round
#
# Before watching it run, write its heart. Greedy verification is small: given the draft's
# guesses and the big model's own choice at each of those positions (and one more, after the
# last guess), return how many guesses are kept and which token the big model adds. Write the
# body of `greedy_verdict` below and run the cell; the cell after it runs the course's checks
# on it.
#
# Running a your-turn cell **saves your function into the project's file**
# (`numpy_speculative.py` here, the file `make check` grades), in place of its stub. From then
# on the project uses it: every run below keeps guesses with your `greedy_verdict`, and so do
# the later notebooks. A cell that needs a part you have not written yet says so in one line
# and the notebook goes on.

# %% your turn: numpy_speculative.greedy_verdict
# source only: the reference answer (the notebooks put its code here instead)
from numpy_speculative import greedy_verdict

# %%
check("1a")

# %% [markdown]
# ## Plain decoding, and the same text from speculative decoding
#
# `sd.generate` is plain decoding: one pass of the big model per character (with a KV cache, so
# that each pass only processes the new character). `sd.speculative_generate` takes the draft
# too, and returns the text and what happened. Greedy decoding (temperature 0) always takes the
# most likely character, so the two must agree character for character.

# %%
prompt = torch.tensor([gpt.encode("ROMEO:\n")])
plain = sd.generate(target, prompt, 120)
fast, stats = sd.speculative_generate(target, draft, prompt, 120, k=4)
print(gpt.decode(fast[0]))
assert torch.equal(plain, fast), "speculative decoding must not change the big model's text"
print(f"\n{stats.new_tokens} characters from {stats.target_passes} passes of the big model: "
      f"{stats.tokens_per_pass:.2f} per pass; {stats.acceptance_rate:.0%} of the guesses kept")
assert 1 <= stats.tokens_per_pass <= 5

# %% [markdown]
# Fewer passes of the big model, the same text. Is it faster? Time both, alternately, so that
# a change in the machine's speed hits both alike (`machine.paired_times`, which also uses one
# torch thread: a step this small is too little to share between threads).

# %%
with machine.Busy() as busy:
    plain_s, spec_s, ratio, ratios = machine.paired_times(
        lambda: sd.generate(target, prompt, 120),
        lambda: sd.speculative_generate(target, draft, prompt, 120, k=4), 5)
print(f"plain {plain_s * 1e3:.0f} ms, speculative {spec_s * 1e3:.0f} ms: {ratio:.2f}x")
print(busy.note([machine.spread(ratios)]) or "(the machine was quiet while timing)")

# %% [markdown]
# On a laptop CPU this is usually no faster, and often slower, with the lesson's draft: the
# lesson's own run saw no wall-clock gain either. Two reasons, both measured in notebooks 2 and 6. The draft's four
# guesses are not free (each is a pass of the small model), and on a CPU a pass of the big
# model over five characters costs more than a pass over one. Speculation was made for GPUs,
# where a pass of a big model is slow because its weights must be read from memory, and
# reading them once serves five positions as well as one. Here is that cost on this machine:

# %%

with machine.Busy() as busy:
    one, five = machine.pass_time(target, 1, repeats=100), machine.pass_time(target, 5, repeats=100)
print(f"one character: {one * 1e6:.0f} us; five: {five * 1e6:.0f} us, "
      f"= {five / one:.2f} one-character passes (a memory-bound GPU: about 1)")
busy_note = busy.note()   # a claim about the clock is checked on a quiet machine only
print(busy_note or "(the machine was quiet while timing)")
common.claim(five > 0.8 * one, "five characters cost more than 0.8 of a one-character pass",
             busy_note)

# %% [markdown]
# ### Why the greedy text repeats itself
#
# The greedy text above loops. Nothing is broken: greedy decoding
# always takes the single most likely character, and once the text enters one of the small
# model's favourite phrases the most likely continuation leads back to its start, to the same
# context, so to the same choices. Sampling (temperature 0.8 below) draws each character from
# the model's distribution instead, and the loop breaks. We check speculative decoding with
# greedy output because it is deterministic; notebook 4 shows that sampling keeps the big
# model's distribution exactly.

# %%
sampled = sd.generate(target, prompt, 120, temperature=0.8,
                      generator=torch.Generator().manual_seed(0))
print("greedy: ", repr(gpt.decode(plain[0])[:100]))
print("sampled:", repr(gpt.decode(sampled[0])[:100]))
assert not torch.equal(sampled, plain)

# %% [markdown]
# ## One round at a time
#
# `stats.trace` records every round: the draft's guesses, how many the big model kept, and the
# character it added. `ex1_watch.replay` turns that into rounds we can look at; here is the
# text with every character on the colour of who wrote it: green, a guess of the draft that
# the big model kept; yellow, the big model's correction at the first rejected guess; blue,
# the bonus character after a round where all guesses were kept.

# %%
rounds = ex1_watch.replay(prompt[0].tolist(), stats.trace)
display(HTML(ex1_watch.coloured_text("ROMEO:\n", rounds)))
for i, r in enumerate(rounds[:6]):
    marks = [f"{ex1_watch.show(g)!r}:{v}" for g, v in zip(r["guesses"], r["verdicts"])]
    print(f"round {i + 1}: " + " ".join(marks) + f" | big model writes {r['target']!r} ({r['kind']})")
assert sum(r["kept"] + 1 for r in rounds) == stats.new_tokens

# %% [markdown]
# Guesses after the first rejected one are **thrown away**, never checked: each was written by
# the draft from a context that contained the rejected guess, so it answers a question the big
# model is not asking. This is where the junior/senior picture breaks: a human editor would fix
# one wrong word and keep the rest of the draft.
#
# How many characters did each round write? One bar per round; blue bars are rounds where all
# four guesses were kept (five characters for one pass).

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(9, 2.8))
ax.bar(range(1, len(rounds) + 1), [r["kept"] + 1 for r in rounds],
       color=["#58b4f0" if r["kind"] == "bonus" else "#f5b942" for r in rounds])
ax.set(xlabel="round", ylabel="characters written", ylim=(0, 5.5),
       title="Characters per pass of the big model (blue: every guess kept)")
plt.show()

# %% [markdown]
# ## The run as an animation
#
# The same run, round by round: the draft's guesses appear, the big model's verdict colours
# them, then the kept guesses and the big model's own character land. Play, pause, or step
# forward and back (the arrow keys work too). Exercise 1 (`python -m exercises.ex1_watch`)
# writes the same page to `results/ex1_player.html`.

# %%
display(player.show(player.page("ROMEO:\n", rounds[:25], "The lesson's draft guesses, "
                                "the big model checks (k = 4, greedy)")))

# %% [markdown]
# ## Your turn: the text a run writes
#
# Given the prompt and every round (the draft's guesses, the big model's choices), what text
# comes out? Write `replay`; it may call `greedy_verdict`.

# %% your turn: numpy_speculative.replay
# source only: the reference answer (the notebooks put its code here instead)
from numpy_speculative import replay

# %%
check("1b")

# %% [markdown]
# With your `replay`, the rounds of the run at the top rebuild its text exactly. The trace keeps
# each round's guesses, how many were kept and the token the big model added; the big model's
# choices at the kept positions were the guesses themselves, and after the added token nothing
# was asked of it (any token will do there).

# %%
import numpy_speculative as ns

recorded = [(list(proposed), list(proposed[:kept]) + [token] + [0] * (len(proposed) - kept))
            for proposed, kept, token in stats.trace]
assert ns.replay(prompt[0].tolist(), recorded) == fast[0].tolist(), "replay differs from the run"
print(f"{len(recorded)} rounds replayed: the run's {stats.new_tokens} characters, exactly")

# %% [markdown]
# ## What to remember
#
# - One pass of the big model checks all `k` guesses; it writes 1 to `k + 1` characters.
# - Greedy output is the big model's own, whatever the draft does: a bad draft costs speed,
#   never correctness.
# - Everything after the first rejected guess is thrown away.
# - Whether it is faster depends on how often the draft is right and what its guesses and the
#   check cost. Notebook 2 turns that into numbers.
