"""The command lines: user mistakes end in one line, never a traceback; the cache works."""

import pytest

pytestmark = pytest.mark.slow  # command lines, each a process: not in make test-fast

TINY = ["--n_layer", "1", "--n_head", "2", "--n_embd", "16", "--block_size", "32",
        "--batch_size", "4", "--eval_every", "5", "--eval_batches", "1", "--warmup_steps", "2"]


def one_line_error(result, *words):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("args, words", [
    (["--preset", "huge"], ["unknown preset 'huge'", "big"]),
    (["--steps", "many"], ["invalid int value", "-h"]),
    (["--no_such_flag"], ["unrecognized arguments"]),
    (["--n_embd", "30", "--n_head", "4", "--preset", "draft"], ["multiple of n_head"]),
    (["--resume", "--fresh"], ["contradict"]),
    (["--steps", "0"], ["--steps must be at least 1"]),
    (["--threads", "-1"], ["--threads is 0"]),
])
def test_train_bad_input(run_here, args, words):
    one_line_error(run_here("train.py", *args), *words)


def test_train_help_lists_the_config_fields(run_here):
    result = run_here("train.py", "-h")
    assert result.returncode == 0
    for flag in ["--n_layer", "--block_size", "--lr", "--steps", "--preset", "--device", "--resume"]:
        assert flag in result.stdout


def test_train_caches_and_retrains_on_new_settings(run_script, run_here, tmp_path):
    # train.py's one run end to end, then the same command line in this process
    args = ["train.py", "--preset", "draft", "--steps", "6", "--checkpoints", tmp_path, "--quiet",
            "--sample", "0", *TINY]
    first = run_script(*args)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "draft.pt").exists()
    again = run_here(*args)
    assert "already trained" in again.stdout + again.stderr
    more = run_here(*args[:4], "8", *args[5:])
    assert "other settings" in more.stdout + more.stderr
    assert (tmp_path / "draft.prev.pt").exists()
    resumed = run_here(*args[:4], "10", *args[5:], "--resume")
    assert "resuming at step 8 of 10" in resumed.stdout + resumed.stderr


@pytest.mark.parametrize("args, words", [
    (["--prompt", "ROMEO: caf\u00e9"], ["unknown characters", "\u00e9"]),
    (["--k", "0"], ["k (draft tokens per round) must be a whole number >= 1"]),
    (["--temperature", "-0.5"], ["temperature must be a number >= 0"]),
    (["--top_p", "1.5", "--temperature", "1"], ["top_p must be in (0, 1]"]),
    (["--draft", "huge"], ["unknown draft 'huge'", "ngram"]),
    (["--target_backend", "jax"], ["torch or numpy"]),
    (["--prompt", ""], ["the prompt is empty"]),
    (["--adaptive", "sometimes"], ["--adaptive is off, heuristic, best or confidence"]),
])
def test_speculative_bad_input(run_here, tmp_path, args, words):
    one_line_error(run_here("-m", "harness.decode", "--checkpoints", tmp_path, *args), *words)


def test_speculative_missing_checkpoint_says_how_to_train(run_here, tmp_path):
    # The hint must train into the folder that was asked for, or the same error comes back.
    one_line_error(run_here("-m", "harness.decode", "--checkpoints", tmp_path),
                   f"no checkpoint at {tmp_path}/big.pt",
                   f"train it with: python train.py --preset big --checkpoints {tmp_path}")


def test_missing_checkpoint_hint_omits_the_default_folder():
    from beyond import presets
    assert presets.train_command("big") == "python train.py --preset big"
    assert presets.train_command("big", presets.CHECKPOINTS) == "python train.py --preset big"
    assert presets.train_command("draft", "my models") == \
        "python train.py --preset draft --checkpoints 'my models'"


class Captured(Exception):
    """Raised instead of parsing, carrying the parser a command built."""


def parser_of(main, monkeypatch):
    from lessonkit import cli

    def capture(self, *args, **kwargs):
        raise Captured(self)
    monkeypatch.setattr(cli.Parser, "parse_args", capture)
    with pytest.raises(Captured) as caught:
        main([])
    return caught.value.args[0]


