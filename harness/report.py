"""
harness/report.py: documents assembled from sections, each one run's. results/report.md: every
exercise and study saves its section to results/sections/ with the date it ran (`make exercise
N=3` updates its own and keeps the others). docs/RESULTS.md (`make docs`, `python -m
harness.report`): the sections in docs/results/, one per committed run, in RESULTS_SECTIONS' order.
"""

import json
import re
import sys
from pathlib import Path

import gpt
import speculative
from beyond import presets
from harness import common
from lessonkit import cli, machine, results_file

TITLES = {1: "watch it happen", 2: "derive", 3: "build", 4: "break", 5: "GPU timing",
          "drafters": "every drafter compared",  # studies/drafters.py, not an exercise
          "transformers": "against Hugging Face transformers",  # studies/transformers.py
          "sampling": "sampling's price list",  # studies/sampling_costs.py
          "batch": "what batching buys",  # harness/batch_curve.py
          "trees": "token trees against chains"}  # studies/trees.py
STUDIES = [key for key in TITLES if not isinstance(key, int)]  # past the lesson: make studies
SUMMARY = "The lesson's numbers and ours"   # the heading of the exercises' summary table


def section_name(n):
    return f"ex{n}.json" if isinstance(n, int) else f"{n}.json"


def section_path(args, n):
    folder = common.results_dir(args) / "sections"
    folder.mkdir(exist_ok=True)
    return folder / section_name(n)


def heading(n):
    return f"Exercise {n}: {TITLES[n]}" if isinstance(n, int) else \
        TITLES[n][0].upper() + TITLES[n][1:]           # "Every drafter compared"


def record(args, n, section, log=print):
    """Save section n's ({"numbers", "markdown"}; n: 1-5, or a study) and rebuild report.md."""
    results_file.write_results(section_path(args, n),
                          {"exercise": n, "title": TITLES[n], "quick": args.quick, **section})
    report = write(args)
    if log:
        log(f"updated the {heading(n)} section of {report}")
    return report


def load_sections(args):
    """{n: saved section} for every exercise that has run into this results folder."""
    paths = {n: section_path(args, n) for n in TITLES}
    return {n: json.loads(path.read_text()) for n, path in paths.items() if path.exists()}


def write(args):
    sections = load_sections(args)
    about = machine.describe()
    lines = [
        "# Speculative decoding: the lesson, measured", "",
        "Each exercise's section comes from its latest run (date in its heading); `python -m "
        "exercises` reruns them all, `make exercise N=3` one. Greedy decoding unless said "
        "otherwise; what the lesson is, and its own figures: `docs/LESSON.md`.", "",
        f"Machine: {about['platform']}, {about['cpu_cores']} CPU cores, "
        f"{about['decode_threads']} torch thread for decoding and timing, GPU: "
        f"{about['gpu'] or 'none'}; Python {about['python']}, torch {about['torch']}.", "",
        f"Past the lesson: {studies_line(args)}", "",
        *still_to_do(sections, part_two_to_do(args)),
        "## Models", "", trained_models(args), "",
        f"## {SUMMARY}", "", summary(sections), "",
    ]
    for n, section in sections.items():
        quick = " (quick mode: tiny models, the numbers only check the plumbing)" \
            if section["quick"] else ""
        # a section saved before results files had a "run" kept its date at the top level
        date = section["run"]["date"] if "run" in section else section.get("date", "unknown")
        lines += [f"## {heading(n)}", "", f"*Run {date}{quick}.*", "", section["markdown"], ""]
    path = common.results_dir(args) / "report.md"
    path.write_text("\n".join(lines))
    return path


def part_two_to_do(args):
    """Part two's parts not written yet, as the lesson's last run (results/lesson.json) found."""
    path = common.results_dir(args) / "lesson.json"
    try:
        return json.loads(path.read_text()).get("part_two_to_do", [])
    except (OSError, ValueError):
        return []


def still_to_do(sections, part_two=()):
    """The report's lines on the exercises whose latest run stopped at a part not written yet
    (exercises/__main__.py's run_exercise), then part two's parts not written: a heading and
    one line each, if any."""
    left = [f"- {section['to_do']}" for section in sections.values() if "to_do" in section]
    left += [f"- part two: {line}" for line in part_two]
    return ["## Still to do", "", *left, ""] if left else []


