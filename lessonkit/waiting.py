"""
lessonkit/waiting.py: honest waiting: how long the rest of a loop will take from the steps timed
so far (Pace), one progress line redrawn in place (tqdm's bar in a terminal, one output in a
notebook), and durations as a person says them.
"""

import contextlib
import sys
import time


def duration(seconds):
    """Seconds as a person says them: "40 s", "3 min 10 s", "1 h 5 min" (never "0 min").
    A forecast's last digits are noise, so minutes keep tens of seconds, and hours minutes."""
    seconds = max(1, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 600:
        minutes, rest = divmod(round(seconds / 10) * 10, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


class Pace:
    """How long the rest of a loop of like steps will take, from the steps timed so far.

        pace = Pace(steps=1500, eval_every=250, eval_steps=5)
        each step:         pace.tick()          (at the same point of every step)
        after evaluating:  pace.evaluated()     (that step's interval also held an evaluation)
        pace.seconds_left()                     None until enough steps were timed

    The first `skip` steps are not timed (they allocate memory and run slow); the forecast waits
    for `min_steps` steps and `min_seconds` of timing, so that one hiccup does not make it (with
    less, a quiet run of the big model was once forecast to take far longer than it did). An
    evaluation runs every `eval_every` steps and at the last one: until one is timed, it is
    guessed to cost `eval_steps` steps. The clock is an argument so that tests can drive it.
    """

    def __init__(self, steps, done=0, *, eval_every=0, eval_steps=0.0, skip=3, min_steps=5,
                 min_seconds=5.0, clock=time.perf_counter):
        self.steps, self.done = steps, done
        self.eval_every, self.eval_steps = eval_every, eval_steps
        self.skip, self.min_steps, self.min_seconds = skip, min_steps, min_seconds
        self.clock = clock
        self.ticks, self.last, self.evaluating = 0, None, False
        self.step_seconds, self.timed_steps = 0.0, 0   # the ordinary steps timed
        self.eval_seconds = None                        # one evaluation, once timed

    def tick(self):
        now = self.clock()
        if self.last is not None and self.ticks > self.skip:
            interval = now - self.last
            if not self.evaluating:
                self.step_seconds += interval
                self.timed_steps += 1
            elif self.timed_steps:  # the evaluation is what the interval took beyond a step
                self.eval_seconds = max(0.0, interval - self.seconds_per_step())
        self.ticks, self.last, self.evaluating = self.ticks + 1, now, False
        self.done += 1

    def evaluated(self):   # the interval that ends at the next tick() held an evaluation
        self.evaluating = True

    def seconds_per_step(self):
        return self.step_seconds / self.timed_steps

    def evaluations_left(self):
        """Evaluations still to run: at each multiple of eval_every and at the last step."""
        if not self.eval_every:
            return 0
        first = max(1, self.done + 1 if self.evaluating else self.done)  # this step's, if due
        if first > self.steps:
            return 0
        every = self.eval_every
        return self.steps // every - (first - 1) // every + (self.steps % every != 0)

    def seconds_left(self):
        """The forecast in seconds, or None while too few steps were timed to make one."""
        if self.timed_steps < self.min_steps or self.step_seconds < self.min_seconds:
            return None
        per_step = self.seconds_per_step()
        per_eval = self.eval_steps * per_step if self.eval_seconds is None else self.eval_seconds
        return max(0, self.steps - self.done) * per_step + self.evaluations_left() * per_eval


def in_notebook():
    """Are we inside a Jupyter kernel (rather than a terminal, or a program that only imported
    ipykernel, as one that runs notebooks through nbclient does)?"""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None and not sys.stderr.isatty()


class ProgressLine:
    """One line saying how far a loop has come, redrawn in place.

        line = ProgressLine(total=1500, initial=0, label="big")
        line.update(step, f"loss {loss:.3f}", left=seconds)        # left: a forecast, or None
        line.write("a line of its own")                            # printed above the line
        line.close()

    In a terminal it is tqdm's bar (on stderr). In a Jupyter notebook it is one output updated
    in place (IPython's display_id), at most every `every` seconds: tqdm there writes to stderr,
    and an executed or exported notebook keeps every redraw, some 1,800 lines per model.
    """

    WIDTH = 20  # characters of the notebook line's bar

    def __init__(self, total, initial=0, label="", *, notebook=None, every=0.5,
                 clock=time.monotonic):
        self.total, self.n, self.label, self.text, self.left = total, initial, label, "", None
        self.notebook = in_notebook() if notebook is None else notebook
        self.every, self.clock = every, clock
        self.started = self.shown = clock()
        if self.notebook:
            from IPython.display import display
            self.handle = display({"text/plain": self.render()}, raw=True, display_id=True)
        else:
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=label or None, unit="step",
                            dynamic_ncols=True, file=sys.stderr)

    def update(self, n, text="", left=None):
        """n steps done of total; text after the bar; left: the seconds still to wait, if known
        (a terminal shows tqdm's own guess instead)."""
        self.n, self.text, self.left = n, text, left
        if not self.notebook:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(n - self.bar.n)
        elif self.clock() - self.shown >= self.every:
            self._show()

    def write(self, text, log=print):
        """log(text) as a line of its own (in a terminal, above tqdm's bar rather than into it)."""
        with contextlib.nullcontext() if self.notebook else self.bar.external_write_mode():
            log(text)

    def close(self):
        if self.notebook:
            self.left = None  # done: the last redraw says how long it took
            self._show()
        else:
            self.bar.close()

    def _show(self):
        self.shown = self.clock()
        self.handle.update({"text/plain": self.render()}, raw=True)

    def render(self):
        filled = round(self.WIDTH * self.n / max(1, self.total))
        parts = [f"{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
                 f"{self.n}/{self.total} steps".lstrip()] + ([self.text] if self.text else [])
        took = duration(self.clock() - self.started)
        parts.append(f"{took}, about {duration(self.left)} left" if self.left is not None
                     else took)
        return " | ".join(parts)
