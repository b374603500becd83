"""The drafters: the n-gram table and the interface every drafter shares. Greedy output stays
the big model's own and sampling keeps its distribution, whoever drafts."""

import numpy as np
import pytest
import torch
from test_speculative import (
    SMALL_V,
    chi_square_p_value,
    exact_distribution,
    make_model,
    prompts,  # noqa: F401 (fixtures)
    sample_counts,
    small_pair,
    target,
)

import gpt
import speculative as sd
from beyond.ngram import NGramDraft, PromptLookup, prompt_lookup, table
from speculative import ModelDraft, Sampling, as_drafter


def test_the_table_keeps_the_most_frequent_next_token_and_backs_off():
    data = [0, 1, 2, 0, 1, 2, 0, 1, 3, 0, 1, 2, 3, 3, 3, 3]
    t = table(data, 3, vocab_size=4)
    assert t[0] == {0: 3}                                    # the most frequent token overall
    assert t[2][0 * 4 + 1] == 2                              # after 0 1: 2 three times, 3 once
    draft = NGramDraft(t, 4)
    assert draft.next_token([3, 0, 1]) == 2
    assert draft.next_token([2, 2]) == draft.next_token([2])  # (2, 2) unseen: back off
    tokens, probs = draft.propose([0, 1], 3, Sampling())
    assert tokens == [2, 0, 1] and probs is None
    _, probs = draft.propose([0, 1], 3, Sampling(temperature=1.0, rng=np.random.default_rng()))
    assert probs.shape == (3, 4) and (probs.sum(1) == 1).all() and probs.max() == 1


def test_prompt_lookup_proposes_what_followed_the_same_tokens_before():
    draft = NGramDraft(table([0, 0, 0, 0], 2, 4), 4, prompt_lookup=True)
    seq = [1, 2, 3, 0, 3, 2, 1, 2, 3]
    tokens, _ = draft.propose(seq, 3, Sampling())
    assert tokens == [0, 3, 2]                                # after "1 2 3" came "0 3 2"
    assert prompt_lookup([1, 2, 3], 2, 3, 3) == []           # nothing earlier to match


def test_prompt_lookup_prefers_the_longest_match_then_the_latest():
    # "1 2 3" occurs earlier once (followed by 7); "2 3" more recently (followed by 8): the
    # longer match wins. Controls: shortest=3 finds only the first; longest=2 the recent one;
    # a lone drafter proposes no guess where nothing matches.
    seq = [1, 2, 3, 7, 5, 2, 3, 8, 9, 1, 2, 3]
    assert prompt_lookup(seq, 2) == [7, 5]
    assert prompt_lookup(seq, 2, longest=2) == [8, 9]
    assert prompt_lookup(seq, 9) == [7, 5, 2, 3, 8, 9, 1, 2, 3]       # runs into the tail
    assert prompt_lookup([4, 5, 6], 3) == [] and prompt_lookup([4], 3) == []
    assert PromptLookup(10).propose([4, 5, 6], 3, Sampling()) == ([], None)
    tokens, probs = PromptLookup(10).propose(seq, 2, Sampling(temperature=1.0))
    assert tokens == [7, 5] and probs.shape == (2, 10) and probs[1, 5] == 1


def test_a_bad_order_is_a_clear_error():
    with pytest.raises(ValueError, match="order must be at least 1"):
        NGramDraft.from_data([1, 2, 3], 4, order=0)


@pytest.mark.parametrize("lookup", [False, True])
def test_greedy_with_the_table_is_the_big_models_output(target, lookup):  # noqa: F811
    draft = NGramDraft.from_data(gpt.train_data.numpy(), target.c.vocab_size, 4,
                                 prompt_lookup=lookup)
    for k, idx in zip((1, 3, 6), prompts(3, seed=4)):
        want = sd.generate(target, idx, 40)
        got, stats = sd.speculative_generate(target, draft, idx, 40, k=k)
        assert torch.equal(got, want) and stats.new_tokens == 40