def commands():
    import train
    from beyond import heads
    from harness import benchmark, decode
    from exercises import __main__ as lesson
    from exercises import ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu
    from studies import drafters
    return {"train.py": train.main, "harness.decode": decode.main,
            "harness.benchmark": benchmark.main, "python -m exercises": lesson.main,
            "python -m beyond.heads": heads.main, "studies.drafters": drafters.main,
            **{f"exercises.{m.__name__.split('.')[-1]}": m.main
               for m in (ex1_watch, ex2_derive, ex3_build, ex4_break, ex5_gpu)}}


@pytest.mark.parametrize("name", list(commands()))
def test_every_flag_has_help(name, monkeypatch):
    parser = parser_of(commands()[name], monkeypatch)
    flags = [action for action in parser._actions if action.option_strings != ["-h", "--help"]]
    assert len(flags) >= 3
    for action in flags:
        text = (action.help or "").replace("(default: %(default)s)", "").strip()
        assert len(text) >= 8, f"{name} {action.option_strings[-1]} has no help text"


def test_help_comes_from_the_field_comment():
    from dataclasses import dataclass

    from lessonkit import cli

    @dataclass
    class Flags:
        width: int = 3         # how wide, in characters
        label: str = "a # b"   # a '#' inside a string is not a comment
        bare: int = 1
    comments = cli.field_comments(Flags)
    assert comments == {"width": "how wide, in characters",
                        "label": "a '#' inside a string is not a comment"}


def test_train_cuda_without_gpu(run_here):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    one_line_error(run_here("train.py", "--device", "cuda"), "no CUDA GPU", "--device cpu")


def test_speculative_runs_and_colours_only_terminals(run_script, run_here, tmp_path):
    # speculative.py's and harness.benchmark's one run end to end each; the rest in this process
    args = ["--preset", "big", "draft", "--steps", "5", "--checkpoints", tmp_path, "--quiet",
            "--sample", "0", *TINY]
    assert run_here("train.py", *args).returncode == 0
    # the contract's command: speculative.py starts harness/decode.py in its place
    result = run_script("speculative.py", "--checkpoints", tmp_path, "--max_new_tokens", "20",
                        "--prompt", "ROMEO:\\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ROMEO:\n") and "\033[" not in result.stdout  # not a terminal
    assert "identical to plain greedy decoding" in result.stdout
    assert "tokens per pass" in result.stdout
    table = run_here("-m", "harness.decode", "--checkpoints", tmp_path, "--max_new_tokens", "20",
                       "--draft", "ngram", "--k", "6")  # no model: a table from the text
    assert table.returncode == 0, table.stderr
    assert "identical to plain greedy decoding" in table.stdout
    assert (tmp_path / "ngram5.npz").exists()
    adaptive = run_here("-m", "harness.decode", "--checkpoints", tmp_path, "--max_new_tokens", "20",
                          "--draft", "ngram", "--adaptive", "heuristic")
    assert adaptive.returncode == 0, adaptive.stderr
    assert "identical to plain greedy decoding" in adaptive.stdout
    nothing = run_here("-m", "harness.decode", "--checkpoints", tmp_path, "--max_new_tokens", "0")
    assert nothing.returncode == 0 and "0 new tokens" in nothing.stdout, nothing.stderr  # no 0/0
    bench = run_script("-m", "harness.benchmark", "--checkpoints", tmp_path, "--prompts", "1",
                       "--new_tokens", "8", "--ks", "2", "--drafts", "draft", "--repeats", "1",
                       "--setups", "numpy/numpy", "--no-recompute", "--json", tmp_path / "b.json")
    assert bench.returncode == 0 and (tmp_path / "b.json").exists(), bench.stderr


@pytest.mark.parametrize("args, words", [
    (["--ks", "0"], ["--ks takes whole numbers >= 1"]),
    (["--drafts", "huge"], ["unknown draft 'huge'"]),
])
def test_benchmark_bad_input_is_refused_before_anything_runs(run_here, tmp_path, args, words):
    one_line_error(run_here("-m", "harness.benchmark", "--checkpoints", tmp_path, *args), *words)
