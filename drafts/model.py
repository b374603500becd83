"""
drafts/model.py: a language model as a drafter (a gpt.GPT, a numpy_gpt.NumpyGPT, or anything
with vocab_size and score(seqs, first) -> logits, as speculative.CachedScorer defines it).

It guesses one token per forward pass, through its own KV cache, which rolls back by itself
when the big model rejected guesses (the cache compares what it holds with the sequence).
"""

import numpy as np


class ModelDraft:

    def __init__(self, model):
        from speculative import as_scorer
        self.scorer = as_scorer(model)
        self.vocab_size = self.scorer.vocab_size

    def propose(self, seq, k, sampling):
        work, tokens, probs = list(seq), [], []
        for _ in range(k):
            logits = self.scorer.score([work], len(work))[0, -1]           # (V,)
            if sampling.greedy:
                token = int(logits.argmax())
            else:
                probs.append(sampling.warp(logits))                        # (V,)
                token = sampling.draw(probs[-1])
            tokens.append(token)
            work.append(token)
        return tokens, (np.array(probs) if probs else None)                # (k, V) or None