@pytest.mark.slow  # seconds: make test
def test_the_table_of_a_models_own_text_drafts_best_for_that_model(tmp_path):
    """NGramDraft.of_target: built from the model's own greedy text, it keeps more guesses of
    that model than the training text's table, and more than the table of another model's text
    (the negative control: a table made for the wrong model). Greedy output stays exact. The
    table is cached once per model: built again only for a model with other weights."""
    vocab = len(gpt.vocab())
    model, other = (make_model(seed, vocab_size=vocab, scale=0.3) for seed in (0, 1))
    built = []
    own = NGramDraft.of_target(model, tmp_path, runs=8, length=40, log=built.append)
    assert len(built) == 1 and not list(tmp_path.glob("*.tmp"))
    foreign = NGramDraft.of_target(other, tmp_path / "other", runs=8, length=40, log=None)
    text = gpt.decode(gpt.val_data)

    def kept(draft):
        stats = sd.Stats(k=4)
        for start in range(0, len(text) - 8, len(text) // 8):
            idx = torch.tensor([gpt.encode(text[start:start + 8])])
            got, run = sd.speculative_generate(model, draft, idx, 40, k=4)
            assert torch.equal(got, sd.generate(model, idx, 40))
            stats.add(run)
        return stats.kept_of_checked
    assert kept(own) > max(kept(NGramDraft.trained(tmp_path)), kept(foreign))
    NGramDraft.of_target(model, tmp_path, runs=8, length=40, log=built.append)
    assert len(built) == 1                                               # cached
    NGramDraft.of_target(other, tmp_path, runs=8, length=40, log=built.append)
    assert len(built) == 2                                               # another model


class Pretending(NGramDraft):
    """Negative control: guesses deterministically but claims they were drawn uniformly."""

    def propose(self, seq, k, sampling):
        tokens, probs = super().propose(seq, k, sampling)
        return tokens, None if probs is None else np.full(probs.shape, 1 / self.vocab_size)


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_with_the_table_keeps_the_target_distribution(small_pair):  # noqa: F811
    target, _ = small_pair
    data = np.random.default_rng(0).integers(0, SMALL_V, 500)
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, temperature=1.0)
    honest = NGramDraft.from_data(data, SMALL_V, 2)
    assert chi_square_p_value(sample_counts(target, honest, prompt, 3, 3000, 0, temperature=1.0), want) > 1e-3
    # A drafter that misreports the distribution of its guesses breaks the rule's exactness:
    # caught with a tenth of the runs (p about 1e-74 at this seed).
    pretending = Pretending(honest.tables, SMALL_V)
    assert chi_square_p_value(sample_counts(target, pretending, prompt, 3, 300, 0, temperature=1.0), want) < 1e-6


def test_a_gpt_becomes_a_drafter_and_a_drafter_stays_one(target):  # noqa: F811
    assert isinstance(as_drafter(target), ModelDraft)
    table_draft = NGramDraft(table([0, 1], 1, target.c.vocab_size), target.c.vocab_size)
    assert as_drafter(table_draft) is table_draft


def test_adaptive_drafters_hear_how_many_guesses_were_kept(target):  # noqa: F811
    class Listening(NGramDraft):
        heard = []

        def kept(self, n):
            self.heard.append(n)
    draft = Listening(table(gpt.train_data.numpy(), 3, target.c.vocab_size),
                      target.c.vocab_size)
    _, stats = sd.speculative_generate(target, draft, prompts(1)[0], 30, k=3)
    assert len(draft.heard) == stats.rounds and sum(draft.heard) == stats.accepted


