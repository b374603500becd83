"""
Exercise 1, watch it happen: a real speculative run of the trained pair, replayed round by round.

    python -m exercises.ex1_watch                  # the lesson's draft, greedy, 60 characters
    python -m exercises.ex1_watch --draft distilled --delay 0.5

What to look at. Each round the draft (the junior writer) guesses k characters, one at a time,
cheaply. The target (the senior editor) then reads the context and all k guesses in one pass and
says, at every position, what it would have written itself. Guesses are kept from the left for
as long as they match; at the first mismatch the editor's own character goes in, and the round
ends. So every round writes between 1 and k+1 characters for one pass of the big model (two
for a round whose check crosses a jump of the 128-character window: the second pass re-reads
the window's kept half, which is why a long run shows a few more passes than rounds).

Where the picture breaks: a human editor could fix one wrong word and keep the rest of the
draft. Here everything after the first rejected guess is thrown away, because each later
guess was written from a context that contained the rejected one. A junior who is often wrong
early saves nothing: the round still costs k draft steps and one target pass, for one character.

Writes results/ex1_watch.html (the text coloured by who wrote each character, and every round),
results/ex1_player.html (the run as an animation: play, pause, step) and results/ex1_rounds.png
(how many guesses each round kept).
"""

import html
import os
import sys
import time
from dataclasses import dataclass

import gpt
import speculative as sd
from harness import common, report
from exercises import player
from lessonkit.scorer import windows
from lessonkit.stats import verdicts


@dataclass
class Args(common.ExerciseArgs):
    prompt: str = "ROMEO:\n"   # where the text starts (\n in it means a newline)
    max_new_tokens: int = 60   # characters to write
    k: int = 4                 # draft tokens per round
    draft: str = "draft"       # the draft preset: draft, distilled or names
    delay: float = 0.0         # seconds to pause after each round, to watch it unfold


def show(ch):
    return {"\n": "\u23ce", " ": "\u00b7"}.get(ch, ch)


def replay(prompt_ids, trace, window=None):
    """Turn a Stats.trace into rounds: context position, guesses, verdicts, target's token; and,
    given the big model's window (its block_size), the passes each check took: one, or two when
    it crosses a jump of the window (scorer.windows, the passes every scorer makes)."""
    rounds, position = [], len(prompt_ids)
    for proposed, n_accepted, token in trace:
        fates, kind = verdicts(proposed, n_accepted)
        rounds.append({"position": position, "guesses": gpt.decode(proposed),
                       "verdicts": fates, "kept": n_accepted, "target": gpt.decode([token]),
                       "kind": kind})
        if window:   # the check scores positions position .. position + len(proposed)
            rounds[-1]["passes"] = len(list(windows(position, position + len(proposed), window)))
        position += n_accepted + 1
    return rounds


def colour(text, code, on):
    return f"\033[{code}m{text}\033[0m" if on else text


def print_round(i, r, text_so_far, on):
    marks = {"kept": colour("kept", "32", on), "rejected": colour("REJECTED", "31", on),
             "thrown-away": colour("thrown away", "2", on)}
    print(f"round {i + 1}: ...{''.join(show(c) for c in text_so_far[-24:])}")
    for guess, verdict in zip(r["guesses"], r["verdicts"]):
        print(f"    draft guessed {show(guess)!r:6}  target: {marks[verdict]}")
    who = ("its bonus character (all guesses kept)" if r["kind"] == "bonus"
           else "its own character instead" if r["guesses"]
           else "the last character itself (nothing left to guess)")
    passes = r.get("passes", 1)
    cost = ("one pass of the big model" if passes == 1 else f"{passes} passes of the big model "
            "(the check crosses a jump of its window: a second pass re-reads the kept half)")
    print(f"    target writes {who}: {show(r['target'])!r}  "
          f"-> {r['kept'] + 1} character(s) for {cost}\n")


COLOURS = {"kept": "#c8f7c5", "correction": "#ffe08a", "bonus": "#a8dcff"}


def coloured_text(prompt, rounds):
    """The run's text as HTML, every character on the colour of who wrote it (inline styles,
    so that it shows anywhere, a notebook included)."""
    spans = [f"<b>{html.escape(prompt)}</b>"]
    for i, r in enumerate(rounds):
        pieces = [(g, "kept") for g, v in zip(r["guesses"], r["verdicts"]) if v == "kept"]
        for char, kind in pieces + [(r["target"], r["kind"])]:
            spans.append(f'<span style="background:{COLOURS[kind]}" title="round {i + 1}: '
                         f'{kind}">{html.escape(char)}</span>')
    return ('<div style="font-family:monospace;font-size:1.1em;line-height:1.8;'
            'white-space:pre-wrap">' + "".join(spans) + "</div>")


