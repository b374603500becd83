"""
drafts/model.py: a language model as a drafter (a gpt.GPT, a numpy_gpt.NumpyGPT, or anything
with vocab_size and score(seqs, first) -> logits, as speculative.CachedScorer defines it).

It guesses one token per forward pass, through its own KV cache, which rolls back by itself
when the big model rejected guesses (the cache compares what it holds with the sequence).
With `min_confidence` set (drafts/adaptive.py's Confidence sets it) it stops guessing early,
when its own probability that all its guesses so far are right (the product of its
probabilities for each) falls below it, and leaves those products in `confidences` for the
schedule to learn from.
"""

import numpy as np

from numpy_speculative import softmax


class ModelDraft:

    def __init__(self, model):
        from speculative import as_scorer
        self.scorer = as_scorer(model)
        self.vocab_size = self.scorer.vocab_size
        self.min_confidence = None      # a number: stop guessing below it
        self.confidences = []

    def propose(self, seq, k, sampling):
        work, tokens, probs = list(seq), [], []
        self.confidences, sure = [], 1.0
        for _ in range(k):
            logits = self.scorer.score([work], len(work))[0, -1]           # (V,)
            if sampling.greedy:
                token = int(logits.argmax())
                if self.min_confidence is not None:
                    sure *= float(softmax(logits.astype(np.float64))[token])
            else:
                probs.append(sampling.warp(logits))                        # (V,)
                token = sampling.draw(probs[-1])
                sure *= float(probs[-1][token])
            self.confidences.append(sure)
            tokens.append(token)
            work.append(token)
            if self.min_confidence is not None and self.confidences[-1] < self.min_confidence:
                break                                  # not sure enough to guess further
        return tokens, (np.array(probs) if probs else None)                # (k, V) or None