def anchor(title):
    """The link target of a "## title" heading, as GitHub and VS Code's preview make it."""
    return "#" + re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def studies_line(args):
    """A link to each study's section of the report once it has run, and the command for all."""
    sections = load_sections(args)
    studies = [f"[{TITLES[key]}]({anchor(heading(key))})" if key in sections else
               f"{TITLES[key]} (not run yet)" for key in STUDIES]
    return (", ".join(studies) + ". `make studies` runs them all; `python -m studies "
            "--forecast` says about how long they take.")


def trained_models(args):
    rows = []
    for name in presets.PRESETS:
        path = presets.checkpoint_path(name, common.checkpoint_folder(args))
        if not path.exists():
            rows.append([name, "not trained yet", "", "", "", ""])
            continue
        _, state = gpt.load_checkpoint(path)
        c = state["config"]
        optimizer = state.get("settings", {}).get("train", {}).get("optimizer", "adamw")
        rows.append([name, f"{c['n_layer']} x {c['n_embd']}", state["corpus"],
                     {"adamw": "AdamW", "muon": "Muon"}.get(optimizer, optimizer), state["step"],
                     f"{state['val_loss']:.3f}"])
    return common.markdown_table(["preset", "layers x width", "trained on", "optimizer", "steps",
                                  "validation loss"], rows)


def summary(sections):
    """The lesson's numbers, the formulas' and ours, side by side."""
    rows = []
    n = {k: v["numbers"] for k, v in sections.items() if "to_do" not in v}
    if 2 in n:
        alpha, k = n[2]["alpha"], n[2]["k"]
        rows.append([f"tokens per pass, alpha {alpha}, k {k}",
                     "3.36" if (alpha, k) == (0.8, 4) else "", f"{n[2]['closed_form']:.4f}",
                     f"{n[2]['simulated']:.4f} (simulated)", "agree"])
    if 3 in n:
        e = n[3]
        formula = speculative.expected_tokens_per_pass(e["greedy_agreement"], e["k"])
        rows.append(["tokens per pass, lesson's draft, k 4", "about 2",
                     f"{formula:.2f} (from alpha)", f"{e['tokens_per_pass']:.2f}",
                     "fewer: misses come in runs, the formula assumes independent guesses"
                     if e["tokens_per_pass"] < formula else ""])
        rows.append(["proposals accepted", "about a quarter", "", f"{e['acceptance_rate']:.0%}",
                     ""])
        rows.append(["speed-up, lesson's loop (no cache)", "about 1.0x",
                     f"{e['predicted_speedup']['lesson']:.2f}x",
                     f"{e['measured_speedup']['lesson']:.2f}x",
                     f"each round pays {e['k']} draft steps of c = {e['c_recompute']:.2f}: "
                     f"{e['k'] * e['c_recompute'] + 1:.2f} target steps for "
                     f"{e['tokens_per_pass']:.2f} characters"])
        rows.append(["speed-up, KV caches, draft in NumPy", "",
                     f"{e['predicted_speedup']['numpy']:.2f}x",
                     f"{e['measured_speedup']['numpy']:.2f}x",
                     f"c = {e['c_cached_numpy']:.2f}, but checking {e['k'] + 1} tokens costs "
                     f"{e['verify_cost']:.2f} one-token passes on this CPU"])
    if 4 in n:
        d = n[4]["drafts"]
        rows.append(["next-character agreement, Shakespeare draft", "37%", "",
                     f"{d['draft']['greedy_agreement']:.0%}",
                     "the lesson's figure comes from its own draft and corpus"])
        rows.append(["next-character agreement, names draft", "3%", "",
                     f"{d['names']['greedy_agreement']:.0%}", ""])
        if "distilled" in d:  # exercise 4 with --drafts ...,distilled
            rows.append(["speed-up, distilled draft (NumPy), k 4", "", "",
                         f"{d['distilled']['speedup']:.2f}x",
                         f"it agrees on {d['distilled']['greedy_agreement']:.0%}"])
        b = n[4]["break_even"]
        rows.append(["break-even alpha, k 4, c 0.2", "about 0.45 (grid: 0.46)",
                     f"{b['0.2']['bisection']:.4f}", "", "a grid search rounds up to its grid"])
        rows.append(["break-even alpha, k 4, c 0.05", "0.17 (grid)",
                     f"{b['0.05']['bisection']:.4f}", "", "likewise"])
    if not rows:
        return "(no exercise has run yet)"
    return common.markdown_table(["quantity", "lesson", "formula", "measured here",
                                  "why they differ"], rows)


