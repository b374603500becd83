"""
beyond/hf.py: the lesson's models in Hugging Face transformers (export and import of a
checkpoint as a GPT2LMHeadModel folder), and transformers' models in the lesson's decoders
(HFModel: any causal LM as a target or a draft). Needs: pip install -e '.[hf]'.

    python -m beyond.hf export --preset big     # checkpoints/big.pt -> checkpoints/big-hf/
    out, stats = speculative_generate(HFModel(big), HFModel(small), idx, 100, k=4)

How it stays exact: docs/DESIGN.md, "beyond/, module by module". Shapes: B, T, C, V.
"""

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import torch

import gpt
from beyond import presets
from lessonkit import cli
from lessonkit.scorer import WindowScorer

INSTALL = "install it with: pip install -e '.[hf]'"
# Our nn.Linear weights are (out, in); GPT-2's Conv1D layers keep (in, out): these are transposed.
TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def transformers():
    """The transformers package, or a one-line error saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ValueError(f"this needs Hugging Face transformers, which is not installed; "
                         f"{INSTALL}") from None
    return transformers


# ----------------------------------------------------------------------------------------------
# 1. Export and import


def to_transformers(model):
    """A gpt.GPT -> a transformers GPT2LMHeadModel with the same weights (eval mode)."""
    tf, c = transformers(), model.c
    config = tf.GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer,
        n_head=c.n_head, n_inner=4 * c.n_embd, activation_function="gelu_new",  # tanh GELU
        layer_norm_epsilon=1e-5, resid_pdrop=c.dropout, embd_pdrop=c.dropout,
        attn_pdrop=c.dropout, scale_attn_weights=True, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)  # characters: no special token
    hf_model = tf.GPT2LMHeadModel(config).eval()
    copy_weights(model.state_dict(), hf_model)
    return hf_model


def from_transformers(hf_model):
    """A transformers GPT2LMHeadModel (ours, exported) -> a gpt.GPT with the same weights."""
    hc = hf_model.config
    if hc.model_type != "gpt2":
        raise ValueError(f"only GPT-2 models can become a gpt.GPT, not {hc.model_type!r}; "
                         f"decode with any causal LM through HFModel instead")
    differences = {"activation_function": (hc.activation_function, "gelu_new"),
                   "layer_norm_epsilon": (hc.layer_norm_epsilon, 1e-5),
                   "n_inner": (hc.n_inner or 4 * hc.n_embd, 4 * hc.n_embd),
                   "scale_attn_weights": (hc.scale_attn_weights, True),      # 1/sqrt(hs)
                   "scale_attn_by_inverse_layer_idx": (hc.scale_attn_by_inverse_layer_idx, False),
                   "tie_word_embeddings": (hc.tie_word_embeddings, True)}
    for name, (got, want) in differences.items():
        if got != want:
            raise ValueError(f"this GPT-2 has {name}={got!r}; gpt.GPT has {want!r}")
    model = gpt.GPT(gpt.Config(vocab_size=hc.vocab_size, block_size=hc.n_positions,
                               n_layer=hc.n_layer, n_head=hc.n_head, n_embd=hc.n_embd)).eval()
    copy_weights(hf_model.state_dict(), model)
    return model


def copy_weights(source, model):
    """Copy a state dict (ours or GPT-2's) into `model` (GPT-2's or ours), by GPT-2 name,
    transposing the four Conv1D weights; every shape is checked."""
    params = dict(model.named_parameters())  # lm_head.weight is wte's, tied: not listed again
    with torch.no_grad():
        for name, p in params.items():
            w = source[name]
            if name.endswith(TRANSPOSED):
                w = w.t()                             # (out, in) <-> (in, out)
            assert w.shape == p.shape, f"{name}: {tuple(w.shape)} does not fit {tuple(p.shape)}"
            p.copy_(w)


def export(model, folder, *, characters=None, info=None):
    """Write `model` (a gpt.GPT) to `folder` as a GPT2LMHeadModel (save_pretrained, safetensors)
    plus specdec.json: the characters (default: the corpus') and `info` (step, loss, corpus)."""
    folder = Path(folder)
    to_transformers(model).save_pretrained(folder)  # model.safetensors
    meta = {"format": "specdec-gpt/1", "characters": characters or gpt.vocab(), **(info or {})}
    (folder / "specdec.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return folder


def load(folder):
    """A folder written by export() -> (gpt.GPT in eval mode, the specdec.json dictionary)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} holds no transformers model (no config.json); write one "
                         f"with: python -m beyond.hf export --preset big --out {folder}")
    if not (folder / "specdec.json").is_file():
        raise ValueError(f"{folder} holds a transformers model but not one beyond.hf exported (no "
                         f"specdec.json with its characters); decode with it through HFModel")
    meta = json.loads((folder / "specdec.json").read_text(encoding="utf-8"))
    try:
        hf_model = transformers().GPT2LMHeadModel.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as e:  # no weights file, or not a GPT-2
        raise ValueError(f"{folder} holds no readable GPT-2 ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    model = from_transformers(hf_model)
    if len(meta["characters"]) != model.c.vocab_size:
        raise ValueError(f"{folder}: specdec.json lists {len(meta['characters'])} characters "
                         f"but the model has {model.c.vocab_size} tokens")
    return model, meta


# ----------------------------------------------------------------------------------------------
# 2. Any transformers causal LM as a target or a draft


class DynamicKV:
    """transformers' DynamicCache behind the rollback(length) that a WindowScorer calls."""

    def __init__(self):
        self.kv = transformers().DynamicCache()
        self.length = 0  # tokens cached (counted here: asking the cache costs a little)

    def rollback(self, length):
        if length == 0:
            self.kv = transformers().DynamicCache()
        elif length < self.length:
            self.kv.crop(length - self.length)  # negative: remove that many (transformers 4 and 5)
        self.length = length


class HFModel(WindowScorer):
    """A transformers causal LM as a scorer.WindowScorer (see the module docstring). vocab_size:
    the vocabulary both models share (default config.vocab_size; the tokenizer's length cuts
    padded logits); window: the longest context it is given (default max_position_embeddings)."""

    def __init__(self, model, vocab_size=None, window=None):
        config = model.config
        arguments = inspect.signature(model.forward).parameters
        # transformers 5 calls the cache argument `cache`, transformers 4 `past_key_values`.
        self.cache_arg = next((a for a in ("cache", "past_key_values") if a in arguments), None)
        if self.cache_arg is None or config.is_encoder_decoder:
            raise ValueError(f"{type(model).__name__} is not a causal LM with a KV cache "
                             f"(its forward takes no `cache` or `past_key_values`); HFModel "
                             f"needs one")
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.vocab_size = vocab_size or config.vocab_size
        self.block_size = window or getattr(config, "max_position_embeddings", None) or 2 ** 62
        self.passes, self.checked = 0, False
        self.reset()

    def reset(self, batch_size=1):             # a new sequence (or batch) starts
        self.cache = DynamicKV()
        self.fed = [[] for _ in range(batch_size)]  # the tokens in the cache, per sequence
        self.starts = [0] * batch_size              # each sequence's window start

    def parameters(self):  # so that speculative.on_gpu can find the device
        return self.model.parameters()

    def score(self, seqs, first):
        if len(seqs) != len(self.fed):
            self.reset(len(seqs))
        return super().score(seqs, first)

    def logits(self, new):
        """Feed new tokens (B lists of t ids) through the model and the cache: logits (B, t, V)."""
        with torch.inference_mode():
            ids = torch.tensor(new, device=self.device)                             # (B, t)
            logits = self.model(input_ids=ids, use_cache=True,
                                **{self.cache_arg: self.cache.kv}).logits       # (B, t, V')
        self.cache.length += ids.shape[1]
        if not self.checked:  # once: does the model really extend the cache it is given?
            if self.cache.kv.get_seq_length() != self.cache.length:
                raise ValueError(f"{type(self.model).__name__} did not fill the KV cache it "
                                 f"was given; HFModel needs a model that takes a DynamicCache")
            self.checked = True
        if logits.shape[-1] != self.vocab_size:
            logits = logits[..., :self.vocab_size]  # a padded vocabulary: the real tokens only
        return logits.float().cpu().numpy()                                     # (B, t, V)


# ----------------------------------------------------------------------------------------------
# The command line


@dataclass
class ExportArgs:
    preset: str = "big"         # the trained preset to export (checkpoints/<preset>.pt)
    out: str = ""               # the folder to write (default: <checkpoints>/<preset>-hf)
    force: bool = False         # write into the folder even if it exists (replaces its files)
    checkpoints: str = ""       # checkpoint folder (default: checkpoints/)


@dataclass
class ImportArgs:
    preset: str = "big"         # save as this preset's checkpoint (<checkpoints>/<preset>.pt)
    force: bool = False         # replace that checkpoint if it exists
    checkpoints: str = ""       # checkpoint folder (default: checkpoints/)


def export_command(args):
    folder = args.checkpoints or None
    out = Path(args.out) if args.out else presets.checkpoint_path(args.preset, folder) \
        .with_name(f"{args.preset}-hf")
    presets.preset(args.preset)  # an unknown name lists the presets
    if out.exists() and not args.force:
        raise ValueError(f"{out} exists; pass --force to write into it (replaces its files)")
    model, state = gpt.load_checkpoint(presets.checkpoint_path(args.preset, folder),
                                       hint=presets.train_command(args.preset, folder))
    export(model, out, characters=state["vocab"],
           info={k: state[k] for k in ("step", "val_loss", "corpus")} | {"preset": args.preset})
    print(f"wrote {out} (GPT2LMHeadModel, {model.num_params():,} parameters, "
          f"{model.c.vocab_size} characters in specdec.json)")


def import_command(directory, args):
    target = presets.checkpoint_path(args.preset, args.checkpoints or None)
    presets.preset(args.preset)
    if target.exists() and not args.force:
        raise ValueError(f"{target} exists; pass --force to replace it")
    model, meta = load(directory)
    if meta["characters"] != gpt.vocab():
        raise ValueError(f"{directory} was trained on other characters ({len(meta['characters'])})"
                         f" than the corpus ({len(gpt.vocab())}); it cannot be saved as ours")
    gpt.save_checkpoint(target, model, step=meta.get("step", 0),
                        val_loss=meta.get("val_loss", float("nan")),
                        corpus_name=meta.get("corpus", "shakespeare"))
    print(f"wrote {target} from {directory}")


def main(argv=None):
    parser = cli.Parser(description="Move the lesson's models to and from Hugging Face "
                        "transformers (GPT2LMHeadModel folders).")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    export_parser = commands.add_parser("export", help="a trained checkpoint -> a folder")
    cli.add_fields(export_parser, ExportArgs, title="export")
    import_parser = commands.add_parser("import", help="a folder -> a trained checkpoint")
    import_parser.add_argument("directory", help="a folder written by `python -m beyond.hf export`")
    cli.add_fields(import_parser, ImportArgs, title="import")
    args = parser.parse_args(argv)
    transformers().logging.disable_progress_bar()  # not installed: one line, before any work
    if args.command == "export":
        export_command(cli.take(ExportArgs, args))
    else:
        import_command(args.directory, cli.take(ImportArgs, args))


if __name__ == "__main__":
    cli.run(main)
