"""
exercises/player.py: a speculative run as an animation in one self-contained web page.

Round by round, as the lesson's recommended reading draws it: the draft's guesses appear (grey),
the big model's verdict colours them (green kept, red rejected, struck through: thrown away
unchecked), then the kept guesses and the big model's own character land in the text (yellow:
its correction, blue: the bonus after a round where every guess was kept). Play, pause, step
forward and back; the page needs nothing but a browser (no network, no library).

page(prompt, rounds, title) takes the rounds of exercises.ex1_watch.replay(); exercise 1 writes
results/ex1_player.html, and notebook 1 shows the same page.
"""

import html
import json

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1em; max-width: 58em; }
#text { font-family: ui-monospace, monospace; font-size: 1.15em; line-height: 1.9;
        white-space: pre-wrap; border: 1px solid #ddd; padding: .8em; min-height: 8em; }
.prompt { font-weight: bold; }
.kept { background: #c8f7c5; } .correction { background: #ffe08a; } .bonus { background: #a8dcff; }
.guess { color: #777; border: 1px dashed #aaa; }
.rejected { background: #ffb3b3; } .thrown-away { color: #aaa; text-decoration: line-through; }
.new { outline: 2px solid #333; }
#controls button { font-size: 1em; margin-right: .4em; min-width: 4.5em; }
#status { margin: .6em 0; min-height: 1.4em; }
.legend span { padding: 0 .3em; margin-right: .6em; }
"""

SCRIPT = """
const data = JSON.parse(document.getElementById("run").textContent);
const show = c => c === "\\n" ? "\\u23ce\\n" : c;
const frames = 3 * data.rounds.length;            // three steps a round; frame 0: the prompt
let frame = 0, timer = null;

function span(cls, text, title) {
  const s = document.createElement("span");
  s.className = cls; s.textContent = text; if (title) s.title = title; return s;
}

function render() {
  const out = document.getElementById("text");
  out.replaceChildren(span("prompt", data.prompt));
  const round = Math.floor((frame - 1) / 3), stage = (frame - 1) % 3;   // stage 0, 1, 2
  const done = frame === 0 ? 0 : (stage === 2 ? round + 1 : round);
  for (let r = 0; r < done; r++) {
    const R = data.rounds[r], fresh = (r === round && stage === 2) ? " new" : "";
    R.guesses.forEach((g, i) => {
      if (R.verdicts[i] === "kept") out.append(span("kept" + fresh, show(g), "round " + (r + 1)));
    });
    out.append(span(R.kind + fresh, show(R.target), "round " + (r + 1)));
  }
  let status = "the prompt; press play or step";
  if (frame > 0) {
    const R = data.rounds[round], head = "round " + (round + 1) + " of " + data.rounds.length + ": ";
    const kept = R.verdicts.filter(v => v === "kept").length;
    if (stage === 0) {
      R.guesses.forEach(g => out.append(span("guess", show(g))));
      status = head + "the draft guesses " + R.guesses.length + " character(s)";
    } else if (stage === 1) {
      R.guesses.forEach((g, i) => out.append(span(R.verdicts[i], show(g))));
      status = head + "the big model checks them in one pass: " + kept + " kept" +
        (kept < R.guesses.length ? ", the next rejected" : "");
    } else {
      status = head + "the big model writes " + JSON.stringify(R.target) + " (" +
        (R.kind === "bonus" ? "a bonus: every guess was kept" : "its correction") + "), " +
        (kept + 1) + " character(s) for one pass";
    }
  }
  document.getElementById("status").textContent = status;
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


def page(prompt, rounds, title, delay_ms=600):
    """The whole page as a string. rounds: [{guesses, verdicts, target, kind}] (ex1's replay)."""
    data = {"prompt": prompt, "delay": delay_ms,
            "rounds": [{"guesses": list(r["guesses"]), "verdicts": r["verdicts"],
                        "target": r["target"], "kind": r["kind"]} for r in rounds]}
    payload = json.dumps(data).replace("</", "<\\/")  # never closes the script element early
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
<div id="text"></div>
<script type="application/json" id="run">{payload}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def iframe(page_html, height=420):
    """The page inside an iframe, for a notebook (its script runs in its own document)."""
    return (f'<iframe srcdoc="{html.escape(page_html, quote=True)}" style="width:100%;'
            f'height:{height}px;border:0"></iframe>')
