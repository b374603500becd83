# %% [markdown]
# # 7. Drafts without a second model
#
# Part one drafted with a second, smaller GPT: trained, loaded, and run for every guess. Two
# ideas that serving systems use today need no second model. **Prompt lookup** copies: if the
# last few characters occurred earlier in the text, guess what followed them there. **Medusa
# heads** read the big model's own last hidden state, which the big model computes anyway
# while checking a round, and guess several characters ahead from it at once. You write the
# heart of each: the lookup (6a), and the heads' guesses and training loss (6b). Then we measure
# where each wins: on text that copies its prompt and on text that does not, against the
# distilled draft of notebook 5.
#
# Reading time: about 35 minutes. You write three small functions (the "your turn" cells); the
# cell after each checks your answer the way the course's grader does. The heads train on
# first use with your loss, once: the big model first writes the greedy text they learn, then
# they train (a few minutes on a 2-core CPU; each stage says when it starts and how long it took).

# %%
# Setup. The project's modules come from its environment (`make setup`; `make notebooks` opens
# Jupyter there). Missing models train on first use; it says how long at this machine's speed.
import matplotlib.pyplot as plt
import numpy as np
import torch

import speculative as sd
from beyond import compare, heads, ngram
from harness import common
from classroom.yourturn import check
from lessonkit import corpus

models = common.notebook_models(["big", "distilled"])
target, distilled = models["big"], models["distilled"]
args = common.notebook_args()
K, N_NEW = 4, 200   # guesses per round; characters written per prompt
PROMPTS = [torch.tensor([corpus.encode(p)]) for p in common.LESSON_PROMPTS]
print(f"big model: {target.num_params():,} parameters; distilled draft: "
      f"{distilled.num_params():,}")

# %% [markdown]
# ## Prompt lookup
#
# A summary quotes its article; an edited program repeats most of the old one; a chat answer
# restates the question. Wherever the output copies text that is already in the context, the
# cheapest draft of all is a search: take the last `n` tokens, find where they occurred before,
# and propose the `k` tokens that followed there. No weights, no pass: a guess costs a few
# list comparisons, so c, the draft's cost against a pass of the big model, is about 0.
#
# Which occurrence? The **longest** tail that occurred before says the most about what comes
# next, so try `n = longest` first and shorten it only when nothing matched; among several
# occurrences of the same tail, the **latest** is the likelier to be continued the same way.
# With `seq = "the cat sat; the c"` and `k = 3`: the last three characters `"e c"` occurred in
# `"the cat"`, so the proposal is `"at "`. No tail occurred before? Then propose nothing: the
# big model's pass still writes its one token, as plain decoding would.
#
# ## Your turn: prompt lookup (6a)
#
# Write `prompt_lookup(seq, k, longest, shortest)`: a list of up to `k` tokens (shorter where
# `seq` ends first; the continuation may run into the tail itself), or `[]`.

# %% your turn: beyond.ngram.prompt_lookup
# source only: the reference answer (the notebooks put its code here instead)
from beyond.ngram import prompt_lookup
from beyond.ngram import LOOKUP

# %%
check("6a")

# %% [markdown]
# The example above, with your function, as characters:

# %%
seq = corpus.encode("the cat sat; the c")
print(repr(corpus.decode(prompt_lookup(seq, 3, 3, 1))))
assert corpus.decode(prompt_lookup(seq, 3, 3, 1)) == "at "

# %% [markdown]
# ## Where copying pays
#
# Our big model has a 64-character window and 1,500 steps of training: it hardly ever copies
# its prompt (try it: repeat a line three times and it writes something else). To see the
# case prompt lookup is made for, we check guesses against a **stand-in target that writes a
# given text**: its logits put the text's next character on top. Greedy verification only
# asks for the target's top choice, so characters per pass come out exactly as they would for
# a model that writes that text. Two texts of held-out Shakespeare:
#
# - **a text that copies its prompt**: a passage, then the same passage again (as a summary
#   quotes, or an edit repeats);
# - **a text that does not**: a passage, then the passage that follows it in the play.
#
# The prompt is the first passage; the drafts guess the second.


# %%
class Writer(sd.Scorer):
    """A stand-in target whose greedy output is `text` (a list of tokens): at each position
    its logits put the text's next token on top."""

    def __init__(self, text, vocab_size):
        self.text, self.vocab_size = text, vocab_size

    def score(self, seqs, first):
        self.passes += 1
        out = np.full((1, len(seqs[0]) - first + 1, self.vocab_size), -1e9)   # (1, t, V)
        for i, pos in enumerate(range(first, len(seqs[0]) + 1)):
            out[0, i, self.text[pos]] = 0.0
        return out


