"""
classroom/runner.py: checks run against a student's code, part by part, each part in a fresh
worker (sandbox.py), one part at a time when grading; scored, printed and saved. The checks run
here, in the grader's process, and call the student's functions in the worker through wire.py:
the fixtures, the references, the seed and the results never reach the student's code. A
submission is read and compiled inside the sandbox (intake.py). The order of a grade, its
seeds, time limits and why one part at a time: classroom/TEACHERS.md, "How a grade runs".
"""

import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from classroom import checks, expected, intake, plan, project, report, sandbox, wire
from lessonkit import machine, parts

TIMEOUT = 20        # seconds per check and seed (an honest check takes a second or two)
GRACE = 2           # seconds past a check's limit before the grader kills its worker outright
READ_TIME = 60      # seconds to read a submission
COMPILE_TIME = TIMEOUT  # seconds to compile one student file
LOG_BYTES = 64 * 1024


# ----------------------------------------------------------------------------------------------
# A submission: read and compiled in the sandbox


def read(box, submission, notes):
    """The student files ({file: its bytes}) of a folder, zip or bare git repository, read by
    intake.py in the sandbox; the grader opens it (never a link) and reads nothing of it. What
    the reader noted goes into `notes`."""
    path = Path(submission)
    if not path.exists() and not path.is_symlink():
        raise ValueError(f"no submission at {submission}")
    if path.is_symlink():
        notes.append(f"{path.name} is a link, not a submission")
        return {}
    limit = 8 * 64 * 1024 + len(parts.STUDENT_FILES) * (intake.MAX_FILE + 1)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        with tempfile.TemporaryDirectory(prefix="classroom-read-") as scratch:
            Path(scratch).chmod(0o711)
            reader = project.student_copy(Path(scratch) / "reader", only=project.READER_FILES)
            (Path(scratch) / "private").mkdir(mode=0o700)
            with tempfile.TemporaryFile(dir=Path(scratch) / "private") as out:
                job = box.start("reader", reader, "intake", ["read", f"/proc/self/fd/{fd}"],
                                pass_fds=(fd,), stdout=out)
                try:
                    job.process.wait(timeout=READ_TIME)
                except Exception:  # noqa: BLE001 (a timeout: what it wrote is what it read)
                    pass
                memory = job.end()
                out.seek(0)
                data = out.read(limit + 1)
    finally:
        os.close(fd)
    header, _, body = data.partition(b"\n")
    try:
        said = json.loads(header[:64 * 1024])
        files, said_notes, at = {}, [str(n)[:1000] for n in said["notes"]][:20], 0
        for name, length in said["files"]:
            if name not in parts.STUDENT_FILES or not 0 <= length <= intake.MAX_FILE or \
                    at + length > len(body):
                raise ValueError(name)
            files[name], at = body[at:at + length], at + length
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ValueError("the submission could not be read within the reader's limits"
                         + (" (out of memory)" if memory else "")) from None
    refused = next((n for n in said_notes if n.startswith("not graded: ")), None)
    if refused:                                 # the reader could not read it at all
        raise ValueError(f"{path.name}: {refused[len('not graded: '):]}")
    if not files and not any("missing" in n for n in said_notes):
        said_notes.append("no student file in the submission (an empty one?): expected "
                          f"{', '.join(parts.STUDENT_FILES)}")
    notes += said_notes
    return files


def compile_files(box, workspace, names, scratch):
    """{file: why it does not compile} of `names` in the workspace, compiled by intake.py in
    the sandbox, COMPILE_TIME seconds a file: a file the parser never finishes costs itself
    alone."""
    broken, left = {}, list(names)
    while left:
        with tempfile.TemporaryFile(dir=scratch) as out:
            job = box.start("numpy", workspace, "intake", ["compile", *left], stdout=out)
            seen, since = 0, time.monotonic()
            while job.process.poll() is None and time.monotonic() - since < COMPILE_TIME:
                time.sleep(0.05)
                count = os.fstat(out.fileno()).st_size
                if count != seen:
                    seen, since = count, time.monotonic()
            memory = job.end()
            done, begun = {}, set()
            out.seek(0)
            for line in out.read(1 << 20).splitlines():
                try:
                    entry = json.loads(line)
                    begun.add(str(entry.get("compiling")))
                    done[str(entry["file"])] = entry["error"]
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass
        broken.update({name: str(done[name])[:300] for name in left if done.get(name)})
        stuck = next((name for name in left if name not in done), None)
        if stuck is None:
            break
        if stuck not in begun:
            raise RuntimeError(f"the sandbox's job ended before it compiled {stuck}")
        broken[stuck] = ("out of memory while compiling" if memory else
                         f"did not compile within {COMPILE_TIME} s")
        left = left[left.index(stuck) + 1:]
    return broken