def test_the_heuristic_schedule_adds_two_after_a_full_round_and_drops_one_otherwise():
    from beyond.adaptive import Heuristic
    schedule = Heuristic(start=4, k_max=7)
    steps = []
    for proposed, kept in ((4, 4), (6, 6), (7, 7), (7, 2), (6, 0), (5, 5), (0, 0)):
        schedule.update(proposed, kept)
        steps.append(schedule.k)
    assert steps == [6, 7, 7, 6, 5, 7, 7]
    schedule = Heuristic(start=1)
    schedule.update(1, 0)
    assert schedule.k == 1, "never below 1"
    with pytest.raises(ValueError, match="1 <= start <= k_max"):
        Heuristic(start=0)


@pytest.mark.parametrize("name", ["Heuristic", "BestK"])
def test_an_adaptive_k_keeps_the_big_models_output(target, name):  # noqa: F811
    import beyond.adaptive
    draft = NGramDraft.from_data(gpt.train_data.numpy(), target.c.vocab_size, 4)
    for idx in prompts(3, seed=5):
        schedule = getattr(beyond.adaptive, name)(start=2, k_max=8)
        got, stats = sd.speculative_generate(target, draft, idx, 60, k=schedule)
        assert torch.equal(got, sd.generate(target, idx, 60))
        assert stats.k == 8 and len(stats.accepted_per_position) == 8
        assert 1 <= schedule.k <= 8


def test_best_k_follows_the_formula_once_it_has_seen_enough():
    from beyond.adaptive import BestK

    def run(check_seconds):
        schedule = BestK(start=4, k_max=12, warmup_rounds=6)
        for k in (3, 4, 6, 3, 4, 6, 4):  # one guess kept, the next rejected: alpha = 0.5
            schedule.update(k, 1, draft_seconds=k * 1e-6, check_seconds=check_seconds(k))
        return schedule.k
    # A check that costs the same for any k: guesses are nearly free, so draft long (the
    # formula's best here is 8: beyond, the 0.5^k a guess adds is worth less than it costs).
    assert run(lambda k: 1e-3) == 8
    # A check whose cost grows with every token (as on a CPU): at alpha 0.5, one guess is best.
    assert run(lambda k: 1e-3 + 5e-4 * (k + 1)) == 1
    hopeless = BestK(start=6, k_max=12, warmup_rounds=3)
    for k in (5, 6, 8, 6):  # every first guess rejected: k = 1
        hopeless.update(k, 0, draft_seconds=k * 1e-3, check_seconds=1e-3)
    assert hopeless.k == 1


def test_early_exit_drafts_with_the_big_models_own_first_layers(target):  # noqa: F811
    from beyond.early_exit import first_layers
    draft = first_layers(target, 1)
    assert draft.c.n_layer == 1 and draft.transformer.wte is target.transformer.wte
    assert draft.transformer.h[0] is target.transformer.h[0], "shared, not copied"
    idx = prompts(1, seed=6, max_len=12)[0]  # inside the 16-token window
    with torch.no_grad():  # the draft is the big model stopped after block 0
        x = target.transformer.wte(idx) + target.transformer.wpe(torch.arange(idx.shape[1]))
        want = target.lm_head(target.transformer.ln_f(target.transformer.h[0](x)))
        assert torch.allclose(draft(idx)[0], want, atol=1e-6)
    got, _ = sd.speculative_generate(target, draft, idx, 40, k=3)
    assert torch.equal(got, sd.generate(target, idx, 40))
    for bad in (0, target.c.n_layer):
        with pytest.raises(ValueError, match="exit layer is between 1 and"):
            first_layers(target, bad)


def test_the_oracle_replays_a_run_keeping_every_guess(target):  # noqa: F811
    from beyond.adaptive import Oracle
    draft = NGramDraft.from_data(gpt.train_data.numpy(), target.c.vocab_size, 4)
    idx = prompts(1, seed=7)[0]
    recorded, seen = sd.speculative_generate(target, draft, idx, 60, k=8)
    assert 0 < seen.accepted < seen.proposed, "a recording with kept and rejected guesses"
    replayed, stats = sd.speculative_generate(target, draft, idx, 60, k=Oracle(seen.trace))
    assert torch.equal(replayed, recorded)
    assert stats.rounds == seen.rounds and stats.accepted == stats.proposed == seen.accepted
    # Negative control: one guess more than hindsight says, and guesses get thrown away.
    greedy_plan = [(proposed, n + 1, token) for proposed, n, token in seen.trace]
    _, off = sd.speculative_generate(target, draft, idx, 60, k=Oracle(greedy_plan))
    assert off.accepted < off.proposed


