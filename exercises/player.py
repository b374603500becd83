"""
exercises/player.py: a speculative run as an animation in one self-contained web page.

Round by round: the draft's guesses appear (grey), the big model's verdict colours them (green
kept, red rejected, struck through: thrown away unchecked), then the text grows by the kept
guesses and the big model's own character (yellow: a correction, blue: the bonus). Play, pause,
step, in any browser, offline. page(prompt, rounds, title) takes exercises.ex1_watch.replay()'s
rounds; exercise 1 writes results/ex1_player.html, notebook 1 shows it (player.show(page)).
"""

import html
import json

# How a token box shows a character that would leave it empty (an empty box says nothing):
# (glyph, its name). The running text keeps the characters themselves.
GLYPHS = {" ": ("\u2423", "a space"), "\n": ("\u23ce", "a newline")}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1em; max-width: 58em; }
#text { font-family: ui-monospace, monospace; font-size: 1.15em; line-height: 1.9;
        white-space: pre-wrap; border: 1px solid #ddd; padding: .8em; min-height: 8em; }
.prompt { font-weight: bold; }
.kept { background: #c8f7c5; } .correction { background: #ffe08a; } .bonus { background: #a8dcff; }
.guess { color: #777; border: 1px dashed #aaa; }
.rejected { background: #ffb3b3; } .thrown-away { color: #aaa; text-decoration: line-through; }
.new { outline: 2px solid #333; }
.glyph { color: #999; }
#summary { font-weight: bold; }
#controls button { font-size: 1em; margin-right: .4em; min-width: 4.5em; }
#status { margin: .6em 0; min-height: 1.4em; }
.legend span { padding: 0 .3em; margin-right: .6em; }
"""

SCRIPT = """
const data = JSON.parse(document.getElementById("run").textContent);
const frames = 3 * data.rounds.length;            // three steps a round; frame 0: the prompt
let frame = 0, timer = null;

function span(cls, text, title) {
  const s = document.createElement("span");
  s.className = cls; s.textContent = text; if (title) s.title = title; return s;
}

// A token box. A space or a newline would leave it empty, so it shows a faint glyph instead,
// named in its tooltip and for screen readers.
function box(cls, c, title) {
  const glyph = data.glyphs[c];
  if (!glyph) return span(cls, c, title);
  const s = span(cls + " glyph", glyph[0], (title ? title + ": " : "") + glyph[1]);
  s.setAttribute("role", "img"); s.setAttribute("aria-label", glyph[1]);
  return s;
}

// A character landed in the text. The text reads as text: a real space, and a newline that
// breaks the line, after a faint glyph (a coloured line break alone would not show who wrote it).
function landed(cls, c, title) {
  if (c !== "\\n") return span(cls, c, title);
  const s = box(cls, c, title); s.textContent += "\\n"; return s;
}

const named = c => data.glyphs[c] ? data.glyphs[c][1] : JSON.stringify(c);
const passes = R => R.passes === 1 ? "one pass" :          // two: the check crossed a jump
  R.passes + " passes (the check crosses a jump of the window)";

function render() {
  const out = document.getElementById("text");
  out.replaceChildren(span("prompt", data.prompt));
  const round = Math.floor((frame - 1) / 3), stage = (frame - 1) % 3;   // stage 0, 1, 2
  const done = frame === 0 ? 0 : (stage === 2 ? round + 1 : round);
  for (let r = 0; r < done; r++) {
    const R = data.rounds[r], fresh = (r === round && stage === 2) ? " new" : "";
    R.guesses.forEach((g, i) => {
      if (R.verdicts[i] === "kept") out.append(landed("kept" + fresh, g, "round " + (r + 1)));
    });
    out.append(landed(R.kind + fresh, R.target, "round " + (r + 1)));
  }
  let status = "the prompt; press play or step";
  if (frame > 0) {
    const R = data.rounds[round];
    const head = "round " + (round + 1) + " of " + data.rounds.length + ": ";
    const kept = R.verdicts.filter(v => v === "kept").length;
    if (stage === 0) {
      R.guesses.forEach(g => out.append(box("guess", g)));
      status = head + "the draft guesses " + R.guesses.length + " character(s)";
    } else if (stage === 1) {
      R.guesses.forEach((g, i) => out.append(box(R.verdicts[i], g)));
      status = head + "the big model checks them in " + passes(R) + ": " + kept + " kept" +
        (kept < R.guesses.length ? ", the next rejected" : "");
    } else {
      status = head + "the big model writes " + named(R.target) + " (" +
        (R.kind === "bonus" ? "a bonus: every guess was kept" : "its correction") + "), " +
        (kept + 1) + " character(s) for " + passes(R);
    }
  }
  document.getElementById("status").textContent = status;
  document.getElementById("summary").hidden = frame !== frames;   // the last frame only
  document.getElementById("frame").textContent = "step " + frame + " of " + frames;
  document.getElementById("play").textContent = timer ? "pause" : "play";
  document.body.dataset.frame = frame;
}

function go(to) { frame = Math.max(0, Math.min(frames, to)); render(); }
function pause() { if (timer) { clearInterval(timer); timer = null; } render(); }
function play() {
  if (timer) return pause();
  if (frame === frames) frame = 0;
  timer = setInterval(() => { if (frame >= frames) pause(); else go(frame + 1); }, data.delay);
  render();
}
document.getElementById("back").onclick = () => { pause(); go(frame - 1); };
document.getElementById("step").onclick = () => { pause(); go(frame + 1); };
document.getElementById("play").onclick = play;
document.addEventListener("keydown", e => {
  if (e.key === "ArrowRight") { pause(); go(frame + 1); }
  if (e.key === "ArrowLeft") { pause(); go(frame - 1); }
  if (e.key === " ") { e.preventDefault(); play(); }
});
render();
"""


def count(n, word):
    """count(1, "round") == "1 round", count(2, "pass") == "2 passes"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def spent(n_rounds, passes=None, window=None):
    """What the big model did: one check a round, one pass a check, except a check crossing a
    jump of its window (scorer.windows splits it). passes: the run's Stats.target_passes, if
    known; window: the big model's block_size, to name it."""
    if passes is None:
        return f"{count(n_rounds, 'round')}, one check of the big model each"
    said = f"{count(n_rounds, 'round')}, {count(passes, 'pass')} of the big model"
    if passes > n_rounds:
        jump = f"a jump of the {window}-character window" if window else "a window jump"
        said += (f" (more passes than rounds: a check that crosses {jump} takes a second "
                 f"pass, to re-read the window's kept half)")
    return said


def summary(rounds, passes=None, window=None):
    """The last frame's closing line: the characters the rounds wrote, and the passes plain
    decoding needs for them. passes: by default the rounds' own, when they all carry them."""
    if passes is None and rounds and all("passes" in r for r in rounds):
        passes = sum(r["passes"] for r in rounds)
    written = sum(r["verdicts"].count("kept") + 1 for r in rounds)
    return (f"{count(written, 'character')} in {spent(len(rounds), passes, window)}; "
            f"plain decoding needs {count(written, 'pass')}, one per character")


def page(prompt, rounds, title, delay_ms=600, passes=None, window=None):
    """The whole page as a string. rounds: [{guesses, verdicts, target, kind, maybe passes}];
    passes, window: for the summary."""
    data = {"prompt": prompt, "delay": delay_ms, "glyphs": GLYPHS,
            "rounds": [{"guesses": list(r["guesses"]), "verdicts": r["verdicts"],
                        "target": r["target"], "kind": r["kind"],
                        "passes": r.get("passes", 1)} for r in rounds]}
    # ensure_ascii=False keeps the glyphs readable in the source; "<\/" never ends the script
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head>
<body data-frame="0">
<h2>{html.escape(title)}</h2>
<p class="legend"><span class="guess">draft's guess</span><span class="kept">kept</span><span
class="rejected">rejected</span><span class="thrown-away">thrown away</span><span
class="correction">big model's correction</span><span class="bonus">bonus</span></p>
<div id="controls"><button id="back">back</button><button id="play">play</button><button
id="step">step</button> <span id="frame"></span></div>
<p id="status"></p>
<p id="summary" hidden>{html.escape(summary(rounds, passes, window))}</p>
<div id="text"></div>
<script type="application/json" id="run">{payload}</script>
<script>{SCRIPT}</script>
</body></html>
"""


class show:
    """The page as a notebook displays it, in an iframe (its script runs in its own document):
    display(player.show(page(...))). Not HTML(an iframe): IPython's HTML warns "Consider using
    IPython.display.IFrame instead", and IFrame loads a URL, while this page lives in the
    iframe's srcdoc (no file, no server). A notebook shows any object through its _repr_html_."""

    def __init__(self, page_html, height=480):
        self.page_html, self.height = page_html, height

    def _repr_html_(self):
        return (f'<iframe srcdoc="{html.escape(self.page_html, quote=True)}" style="width:100%;'
                f'height:{self.height}px;border:0"></iframe>')

    def __repr__(self):                            # where HTML can't show: a plain-text note
        return "<the speculative decoding player: an HTML page, shown by a notebook>"