# ----------------------------------------------------------------------------------------------
# Running the checks


class Worker:
    """One part's worker job as the grader holds it: its socket, its log, the references of the
    other parts lent to it (plan.references())."""

    def __init__(self, box, workspaces, part, slot):
        self.part, self.torch_free = part, parts.BY_ID[part].file in parts.NUMPY_ONLY
        self.root = workspaces[self.torch_free]
        ours, theirs = socket.socketpair()
        self.log = Tail()
        try:
            self.job = box.start("numpy" if self.torch_free else "torch", self.root, "worker",
                                 [str(theirs.fileno())] + ["numpy"] * self.torch_free,
                                 pass_fds=(theirs.fileno(),), slot=slot, stdout=self.log.fd)
        finally:
            theirs.close()
            self.log.started()
        self.pidfd = os.pidfd_open(self.job.process.pid)     # the watchdog's: never another's
        self.sock, self.peer = ours, wire.Peer(ours, lends_anything=False)
        self.remote, self.lent = wire.Remote(self.peer, 1), False

    def run(self, check, seed, left, source):
        """One check at one seed, within `left` seconds: its outcome."""
        self.peer.deadline = time.monotonic() + left
        watchdog = threading.Timer(left + GRACE, self.kill)     # whatever the grader waits on
        watchdog.start()
        ctx = checks.RemoteContext(seed, plan.fixtures(seed), source, self.remote)
        try:
            if not self.lent and plan.references(self.part):
                self.remote.use_references([(key, wire.Exposed(f))
                                            for key, f in plan.references(self.part).items()])
            self.lent = True
            return checks.run_check(check, ctx, self.root)
        except (wire.Timeout, socket.timeout):
            return {"status": "timeout", "message": f"did not finish within {left:.0f} s: "
                    f"{checks.why_stuck(self.part, ctx.recorders)}"}
        except wire.ProtocolError as e:
            self.end()
            return {"status": "crashed", "message": f"the check's process sent what the "
                    f"grader cannot read ({e}): ended"}
        except (wire.Gone, OSError):
            memory = self.end()
            return {"status": "crashed", "message": (
                f"the check's processes used more than {sandbox.MEMORY >> 30} GB together: "
                "killed" if memory else f"the check's process ended before reporting: "
                f"{self.log.last_line()[:300]}")}
        finally:
            watchdog.cancel()

    def kill(self):
        """The job's own process killed (its socket then closes): from the watchdog."""
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            pass

    def end(self):
        """Kill the job whole: whether it ran out of memory."""
        if self.sock.fileno() < 0:
            return False
        memory = self.job.end()
        self.sock.close()
        os.close(self.pidfd)
        self.log.thread.join(1.0)
        return memory


class Tail:
    """A pipe a job writes its output into and a thread here drains, keeping its last LOG_BYTES
    (what a crash's message quotes): a job that prints without end neither blocks nor fills a
    disk."""

    def __init__(self):
        self.read_end, self.fd = os.pipe()
        self.tail, self.thread = bytearray(), threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        while chunk := os.read(self.read_end, 1 << 16):
            self.tail += chunk
            del self.tail[:-LOG_BYTES]
        os.close(self.read_end)

    def started(self):
        os.close(self.fd)                   # the job holds its own copy of the write end

    def last_line(self):
        self.thread.join(1.0)
        return (bytes(self.tail).decode(errors="replace").strip().splitlines() or
                ["no output"])[-1]


def run_part(box, workspaces, part, runs, slot, source, end, stalled, worker=None):
    """runs: [(Result, seed)] of one part, in order, against one worker (`worker`, started
    ahead, or a fresh one; a fresh one after a check that crashed or ran out of time)."""
    try:
        for result, seed in runs:
            left = TIMEOUT if end is None else min(TIMEOUT, end - time.monotonic())
            if part in stalled or left <= 0:
                result.outcomes[seed] = {"status": "timeout", "message": (
                    f"not run: another check of part {part} did not finish within {TIMEOUT} s"
                    if part in stalled else "not run: the grade's time ran out")}
                continue
            try:
                worker = worker or Worker(box, workspaces, part, slot)
            except OSError as e:
                result.outcomes[seed] = {"status": "crashed", "message": f"the check's "
                                         f"process could not start ({e}): regrade it"}
                continue
            result.outcomes[seed] = outcome = worker.run(result.check, seed, left, source)
            if outcome["status"] in ("timeout", "crashed"):
                stalled.update([part] if outcome["status"] == "timeout" else [])
                worker.end()
                worker = None
    finally:
        if worker is not None:
            worker.end()