def test_the_confidence_schedule_stops_unsure_guesses_and_keeps_the_output(target):  # noqa: F811
    from beyond.adaptive import BestK, Confidence, drafting_for
    draft = make_model(3, n_layer=1, scale=0.3)
    for idx in prompts(2, seed=9):
        guesses = {}
        for schedule in (Confidence(k_max=6, threshold=0.9), BestK(k_max=6)):  # BestK: control
            drafting = drafting_for("confidence" if isinstance(schedule, Confidence) else "best",
                                    draft)
            got, stats = sd.speculative_generate(target, drafting, idx, 50, k=schedule)
            assert torch.equal(got, sd.generate(target, idx, 50))
            # The first rounds explore k = 3, 4, 6 (as BestK does): a round that guessed
            # fewer stopped because the drafter was unsure.
            guesses[type(schedule)] = min(len(proposed) for proposed, _, _ in stats.trace[:6])
        assert guesses[Confidence] < 3 <= guesses[BestK]


def test_the_confidence_threshold_rises_past_guesses_that_do_not_pay():
    from beyond.adaptive import Confidence

    class Reporting:  # a drafter that was 35% sure of its first guess and 95% of its second
        min_confidence, confidences = 0.0, [0.95, 0.35]
    schedule = Confidence(k_max=4, threshold=0.0, min_count=3)
    schedule.attach(Reporting)
    for _ in range(6):  # the 95% guesses are kept, the 35% ones rejected
        schedule.update(2, 1, draft_seconds=2e-6, check_seconds=1e-3)
    assert 0.35 < schedule.threshold <= 0.9 and Reporting.min_confidence == schedule.threshold
    kept = Confidence(k_max=4, threshold=0.0, min_count=3)
    kept.attach(Reporting)
    for _ in range(6):  # both kept: nothing to stop for
        kept.update(2, 2, draft_seconds=2e-6, check_seconds=1e-3)
    assert kept.threshold <= 0.3


@pytest.mark.slow  # statistics or a subprocess: not in make test-fast
def test_sampling_stays_exact_when_the_drafter_stops_early(small_pair):  # noqa: F811
    from beyond.adaptive import Confidence, drafting_for
    target, draft = small_pair
    prompt = [1, 2, 0]
    want = exact_distribution(target, prompt, 3, temperature=1.0)
    counts = sample_counts(target, drafting_for("confidence", draft), prompt, 3, 3000, 0,
                           temperature=1.0,
                           k=lambda: Confidence(start=2, k_max=3, threshold=0.5))
    assert chi_square_p_value(counts, want) > 1e-3


def test_best_k_climbs_to_the_fastest_measured_k_where_the_formula_misjudges():
    from beyond.adaptive import BestK

    def settle(schedule, rounds=400):
        for _ in range(rounds):  # the first two guesses always right, the third always wrong:
            k = schedule.k       # not the independent guesses the formula assumes
            schedule.update(k, min(k, 2), draft_seconds=1e-4 * k, check_seconds=1e-3)
        return schedule.k
    # Tokens per second: k = 1: 2 / 1.1 ms, k = 2: 3 / 1.2 ms (the best), k = 3: 3 / 1.3 ms.
    assert settle(BestK(start=4, k_max=8)) == 2
    # Control: the formula alone (never enough trials to climb) picks a longer k.
    assert settle(BestK(start=4, k_max=8, trials=10 ** 6)) > 2