def fill(template, **values):
    """A study's section from its prose: the markdown file `template`, its {fields} filled."""
    return Path(template).read_text().format(**values).strip()


# docs/RESULTS.md: docs/results/NAME.md for each NAME, in this order (each section's links are
# relative to docs/, where the document is).
RESULTS_SECTIONS = ["commands", "lesson", "models", "command_line", "benchmark", "drafters",
                    "transformers", "batch", "sampling", "threads", "trees"]
RESULTS_HEAD = """# Results: every measured figure, with the command that makes it

Assembled by `make docs` from the sections in `docs/results/`: each holds one run's figures (or a
few runs'), says the command that made them, the machine, the date and whether other programs
were busy, and sits beside that run's results file (`NAME.json`). Edit a section there, not
here. To re-measure: run its command; `make docs TAKE=results` then takes the sections the
lesson and the studies wrote into `results/` (for the others, bring the figures of the run's
`results/NAME.json` into its section and run `make docs`); review the diff. Your figures will
differ; a busy machine changes timings most (see "Threads, and a busy machine" below, and what
the code does about it in [DESIGN.md](DESIGN.md)).
"""


def results_document(folder):
    """docs/RESULTS.md's text from the section files in `folder` (docs/results/)."""
    return "\n".join([RESULTS_HEAD, *((Path(folder) / f"{name}.md").read_text()
                                      for name in RESULTS_SECTIONS)])


def take(results, folder, log=print):
    """The sections full runs saved in `results` (a results/ folder) wrote, as sections of
    docs/RESULTS.md in `folder`: the lesson's summary (exercises 3 and 4) and each study's,
    headed by their runs' provenance. Runs of --quick are left out."""
    paths = {n: Path(results, "sections", section_name(n)) for n in TITLES}
    saved = {n: json.loads(path.read_text()) for n, path in paths.items() if path.exists()}
    saved = {n: section for n, section in saved.items() if not section["quick"]}
    found = {key: ([saved[key]["run"]], heading(key), saved[key]["markdown"])
             for key in STUDIES if key in saved}
    if {3, 4} <= set(saved):
        exercises = {n: section for n, section in saved.items() if isinstance(n, int)}
        found["lesson"] = ([saved[3]["run"], saved[4]["run"]], SUMMARY, summary(exercises))
    for key, (runs, title, markdown) in found.items():
        measured = [f"*Measured by `{run['command']}` on {machine.summary(run['machine'])}, "
                    f"{run['date']}{', busy (' + run['busy'] + ')' if run['busy'] else ''}.*"
                    for run in runs]
        measured = list(dict.fromkeys(measured))    # two exercises of one run: one line
        # Its figures stay in the results folder (generated, not committed): named, not shown.
        markdown = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", r"(figure: \1, `results/\2` of the run)",
                          markdown)
        (Path(folder) / f"{key}.md").write_text(
            "\n".join([f"## {title}", "", *measured, "", markdown.strip(), ""]))
        log(f'took "{title}" from {results} into {folder}/{key}.md')
    if not found:
        raise ValueError(f"{results} holds no section of a full run of the lesson or a study: "
                         "run make lesson or make studies (not --quick) first")
    return sorted(found)


def main(argv=None):
    """make docs: assemble docs/RESULTS.md from docs/results/*.md; with --take RESULTS, first
    replace the lesson's and each study's section with those the full runs in RESULTS wrote."""
    parser = cli.Parser(prog="python -m harness.report", description=main.__doc__)
    parser.add_argument("--take", metavar="RESULTS", help="a results folder (results/)")
    args = parser.parse_args(argv)
    docs = Path(__file__).resolve().parents[1] / "docs"
    if args.take:
        take(args.take, docs / "results")
    (docs / "RESULTS.md").write_text(results_document(docs / "results"))
    print(f"wrote {docs / 'RESULTS.md'} from {len(RESULTS_SECTIONS)} sections in {docs / 'results'}")


if __name__ == "__main__":
    cli.run(main, sys.argv[1:])