def run_checks(box, workspaces, selected, seeds, *, missing=(), broken=None, budget=None,
               source=None, alone=None):
    """Run every check in `selected` at every seed, a part's public checks and then its
    hidden ones in one worker. workspaces: {torch_free: the project copy its jobs see}.
    missing: student files absent from the submission; broken: {file: why it does not
    compile}; their parts are not run.

    alone (the default when grading): one part at a time, no two workers of a submission ever
    alive together (why: TEACHERS.md, "How a grade runs"), the next part's started meanwhile;
    else (a student's own check) two parts side by side."""
    broken, source = broken or {}, source or expected.source()
    alone = (box.how != "plain" or len(seeds) > 1) if alone is None else alone
    results = [report.Result(c) for c in selected]
    end = None if budget is None else time.monotonic() + budget
    stalled, by_part = set(), {}
    for seed in seeds:
        plan.fixtures(seed)                     # made here once, before any thread
        for result in results:
            file = parts.BY_ID[result.check.part].file
            if file in missing:
                result.outcomes[seed] = {"status": "missing", "message": f"missing {file}"}
            elif file in broken:
                result.outcomes[seed] = {"status": "error", "message":
                                         f"{file} does not compile: {broken[file]}"}
            else:
                by_part.setdefault(result.check.part, []).append((result, seed))
    items = list(by_part.items())
    with machine.threads(1):        # the grader's tiny models beside the workers: one thread
        if alone:
            run_in_turn(box, workspaces, items, source, end, stalled)
        else:
            slots, mine = iter(range(2)), threading.local()     # a job slot per thread

            def one(item):
                run_part(box, workspaces, *item, mine.slot, source, end, stalled)
            with ThreadPoolExecutor(2, initializer=lambda: setattr(mine, "slot", next(slots))) \
                    as pool:
                list(pool.map(one, items))
    return results


def run_in_turn(box, workspaces, items, source, end, stalled):
    """items: [(part, runs)], one part after the other, the next part's worker started meanwhile
    (in a uid slot of its own: this part's end kills not it)."""
    ahead = None
    try:
        for i, (part, runs) in enumerate(items):
            worker, ahead = ahead, None
            if i + 1 < len(items) and (end is None or time.monotonic() < end):
                try:
                    ahead = Worker(box, workspaces, items[i + 1][0], (i + 1) % 2)
                except OSError:
                    ahead = None
            run_part(box, workspaces, part, runs, i % 2, source, end, stalled, worker)
    finally:
        if ahead is not None:
            ahead.end()


def grade(box, files, selected, seeds, notes, budget=None):
    """The student files of a submission ({file: bytes}, from read()) compiled and checked in
    the sandbox. -> results."""
    with tempfile.TemporaryDirectory(prefix="classroom-grade-") as scratch:
        scratch = Path(scratch)
        scratch.chmod(0o711)               # its workspaces open to the jobs, the rest not
        private = scratch / "private"
        private.mkdir(mode=0o700)
        started = time.monotonic()
        missing = [name for name in parts.STUDENT_FILES if name not in files]
        whole = project.student_copy(scratch / "compile", files)
        broken = compile_files(box, whole, [n for n in parts.STUDENT_FILES if n in files],
                               private)
        for name, why in broken.items():
            notes.append(f"{name} does not compile ({why}): its parts score 0, the others run "
                         "with the blank version of it")
        kept = {name: data for name, data in files.items() if name not in broken}
        workspaces = {False: project.student_copy(scratch / "project", kept),
                      True: project.student_copy(scratch / "numpy-only", kept,
                                                 only=project.TORCH_FREE_FILES)}
        shutil.rmtree(whole)
        left = None if budget is None else budget - (time.monotonic() - started)
        return run_checks(box, workspaces, selected, seeds, missing=missing, broken=broken,
                          budget=left)