held_out = corpus.decode(corpus.val_data)
starts = [held_out.find("\n\n", i * len(held_out) // 8) + 2 for i in range(8)]
passages = [(held_out[s:s + 120], held_out[s + 120:s + 240]) for s in starts]
lookup = ngram.PromptLookup(target.c.vocab_size, longest=8)
per_pass = {}
for case in ("copies its prompt", "does not"):
    for name, draft in (("prompt lookup", lookup), ("distilled draft", distilled)):
        stats = sd.Stats(k=K)
        for first, second in passages:
            prompt = corpus.encode(first)
            text = prompt + corpus.encode(first if case == "copies its prompt" else second)
            out, run = sd.speculative_generate(Writer(text, target.c.vocab_size), draft,
                                               torch.tensor([prompt]), 120, k=K)
            assert out[0].tolist() == text        # greedy: exactly the stand-in's text
            stats.add(run)
        per_pass[case, name] = stats.tokens_per_pass
        print(f"text that {case:17}: {name:15} {stats.tokens_per_pass:.2f} characters per pass")
assert per_pass["copies its prompt", "prompt lookup"] > 4       # any model: the text is given
common.claim(per_pass["does not", "prompt lookup"] < per_pass["does not", "distilled draft"],
             "on text that does not copy its prompt, prompt lookup writes less than the distilled "
             "draft")

# %% [markdown]
# A guess is **kept** when the big model, checking it, would have written the same character
# there, and so was every guess before it in the round; the first one it would not have written
# is replaced by its own choice, and the rest are dropped. On the copy, lookup keeps nearly every
# guess: almost `k + 1 = 5` characters per pass (each pass adds the big model's own token to the
# `k` guesses it kept: the "+1" of the formula).
# The distilled draft knows Shakespeare, not this passage: it keeps what it would have guessed
# anyway. On fresh text the roles swap: lookup finds few earlier matches worth following,
# while the draft's knowledge of the language still pays.
#
# ## On the big model's own text
#
# With the real target the draft's guesses are checked against what the big model itself
# writes. A small model's greedy text repeats itself ("the words of the words of the..."),
# so even there lookup finds matches, and each of its guesses costs nothing. We time it at the
# end, beside the next idea.
#
# ## Medusa heads: guesses from the big model's own state
#
# The big model's head reads the final hidden state at position `t` (after the last
# LayerNorm) and predicts token `t + 1`. That state holds more than the next character: Medusa
# (Cai et al., 2024) adds `h` small **heads** on it; head `i` guesses token `t + 1 + i`, the
# `i`-th after the next. Each head is a residual block and a projection to the vocabulary,
#
#     head_i(x) = (x + SiLU(x W_i + b_i)) U_i
#
# trained while the big model stays frozen. At decoding time the pass that checked the last
# round has already computed the state whose prediction was the last token, `seq[-1]`: heads
# `1..k` on that one state guess the `k` tokens after it, for the cost of `k` small products.
#
# **Training targets.** Head `i` at position `t` guesses token `t + 1 + i`. Its target is what
# the big model would write there: its own prediction for that token, made at position
# `t + i` (the big model at `t + i` predicts `t + i + 1`): which position of the big model's
# logits each head's guess at `t` is trained against is the whole of this part, so work it out
# on a window of four before you write it. Near the end of a window some heads have no target
# there, and those positions drop out. The heads learn from the big model's greedy continuations of training text
# (the text greedy decoding writes), with its top token as the target ("hard") or its whole
# distribution ("soft").
#
# ## Your turn: the heads' guesses and their loss (6b)
#
# Write `head_logits(state, fc_w, fc_b, head_w)` (every head on one state, in NumPy; the
# weights come transposed, so `x @ fc_w[i]`) and `heads_loss(guesses, logits, targets)` (in
# torch: the mean over heads of each head's cross-entropy, `F.cross_entropy` takes either a
# target class or a distribution).

# %% your turn: beyond.heads.heads_loss beyond.heads.head_logits
# source only: the reference answer (the notebooks put its code here instead)
from beyond.heads import heads_loss, head_logits
from beyond.heads import silu
import torch
from torch.nn import functional as F

# %%
check("6b")

# %% [markdown]
# Now the heads for our big model, trained with your loss (once: they are saved beside the
# checkpoints; `python -m beyond.heads` trains them from a terminal). Then, on held-out text,
# how often each head's top guess is the big model's own choice for its token:

# %%
folder = common.checkpoint_folder(args)
heads_draft = heads.load(target, folder)
per_head = heads.agreement(target, heads_draft.module, corpus.val_data)
for i, share in enumerate(per_head, 1):
    print(f"head {i} (token t + {i + 1}): agrees {share:.1%}")
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.bar([f"head {i}\n(t + {i + 1})" for i in range(1, len(per_head) + 1)], per_head)
ax.set_ylabel("agrees with the big model")
ax.set_ylim(0, 1)
plt.show()
common.claim(all(a >= b - 0.02 for a, b in zip(per_head, per_head[1:])),
             "each head further ahead agrees less often")

# %% [markdown]
# The further ahead, the harder: each head agrees less than the one before. A chain of
# guesses is kept up to its first miss, so the chance that guesses `1..i` all survive falls
# faster still.
#
# ## Three drafts, by the clock
#
# The real target, greedy, on the lesson's prompts: each draft's output checked identical to
# plain decoding's, the time the median of paired runs (plain and speculative alternately).

# %%
table = compare.greedy_table(target, {"prompt lookup": lookup, "distilled draft": distilled,
                                      "Medusa heads": heads_draft}, [K], PROMPTS, N_NEW)
per_pass = {name: stats.tokens_per_pass for (name, _), (stats, _) in table.items()}
print(f"fastest: {max(table, key=lambda row: table[row][1])[0]}")
common.claim(per_pass["Medusa heads"] > per_pass["prompt lookup"],
             "the Medusa heads write more characters a pass than prompt lookup")

# %% [markdown]
# Each draft wins where its guesses are both likely and cheap. Prompt lookup costs nothing and
# is right where the text repeats: the copy above, a small model's loops. The distilled draft
# knows the language, so it is right on fresh text, but every guess is a pass of a second model.
# The heads read the big model's own state, so they know what *this* model will write, and a
# guess costs two small products; they lose to the draft only where a guess needs more than one
# state can say (head 4 and 5 agree far less than head 1). The heads need training against the
# big model and change with it; lookup needs nothing at all. Notebook 8 gives the draft the big
# model's features *and* the guessed tokens: one layer that predicts the next feature, as EAGLE
# does.