def write_html(path, prompt, rounds, stats, draft_name, spent):
    rows = []
    for i, r in enumerate(rounds):
        cells = "".join(f'<td class="{v}">{html.escape(show(g))}</td>'
                        for g, v in zip(r["guesses"], r["verdicts"]))
        rows.append(f"<tr><td>{i + 1}</td>{cells}<td class='{r['kind']}'>"
                    f"{html.escape(show(r['target']))}</td><td>{r['kept'] + 1}</td></tr>")
    path.write_text(f"""<!doctype html><meta charset="utf-8"><title>Speculative decoding, round by round</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}} .text{{font-family:monospace;font-size:1.2em;line-height:1.8}}
.kept{{background:#c8f7c5}} .correction{{background:#ffe08a}} .bonus{{background:#a8dcff}} .rejected{{background:#ffb3b3}} .thrown-away{{color:#aaa;text-decoration:line-through}}
td{{font-family:monospace;padding:2px 8px;text-align:center}}</style>
<h1>Speculative decoding, round by round</h1>
<p>Draft <b>{html.escape(draft_name)}</b> guesses; the big model checks. <span class="kept">kept guess</span>
<span class="correction">target's own character after a rejection</span> <span class="bonus">bonus character (all guesses kept)</span>.
{stats.new_tokens} characters in {html.escape(spent)}: {stats.tokens_per_pass:.2f} per pass;
{stats.accepted} of {stats.proposed} guesses kept ({stats.acceptance_rate:.0%}).</p>
{coloured_text(prompt, rounds)}
<h2>Every round</h2><p>Guesses after the first rejected one are thrown away.</p>
<table><tr><th>round</th>{"".join(f"<th>guess {j + 1}</th>" for j in range(stats.k))}<th>target</th><th>written</th></tr>
{"".join(rows)}</table>
""", encoding="utf-8")


def models(args):
    """The trained presets this exercise uses (the main job trains the missing ones first)."""
    return ["big", args.draft]


def run(args, log=print):
    common.shrink_if_quick(args, max_new_tokens=30)
    trained = common.load_models(args, models(args), log=log)
    target, draft = trained["big"], trained[args.draft]
    idx = common.encode_prompt(args.prompt)
    out, stats = sd.speculative_generate(target, draft, idx, args.max_new_tokens, k=args.k)
    assert (out == sd.generate(target, idx, args.max_new_tokens)).all(), "greedy must match"
    window = target.c.block_size
    rounds = replay(idx[0].tolist(), stats.trace, window)
    assert sum(r["passes"] for r in rounds) == stats.target_passes, "replayed passes are the run's"
    on = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    text = args.prompt
    for i, r in enumerate(rounds):
        if log is print:
            print_round(i, r, text, on)
            time.sleep(args.delay)
        text += "".join(g for g, v in zip(r["guesses"], r["verdicts"]) if v == "kept") + r["target"]
    assert text == gpt.decode(out[0])
    folder = common.results_dir(args)
    spent = player.spent(len(rounds), stats.target_passes, window)  # rounds, passes, and why
    write_html(folder / "ex1_watch.html", args.prompt, rounds, stats, args.draft, spent)
    drafter = common.DRAFT_NAMES.get(args.draft, args.draft).capitalize()
    page = player.page(args.prompt, rounds, f"{drafter} guesses, the big model checks "
                       f"(k = {args.k}, greedy)", window=window)  # passes: the rounds' own
    (folder / "ex1_player.html").write_text(page, encoding="utf-8")
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.bar(range(1, len(rounds) + 1), [r["kept"] + 1 for r in rounds],
           color=["#58b4f0" if r["kind"] == "bonus" else "#f5b942" for r in rounds])
    ax.set(xlabel="round", ylabel="characters written", ylim=(0, args.k + 1.5),
           title=f"{drafter}, k = {args.k}: characters per pass of the big model "
                 f"(blue: all guesses kept)")
    common.figure(args, "ex1_rounds.png", fig)
    numbers = {"prompt": args.prompt, "k": args.k, "draft": args.draft, "text": text,
               "rounds": len(rounds), "target_passes": stats.target_passes,
               "new_tokens": stats.new_tokens, "tokens_per_pass": stats.tokens_per_pass,
               "acceptance_rate": stats.acceptance_rate, "identical_to_plain": True}
    common.save_json(args, "ex1_watch.json", numbers)
    log(f"{stats.new_tokens} characters in {spent}: {stats.tokens_per_pass:.2f} per pass, "
        f"{stats.acceptance_rate:.0%} of guesses kept; identical to the big model alone. "
        f"Wrote {folder / 'ex1_watch.html'}")
    markdown = (f"Prompt {args.prompt!r}, draft `{args.draft}`, k = {args.k}, greedy: "
                f"{stats.new_tokens} characters in {spent}, "
                f"**{stats.tokens_per_pass:.2f} characters per pass**, "
                f"{stats.acceptance_rate:.0%} of guesses kept, output identical to the big model "
                f"alone. Round by round: `ex1_watch.html`; animated: `ex1_player.html`; per round: "
                f"![](ex1_rounds.png)")
    return {"numbers": numbers, "markdown": markdown}


def main(argv=None):
    args = common.parse_args(__doc__, Args, argv)
    args.prompt = args.prompt.replace("\\n", "\n")
    print(__doc__.split("\n\n", 2)[2].split("Writes")[0])
    report.record(args, 1, run(args))


if __name__ == "__main__":
    from exercises import stubs
    stubs.run(1, main)   # a part not written yet: one line, exit 0
